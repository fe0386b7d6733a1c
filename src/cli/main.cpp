// The `loom` command. Each subcommand lives in its own cli/cmd_*.cpp and registers itself here.
#include <CLI/CLI.hpp>

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>

#include "cli/cli.h"
#include "cli/option_ranges.h"
#include "core/error.h"

#ifndef LOOM_VERSION
#define LOOM_VERSION "unknown"
#endif

namespace {

// Help wrapped to the terminal: each option's description in lines that fit the width (COLUMNS,
// else the terminal's, else 100), continued under the description column, as `vllm serve --help`
// and `llama-cli --help` read.
class WrappingFormatter : public CLI::Formatter {
 public:
  WrappingFormatter() {
    int width = 100;
    if (const char* c = std::getenv("COLUMNS"); c && std::atoi(c) > 0) {
      width = std::atoi(c);
    } else {
      winsize ws{};
      if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) width = ws.ws_col;
    }
    width_ = std::max(60, width);
    column_width(std::min(30, width_ / 3));
  }
  std::string make_option(const CLI::Option* opt, bool is_positional) const override {
    return entry("  " + make_option_name(opt, is_positional) + make_option_opts(opt), make_option_desc(opt));
  }
  std::string make_subcommand(const CLI::App* sub) const override {
    return entry("  " + sub->get_display_name(true), sub->get_description());
  }

 private:
  // `name`, then `desc` wrapped at word boundaries in the description column.
  std::string entry(const std::string& name, const std::string& desc) const {
    const size_t col = get_column_width();
    const size_t text_width = size_t(width_) > col + 20 ? size_t(width_) - col : 20;
    std::ostringstream out;
    out << name;
    size_t at = name.size();
    if (at + 1 > col) {
      out << "\n";
      at = 0;
    }
    std::istringstream words(desc);
    std::string word;
    size_t line = 0;  // characters on the current description line
    bool first = true;
    for (; words >> word; first = false) {
      if (!first && line + 1 + word.size() > text_width) {
        out << "\n";
        at = 0;
        line = 0;
      }
      if (line == 0) {
        out << std::string(col > at ? col - at : 1, ' ');
      } else {
        out << ' ';
        ++line;
      }
      out << word;
      line += word.size();
    }
    out << "\n";
    return out.str();
  }

  int width_ = 100;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"loom: LLM inference with a run-time parallel layout, and a simulator/planner"};
  app.formatter(std::make_shared<WrappingFormatter>());
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
