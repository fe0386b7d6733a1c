// The `loom` command. Each subcommand lives in its own cli/cmd_*.cpp and registers itself here.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "cli/cli.h"
#include "cli/option_ranges.h"
#include "core/error.h"

#ifndef LOOM_VERSION
#define LOOM_VERSION "unknown"
#endif

int main(int argc, char** argv) {
  CLI::App app{"loom: LLM inference with a runtime-chosen parallel layout, and a simulator/planner"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  // `loom --version`: "loom X.Y" (the project version in CMakeLists.txt), exit 0.
  app.set_version_flag("--version", "loom " LOOM_VERSION, "Print loom's version and exit");
  try {
    loom::cli::register_all(app);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, as every other user error (an option out of its range names the option, the
    // value and the range: cli/option_ranges.h). Arguments the command does not know, and a
    // missing required option (a misspelt --model leaves --model missing), name the first unknown
    // argument with the closest name the command has; a bad value of a known option says so itself.
    const bool unknown_may_explain = dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr ||
                                     dynamic_cast<const CLI::RequiredError*>(&e) != nullptr;
    const std::string unknown = unknown_may_explain ? loom::cli::unknown_argument_message(app) : std::string();
    std::fprintf(stderr, "error: %s\n", unknown.empty() ? e.what() : unknown.c_str());
    return 1;
  }
  try {
    loom::cli::check_environment();
    loom::cli::run_selected(app);
  } catch (const loom::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const loom::InternalError& e) {
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", loom::describe_exception(e).c_str());
    return 1;
  }
  return 0;
}
