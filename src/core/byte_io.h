// Fixed-width, host-order byte messages between the ranks of one job (every rank runs the same
// binary on the same architecture): the step descriptor (engine/step_codec.h) and a Nitsum pool's
// commands (cluster/pool.cpp). A writer that appends to a vector, and a bounds-checked reader
// whose errors name the message, the field and the offset (never a read past the end).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace loom {

class ByteWriter {
 public:
  explicit ByteWriter(std::vector<uint8_t>& out) : out_(out) { out_.clear(); }
  template <typename T>
  void put(T v) {
    put_bytes(&v, sizeof(T));
  }
  void put_bytes(const void* p, std::size_t n) {
    const std::size_t at = out_.size();
    out_.resize(at + n);
    if (n) std::memcpy(out_.data() + at, p, n);
  }

 private:
  std::vector<uint8_t>& out_;
};

class ByteReader {
 public:
  // `message` names the message in errors ("step descriptor").
  ByteReader(const uint8_t* p, std::size_t n, const char* message) : p_(p), n_(n), message_(message) {}
  template <typename T>
  T get(const char* what) {
    T v;
    get_bytes(&v, sizeof(T), what);
    return v;
  }
  void get_bytes(void* dst, std::size_t n, const char* what) {
    if (n > n_ - at_)
      fail(message_, " truncated: ", what, " needs ", n, " bytes at offset ", at_, ", ", n_ - at_, " left");
    if (n) std::memcpy(dst, p_ + at_, n);
    at_ += n;
  }
  std::size_t left() const { return n_ - at_; }

 private:
  const uint8_t* p_;
  std::size_t n_, at_ = 0;
  const char* message_;
};

}  // namespace loom
