// Temporary: subcommands not yet written register nothing. Removed as each lands.
#include "cli/cli.h"
namespace loom::cli {
void register_bench_serve(CLI::App&) {}
void register_serve(CLI::App&) {}
}  // namespace loom::cli
