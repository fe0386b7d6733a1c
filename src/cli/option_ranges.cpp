#include "cli/option_ranges.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/error.h"
#include "core/json_bounded.h"
#include "core/sysmem.h"

namespace loom::cli {

namespace {

constexpr long double kInt32Max = 2147483647.0L;
constexpr long double kUint64Max = 18446744073709551615.0L;

int cores() {
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? int(n) : 1;
}

std::string threads_why() { return cat("at most max(64, 8 x the ", cores(), " cores of this machine)"); }
std::string memory_why() {
  return cat("at most the machine's memory, ", (unsigned long long)max_memory_bytes(), " bytes");
}

// The table. Integer options unless marked real. Where a bound comes from something other than
// the option's meaning, `why` says what: the machine (cores, memory) or a limit elsewhere in loom.
std::vector<OptionRange> build_table() {
  const long double threads = max_threads();
  const long double mem = max_memory_bytes();
  const long double ctx = 1 << 24;    // tokens: beyond any model's context (16M)
  const long double lens = 1 << 22;   // synthetic lengths of the simulator and benchmarks (4M tokens)
  const long double reqs = 1e7;       // requests of a synthetic workload or trace prefix
  auto I = [](std::string cmd, std::string opt, long double lo, long double hi, std::string why = "") {
    return OptionRange{std::move(cmd), std::move(opt), lo, hi, true, false, std::move(why)};
  };
  // A size in bytes: an integer option that also takes K/M/G/T suffixes.
  auto B = [](std::string cmd, std::string opt, long double lo, long double hi, std::string why = "") {
    return OptionRange{std::move(cmd), std::move(opt), lo, hi, true, false, std::move(why), true};
  };
  auto R = [](std::string cmd, std::string opt, long double lo, long double hi, bool lo_open = false,
              std::string why = "") {
    return OptionRange{std::move(cmd), std::move(opt), lo, hi, false, lo_open, std::move(why)};
  };
  return {
      // ---- shared by the engine commands (generate, bench offline, serve, sim validate-engine) ----
      I("", "--threads", 0, threads, threads_why()),
      I("profile", "--threads", 1, threads, threads_why()),
      I("", "--ranks", 0, threads, threads_why() + "; 0: as the plan or mpirun says"),
      I("", "--max-num-seqs", 1, 8192),
      I("", "--max-tokens-per-step", 1, 1 << 20),
      I("", "--max-model-len", 0, ctx, "0: the model's context"),
      I("", "--block-size", 1, 1024),
      B("", "--kv-cache-bytes", 0, mem, memory_why()),
      B("sim validate-engine", "--kv-cache-bytes", 1, mem, memory_why()),
      B("", "--rank-memory-bytes", 0, mem, memory_why()),
      B("", "--cpu-kv-bytes", 0, mem, memory_why()),
      R("", "--kv-cache-fraction", 0, 1, /*lo_open=*/true),
      I("", "--shift-threshold", -1, ctx, "-1: from the cost model"),
      I("", "--sidp-threshold", -1, 1 << 20, "-1: from the cost model"),
      I("", "--seed", 0, kUint64Max),
      R("", "--temperature", 0, 1000),
      R("", "--rate-scale", 0, 1e6, /*lo_open=*/true),
      // ---- generate ----
      I("generate", "--max-tokens", 0, ctx),
      R("generate", "--top-p", 0, 1, /*lo_open=*/true),
      I("generate", "--top-k", 0, ctx, "0: off"),
      I("generate", "--prefill-chunk", 1, 1 << 20),
      // ---- serve ----
      I("serve", "--port", 0, 65535),
      I("serve", "--max-queue", 1, 65536),
      I("serve", "--http-threads", 0, 1024, "0: max-num-seqs + max-queue + 16, at most 1024"),
      I("serve", "--max-connections", 0, 1 << 20, "0: from the descriptor limit"),
      R("serve", "--header-timeout", 0, 3600, /*lo_open=*/true),
      R("serve", "--body-timeout", 0, 3600, /*lo_open=*/true),
      B("serve", "--max-body-bytes", 1024, 1 << 28, "at most 256 MiB: its parse is budgeted at 32x"),
      B("serve", "--max-inflight-bytes", 0, mem, memory_why() + "; 0: min(2 GiB, a quarter of it)"),
      R("serve", "--stall-timeout", 0.001L, 86400),
      R("serve", "--heartbeat-timeout", 0.001L, 3600),
      R("serve", "--window", 0, 3600, /*lo_open=*/true),
      I("serve", "--min-tp", 1, threads, threads_why()),
      I("serve", "--max-tp", 0, threads, threads_why() + "; 0: the pool size"),
      // ---- bench offline ----
      I("bench offline", "--num-requests", -1, reqs, "-1: the whole trace (synthetic: 64)"),
      // ---- bench serve ----
      R("bench serve", "--rate", 0, 1e6),
      R("bench serve", "--cv", 0, 1000, /*lo_open=*/true),
      R("bench serve", "--burst-on-s", 0, 86400, /*lo_open=*/true),
      R("bench serve", "--burst-off-s", 0, 86400),
      I("bench serve", "--num-requests", 0, reqs, "0: 100 (synthetic) or the whole trace"),
      I("bench serve", "--max-concurrency", 0, 1 << 20, "0: no limit"),
      R("bench serve", "--slo-ttft-ms", 0, 1e9, false, "0: none"),
      R("bench serve", "--slo-tpot-ms", 0, 1e9, false, "0: none"),
      // ---- sim ----
      I("sim run", "--num-requests", 1, reqs),
      I("sim run", "--prompt-len", 1, lens),
      I("sim run", "--output-len", 1, lens),
      I("sim run", "--max-requests", -1, reqs, "-1: all"),
      I("sim run", "--threshold", 0, ctx),
      I("sim run", "--max-num-seqs", 1, 1 << 16),
      R("sim run", "--sidp-window", 0, 86400, false, "0: 4 observations"),
      I("sim validate-engine", "--num-requests", 1, 1 << 20),
      I("sim validate-engine", "--prompt-len", 1, lens),
      I("sim validate-engine", "--output-len", 1, lens),
      I("plan", "--input-tokens", 1, lens),
      I("plan", "--output-tokens", 1, lens),
      I("plan", "--num-requests", 1, 1 << 20),
      R("plan", "--slo-ttft-ms", 0, 1e9, false, "0: none"),
      R("plan", "--slo-tpot-ms", 0, 1e9, false, "0: none"),
      I("plan", "--context", 0, ctx, "0: simulate requests"),
      // ---- profile (--tokens, --tp, --ranks, --concurrent are lists: src/profiler/profiler.cpp bounds them) ----
      I("profile", "--reps", 0, 10000, "0: 9 (quick: 5)"),
      I("profile", "--sweeps", 1, 10000),
      I("profile", "--budget-mib", 1, std::floor(mem / (1 << 20)), memory_why() + " (in MiB)"),
  };
}

const std::vector<OptionRange>& table() {
  static const std::vector<OptionRange> t = build_table();
  return t;
}

std::string bound_text(long double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e20L) {
    if (v < 0) return cat((long long)v);
    return cat((unsigned long long)v);
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6Lg", v);
  return buf;
}

constexpr const char* kSizeForms = " (sizes: an integer, or a number with K, M, G or T: powers of 1024, e.g. 64M, 4GiB, 512k)";

std::string range_text(const OptionRange& r) {
  return cat(r.lo_open ? "(" : "[", bound_text(r.lo), ", ", bound_text(r.hi), "]");
}

// The check CLI11 runs on each raw value before converting it ("" = fine). A size in bytes is
// rewritten to its integer (`*text` = "67108864" for "64M") once it is in range.
std::string check_value(const OptionRange& r, std::string* text_io) {
  const std::string& text = *text_io;
  const std::string shown = text_excerpt(text, 32);
  const std::string kind = r.integer ? "an integer" : "a number";
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) || text.size() > 64)
    return cat("'", shown, "' is not ", kind, r.bytes ? kSizeForms : "");
  errno = 0;
  char* end = nullptr;
  long double v = 0;
  if (r.bytes) {
    if (!parse_size(text, &v)) return cat("'", shown, "' is not an integer number of bytes", kSizeForms);
    // With a suffix the message also gives the bytes it stands for.
    const bool suffixed = text.find_first_not_of("+-0123456789") != std::string::npos;
    if (v < r.lo || v > r.hi)
      return cat(shown, suffixed ? cat(" (", bound_text(v), " bytes)") : std::string(), " is out of range ",
                 range_text(r), r.why.empty() ? "" : " (" + r.why + ")");
    *text_io = bound_text(v);
    return {};
  }
  if (r.integer) {
    if (text[0] == '-') {
      v = (long double)std::strtoll(text.c_str(), &end, 10);
    } else {
      v = (long double)std::strtoull(text.c_str(), &end, 10);
    }
  } else {
    v = std::strtold(text.c_str(), &end);
  }
  if (end == text.c_str() || *end != '\0') return cat("'", shown, "' is not ", kind);
  if (!std::isfinite(v)) return cat(shown, " is not a finite number");
  const bool below = r.lo_open ? !(v > r.lo) : v < r.lo;
  if (errno == ERANGE || below || v > r.hi)
    return cat(shown, " is out of range ", range_text(r), r.why.empty() ? "" : " (" + r.why + ")");
  return {};
}

