#include <map>

#include <cstdio>

#include "cli/cli.h"
#include "cli/option_ranges.h"
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

}  // namespace loom::cli
