// Owned, 64-byte aligned, zero-initialised storage for activations, KV caches and converted
// weights. Large buffers (>= 1 MiB) come from anonymous mmap, whose pages the kernel zeroes
// lazily on first touch, so a big KV arena costs nothing until it is used.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

namespace loom {

template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n) { resize(n); }
  void resize(size_t n) {
    if (n == size_) return;
    data_.reset();
    size_ = n;
    if (n == 0) return;
    const size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    void* p = nullptr;
    if (bytes >= kMmapThreshold) {
      p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
    } else {
      p = std::aligned_alloc(64, bytes);
      if (!p) throw std::bad_alloc();
      std::memset(p, 0, bytes);
    }
    data_ = std::unique_ptr<T, Free>(static_cast<T*>(p), Free{bytes});
  }
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return data_.get()[i]; }
  const T& operator[](size_t i) const { return data_.get()[i]; }

 private:
  static constexpr size_t kMmapThreshold = size_t(1) << 20;
  struct Free {
    size_t bytes = 0;
    void operator()(T* p) const {
      if (bytes >= kMmapThreshold) ::munmap(p, bytes); else std::free(p);
    }
  };
  std::unique_ptr<T, Free> data_;
  size_t size_ = 0;
};

}  // namespace loom
