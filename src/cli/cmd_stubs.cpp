// Temporary: subcommands not yet written register nothing. Removed as each lands.
#include "cli/cli.h"
namespace loom::cli {
}  // namespace loom::cli
