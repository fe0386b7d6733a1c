// Shared helpers of the libFuzzer harnesses (tests/fuzz/README.md).
//
// Contract every harness checks: a parser given any bytes either succeeds or throws
// loom::Error (the user's input is wrong). Anything else is a finding: a crash, a sanitizer
// report, a hang, an out-of-memory, or loom::InternalError / another exception escaping (a
// LOOM_CHECK reached from untrusted input means validation is missing), which the harness turns
// into an abort so libFuzzer saves the input.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <string>

#include "core/error.h"

namespace loom::fuzz {

// Runs fn; loom::Error is an accepted outcome, everything else aborts with its message.
inline void expect_clean(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const loom::Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: escaped exception (not loom::Error): %s\n", e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "fuzz: escaped non-std exception\n");
    std::abort();
  }
}

// A per-process scratch directory (parsers that take a path read files from it).
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    const char* base = std::getenv("LOOM_FUZZ_TMP");
    std::string d = std::string(base ? base : (access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp")) +
                    "/loom-fuzz-" + std::to_string(getpid());
    std::string cmd = "mkdir -p '" + d + "'";
    if (std::system(cmd.c_str()) != 0) std::abort();
    return d;
  }();
  return dir;
}

inline std::string write_scratch(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  f.close();
  if (!f) std::abort();
  return path;
}

}  // namespace loom::fuzz