bool is_numeric_type(const std::string& type) {
  return type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0 || type.rfind("FLOAT", 0) == 0 ||
         type.rfind("NUMBER", 0) == 0;
}

std::string command_path(const CLI::App* app) {
  std::string path;
  for (const CLI::App* a = app; a && a->get_parent(); a = a->get_parent())
    path = a->get_name() + (path.empty() ? "" : " " + path);
  return path;
}

std::string option_key(const CLI::Option* o) {
  if (!o->get_lnames().empty()) return "--" + o->get_lnames()[0];
  if (!o->get_snames().empty()) return "-" + o->get_snames()[0];
  return o->get_name();
}

void print(CLI::App* app) {
  const std::string path = command_path(app);
  for (CLI::Option* o : app->get_options()) {
    if (o->get_type_size() == 0 || !is_numeric_type(o->get_type_name())) continue;
    const OptionRange* r = find_option_range(path, option_key(o));
    if (!r) continue;
    std::printf("%s\t%s\t%.21Lg\t%.21Lg\t%s\t%d\n", path.c_str(), option_key(o).c_str(), r->lo, r->hi,
                r->integer ? "int" : "real", r->lo_open ? 1 : 0);
  }
  for (CLI::App* sub : app->get_subcommands({}))
    if (sub->get_name() != "option-ranges") print(sub);
}

