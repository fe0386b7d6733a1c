#include <cctype>
#include <map>

#include <cstdio>

#include "cli/cli.h"
#include "cli/option_ranges.h"
#include "core/error.h"
#include "core/suggest.h"
#include "kernels/kernels.h"

namespace loom::cli {

namespace {
std::map<CLI::App*, std::function<void()>>& actions() {
  static std::map<CLI::App*, std::function<void()>> m;
  return m;
}
}  // namespace

void set_action(CLI::App* sub, std::function<void()> action) { actions()[sub] = std::move(action); }

void add_numerics_option(CLI::App* sub) {
  sub->add_option_function<std::string>(
         "--numerics",
         [](const std::string& v) { kernels::set_default_numerics(kernels::parse_numerics(v.c_str(), "--numerics")); },
         "Matmul numerics: fast (int8 activation blocks for q8_0 weights, bf16 activations for bf16 weights; "
         "the default) or exact (f32 activations); LOOM_NUMERICS sets the default")
      ->check(CLI::IsMember({"exact", "fast"}));
}

void register_all(CLI::App& app) {
  register_generate(app);
  register_info(app);
  register_synth(app);
  register_quantize(app);
  register_sim(app);
  register_plan(app);
  register_profile(app);
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks: offline throughput, or a live server over HTTP");
  bench->require_subcommand(1);
  register_bench_offline(*bench);
  register_bench_serve(*bench);
  register_serve(app);
  register_tokenize(app);
  // Hidden: `loom --check-options CMD ...` parses and checks CMD's options, then stops before its
  // action (tests check a range's ends are accepted without running a workload of that size).
  app.add_flag("--check-options")->group("");
  // Hidden: every numeric option of every subcommand with its range, one per line (tests walk it).
  CLI::App* ranges = app.add_subcommand("option-ranges", "");
  ranges->group("");
  set_action(ranges, [&app] { print_option_ranges(app); });
  // Last: every numeric option registered above gets its range (cli/option_ranges.h).
  apply_option_ranges(app);
}

// Runs the action of the deepest parsed subcommand that has one.
void run_selected(CLI::App& app) {
  if (app.get_option("--check-options")->count() > 0) return;
  CLI::App* cur = &app;
  std::function<void()>* found = nullptr;
  while (cur) {
    auto it = actions().find(cur);
    if (it != actions().end()) found = &it->second;
    auto subs = cur->get_subcommands();
    cur = subs.empty() ? nullptr : subs.front();
  }
  if (found) (*found)();
}

namespace {

CLI::App* deepest_parsed(CLI::App& app) {
  CLI::App* cur = &app;
  for (;;) {
    auto subs = cur->get_subcommands();
    if (subs.empty()) return cur;
    cur = subs.front();
  }
}

bool looks_numeric(const std::string& s) {
  size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  return i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.');
}

}  // namespace

std::string unknown_argument_message(CLI::App& app) {
  CLI::App* sub = deepest_parsed(app);
  std::string path;
  for (const CLI::App* a = sub; a && a->get_parent(); a = a->get_parent())
    path = a->get_name() + (path.empty() ? "" : " " + path);
  const std::string cmd = path.empty() ? std::string("loom") : "loom " + path;
  const std::vector<std::string> rest = app.remaining(true);
  const bool has_subcommands = !sub->get_subcommands({}).empty();
  for (const std::string& arg : rest) {
    if (arg.empty() || arg == "--") continue;
    if (arg[0] == '-' && arg.size() >= 2 && !looks_numeric(arg)) {
      const std::string name = arg.substr(0, arg.find('='));
      // The visible options of the command itself (hidden test hooks are never suggested); a
      // one-letter flag is not matched (every other letter is one edit away).
      std::vector<std::string> names;
      for (const CLI::Option* o : sub->get_options()) {
        if (o->get_group().empty()) continue;
        for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
        for (const std::string& s : o->get_snames()) names.push_back("-" + s);
      }
      const std::string hint = name.size() > 2 ? did_you_mean(name, names) : std::string();
      return cat(cmd, " has no option ", name, hint.empty() ? cat("; `", cmd, " --help` lists its options") : hint);
    }
    if (arg[0] != '-' && has_subcommands) {
      // A word where a subcommand was expected (`loom generat`).
      std::vector<std::string> names;
      for (const CLI::App* c : sub->get_subcommands({}))
        if (!c->get_group().empty()) names.push_back(c->get_name());
      const std::string hint = did_you_mean(arg, names);
      return cat(cmd, " has no command '", arg, "'", hint.empty() ? cat("; `", cmd, " --help` lists them") : hint);
    }
  }
  return {};
}

}  // namespace loom::cli
