// Shared helpers for loom's tests.
#pragma once

#include <exception>
#include <string>
#include <vector>

namespace loom::test {

// ../shared beside the checkout, or "" when it is missing (tests then GTEST_SKIP with a message).
std::string shared_dir();
// Path of the stories260K folder, or "" when ../shared is missing.
std::string stories_dir();
// The loom executable built with the tests.
std::string loom_bin();
// A fresh temporary directory, removed at process exit.
std::string temp_dir();
// Runs a shell command, returns its exit status and captures stdout+stderr into *output.
int run_command(const std::string& cmd, std::string* output);

// What error_of returns when f throws nothing.
inline constexpr const char* kNoError = "(no error)";

// The message of the exception of type E (by default any std::exception) f throws, kNoError when it
// throws none; an exception of another type propagates (test::error_of<Error>(f): only loom::Error
// counts as the clean failure).
template <typename E = std::exception, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return kNoError;
}

}  // namespace loom::test

#define LOOM_REQUIRE_SHARED()                                                              \
  do {                                                                                     \
    if (::loom::test::shared_dir().empty())                                                \
      GTEST_SKIP() << "../shared is missing beside the checkout; this test needs its data"; \
  } while (0)
