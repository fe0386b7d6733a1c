// Helpers shared by the test_formats_*.cpp files: file bytes, patching, error assertions.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <sstream>
#include <string>

#include "core/error.h"

namespace loom::test {

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

template <typename T>
T get_le(const std::string& b, size_t pos) {
  T v;
  std::memcpy(&v, b.data() + pos, sizeof(T));
  return v;
}

template <typename T>
void put_le(std::string& b, size_t pos, T v) {
  std::memcpy(b.data() + pos, &v, sizeof(T));
}

// Runs fn, expects a loom::Error whose message contains every one of `parts`.
inline void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected a loom::Error mentioning '" << *parts.begin() << "', got none";
  } catch (const loom::Error& e) {
    const std::string msg = e.what();
    for (auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "message: " << msg << "\nmissing: " << p;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "message is not one line: " << msg;
  }
}

}  // namespace loom::test
