// Subcommand registry of the `loom` command. Each cmd_*.cpp defines one `register_*` function
// that adds its subcommand and a callback (CLI11's final_callback) doing the work; main() calls
// register_all() and then run_selected(), which runs the parsed subcommand's action so errors
// are caught in one place.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace loom::cli {

// Stores the action of a subcommand; run_selected() calls the action of the one parsed.
void set_action(CLI::App* sub, std::function<void()> action);
void register_all(CLI::App& app);
// --numerics exact|fast (kernels.h "Numerics"): sets the process default the engines take
// (overrides LOOM_NUMERICS).
void add_numerics_option(CLI::App* sub);
void run_selected(CLI::App& app);
// After a failed parse: "loom generate has no option --max-tokns (did you mean --max-tokens?)" for
// the first argument the parsed command does not know (a flag, or a word where a subcommand was
// expected), the suggestion one of that command's own visible names; "" when every argument was
// known (the parse failed for another reason).
std::string unknown_argument_message(CLI::App& app);

// Registration functions (one per cmd_*.cpp).
void register_generate(CLI::App& app);
void register_info(CLI::App& app);
void register_synth(CLI::App& app);
void register_quantize(CLI::App& app);  // cmd_quantize.cpp
void register_sim(CLI::App& app);
void register_plan(CLI::App& app);
void register_profile(CLI::App& app);  // cmd_profile.cpp
void register_bench_offline(CLI::App& bench);  // under `loom bench`
void register_bench_serve(CLI::App& bench);    // under `loom bench`
void register_serve(CLI::App& app);
// Hidden `loom tokenize --model PATH --text T [--no-bos]`: token ids as a JSON array (tests).
void register_tokenize(CLI::App& app);

}  // namespace loom::cli
