// Errors. Two kinds, kept apart on purpose (see ../shared/docs/STYLE.md):
//  - loom::Error: the user's input is wrong (bad file, bad config, bad request, a layout that does
//    not divide the model). The message names the value and the limit. Caught at the boundary:
//    the CLI prints one line and exits non-zero; the server answers a 4xx JSON error.
//  - LOOM_CHECK: a programmer error (a broken invariant). Always on, reports file:line, throws
//    loom::InternalError so a server or a rank can still report it instead of aborting silently.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace loom {

// Concatenates its arguments with operator<< (g++ 12 has no <format>).
template <typename... Args>
std::string cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& msg) : std::logic_error(msg) {}
};

// Throws loom::Error with the concatenation of the arguments.
template <typename... Args>
[[noreturn]] void fail(Args&&... args) {
  throw Error(cat(std::forward<Args>(args)...));
}

// What a caught exception means, in words for a user: never a bare exception name
// (std::bad_alloc's "std::bad_alloc", std::stoi's "stoi"). loom's own errors keep their message.
std::string describe_exception(const std::exception& e);

}  // namespace loom

#define LOOM_CHECK(cond, ...)                                                              \
  do {                                                                                     \
    if (!(cond)) [[unlikely]] {                                                            \
      throw ::loom::InternalError(::loom::cat(__FILE__, ":", __LINE__, ": check failed: ", \
                                              #cond, " " __VA_OPT__(, ) __VA_ARGS__));     \
    }                                                                                      \
  } while (0)
