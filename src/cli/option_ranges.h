// The range of every numeric option of `loom` and of the numeric environment variables, in one
// table (issue 36: `--threads 100000`, `--max-queue 2147483647`, `--ranks 40000`,
// LOOM_COMM_TIMEOUT_S=1e10 and a dozen more aborted, overflowed or ran out of memory).
//
// apply_option_ranges() attaches a check to every numeric option of every subcommand once they
// are registered: the text must be a number of the option's kind (an integer for integer
// options), finite, and inside the range; otherwise the parse fails before any action runs, so
// before anything is loaded or allocated, with one line naming the option, the value and the
// range (and why the range is what it is where the machine sets it: cores, memory). A numeric
// option without an entry is a programming error: apply_option_ranges throws InternalError naming
// it, so a new option cannot be added unbounded (every `loom` run would fail).
//
// Where a range depends on the machine it says so: threads and local ranks at most
// max(64, 8 x cores); byte sizes of memory at most the machine's memory (MemTotal).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace loom::cli {

struct OptionRange {
  std::string command;  // subcommand path ("serve", "bench offline", "sim run"); "" = any
  std::string option;   // its first long name ("--threads") or "-n"
  long double lo = 0, hi = 0;
  bool integer = true;
  bool lo_open = false;  // lo itself excluded (a positive real: (0, hi])
  std::string why;       // what sets the range ("" when it is the option's meaning)
  bool bytes = false;    // a size in bytes: K, M, G, T suffixes accepted (parse_size below)
};

// A size in bytes as a user writes it: an integer ("67108864", "-1"), or a number with a suffix
// K, M, G or T (powers of 1024; case-insensitive; optionally followed by "i", "iB" or "B":
// "64M", "64MiB", "4gb", "1.5G", "512k"), rounded down to whole bytes. Returns false when `text`
// is none of these.
bool parse_size(const std::string& text, long double* bytes);

// Every range of the table, resolved on this machine.
std::vector<OptionRange> option_ranges();
// The range of `option` under `command` (a command-specific entry first, then a general one);
// nullptr when none.
const OptionRange* find_option_range(const std::string& command, const std::string& option);
// Attaches the checks (see above); throws InternalError for a numeric option without a range.
void apply_option_ranges(CLI::App& app);
// One line per numeric option of every subcommand: "PATH<tab>OPTION<tab>LO<tab>HI<tab>int|real<tab>
// LO_OPEN" (the hidden `loom option-ranges`, which the CLI range test walks).
void print_option_ranges(CLI::App& app);

// The numeric environment variables loom reads (LOOM_THREADS, LOOM_COMM_TIMEOUT_S), checked
// against their ranges: throws loom::Error naming the variable, its value and the range.
void check_environment();

// Limits the table states, for the places that need the numbers themselves.
int max_threads();  // max(64, 8 x cores)
long double max_memory_bytes();  // MemTotal (2^40 when unknown)

}  // namespace loom::cli