void apply(CLI::App* app, std::vector<std::string>* missing) {
  const std::string path = command_path(app);
  for (CLI::Option* o : app->get_options()) {
    if (o->get_type_size() == 0 || !is_numeric_type(o->get_type_name())) continue;
    const std::string key = option_key(o);
    const OptionRange* r = find_option_range(path, key);
    if (!r) {
      missing->push_back(cat("loom ", path, " ", key, " (", o->get_type_name(), ")"));
      continue;
    }
    const OptionRange range = *r;
    if (range.bytes) {
      // transform, not check: the value CLI11 converts is the rewritten integer.
      o->transform(CLI::Validator([range](std::string& v) { return check_value(range, &v); },
                                  range_text(range) + " (K/M/G/T)", "range"));
    } else {
      o->check(CLI::Validator(
          [range](std::string& v) {
            std::string copy = v;
            return check_value(range, &copy);
          },
          range_text(range), "range"));
    }
  }
  for (CLI::App* sub : app->get_subcommands({})) apply(sub, missing);
}

}  // namespace

bool parse_size(const std::string& text, long double* bytes) {
  if (text.empty() || text.size() > 64 || std::isspace(static_cast<unsigned char>(text[0]))) return false;
  // The number: an integer, or (with a suffix) a decimal fraction.
  size_t i = 0;
  if (text[i] == '-' || text[i] == '+') ++i;
  const size_t digits_at = i;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  bool fraction = false;
  if (i < text.size() && text[i] == '.') {
    fraction = true;
    ++i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  }
  const std::string number = text.substr(0, i);
  if (number.find_first_of("0123456789", digits_at) == std::string::npos) return false;  // "", "-", ".", "M"
  std::string suffix = text.substr(i);
  for (char& c : suffix) c = char(std::tolower(static_cast<unsigned char>(c)));
  long double scale = 1;
  if (!suffix.empty()) {
    const std::string units = "kmgt";
    const size_t u = units.find(suffix[0]);
    if (u == std::string::npos) return false;
    const std::string tail = suffix.substr(1);
    if (!(tail.empty() || tail == "i" || tail == "ib" || tail == "b")) return false;
    scale = std::pow(1024.0L, (long double)(u + 1));
  } else if (fraction) {
    return false;  // "0.5" bytes
  }
  char* end = nullptr;
  const long double v = std::strtold(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(v)) return false;
  *bytes = std::floor(v * scale);
  return true;
}

int max_threads() { return std::max(64, 8 * cores()); }

long double max_memory_bytes() {
  const auto m = mem_total();
  return m ? (long double)*m : (long double)(int64_t(1) << 40);
}

std::vector<OptionRange> option_ranges() { return table(); }

const OptionRange* find_option_range(const std::string& command, const std::string& option) {
  const OptionRange* general = nullptr;
  for (const OptionRange& r : table()) {
    if (r.option != option) continue;
    if (r.command == command) return &r;
    if (r.command.empty()) general = &r;
  }
  return general;
}

void apply_option_ranges(CLI::App& app) {
  std::vector<std::string> missing;
  apply(&app, &missing);
  if (!missing.empty()) {
    std::string list;
    for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
    throw InternalError(cat("numeric options without a range in cli/option_ranges.cpp: ", list));
  }
}

void print_option_ranges(CLI::App& app) { print(&app); }

void check_environment() {
  struct Env {
    const char* name;
    OptionRange range;
  };
  const Env envs[] = {
      {"LOOM_THREADS", OptionRange{"", "", 1, (long double)max_threads(), true, false, threads_why()}},
      // A duration in nanoseconds must fit an int64 (1e10 s did not); a week is plenty.
      {"LOOM_COMM_TIMEOUT_S", OptionRange{"", "", 0, 604800, false, true, "seconds, at most a week"}},
  };
  for (const Env& e : envs) {
    const char* v = std::getenv(e.name);
    if (v == nullptr || *v == '\0') continue;
    std::string text = v;
    const std::string why = check_value(e.range, &text);
    if (!why.empty()) fail(e.name, ": ", why);
  }
}

}  // namespace loom::cli
