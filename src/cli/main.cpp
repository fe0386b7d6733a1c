// The `loom` command. Each subcommand lives in its own cli/cmd_*.cpp and registers itself here.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "cli/cli.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"loom: LLM inference with a runtime-chosen parallel layout, and a simulator/planner"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  loom::cli::register_all(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    loom::cli::run_selected(app);
  } catch (const loom::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const loom::InternalError& e) {
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
