// Temporary: subcommands not yet written register nothing. Removed as each lands.
#include "cli/cli.h"
namespace loom::cli {
void register_info(CLI::App&) {}
void register_synth(CLI::App&) {}
}  // namespace loom::cli
