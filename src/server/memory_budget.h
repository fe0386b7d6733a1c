// The server-wide memory budget for requests in flight (issue 36): every byte the server holds
// for a request before the engine has it (received headers and bodies, the JSON parse of a body,
// the parsed prompt and stop strings) is taken from one budget first; when it would pass the
// limit the request is refused with 503 and Retry-After instead (the front end before it reads
// the body, http_front.h; the handler before it parses, http_server.cpp), so no mix of slow or
// large requests can take the process's memory (200 half-sent 8 MB bodies held 2.16 GB, 24 token-id
// lists of 8 MB took 3.12 GB to parse).
//
// Thread-safe (one atomic counter). Hold is the RAII form.
#pragma once

#include <atomic>
#include <cstdint>

namespace loom::server {

class MemoryBudget {
 public:
  explicit MemoryBudget(int64_t limit_bytes) : limit_(limit_bytes) {}
  // Takes `bytes` when they fit under the limit; false (and nothing taken) when not.
  bool try_take(int64_t bytes) {
    if (bytes <= 0) return true;
    int64_t cur = used_.load(std::memory_order_relaxed);
    do {
      if (cur + bytes > limit_) return false;
    } while (!used_.compare_exchange_weak(cur, cur + bytes, std::memory_order_relaxed));
    return true;
  }
  void give(int64_t bytes) {
    if (bytes > 0) used_.fetch_sub(bytes, std::memory_order_relaxed);
  }
  int64_t used() const { return used_.load(std::memory_order_relaxed); }
  int64_t limit() const { return limit_; }

  // Bytes taken for one scope; empty when the budget refused them (ok() false).
  class Hold {
   public:
    Hold() = default;
    Hold(MemoryBudget* b, int64_t bytes) : b_(b), bytes_(bytes > 0 ? bytes : 0) {
      if (b_ && !b_->try_take(bytes_)) {
        b_ = nullptr;
        ok_ = false;
      }
    }
    Hold(Hold&& o) noexcept : b_(o.b_), bytes_(o.bytes_), ok_(o.ok_) { o.b_ = nullptr; }
    Hold& operator=(Hold&& o) noexcept {
      if (this != &o) {
        release();
        b_ = o.b_;
        bytes_ = o.bytes_;
        ok_ = o.ok_;
        o.b_ = nullptr;
      }
      return *this;
    }
    ~Hold() { release(); }
    bool ok() const { return ok_; }
    void release() {
      if (b_) b_->give(bytes_);
      b_ = nullptr;
    }

   private:
    MemoryBudget* b_ = nullptr;
    int64_t bytes_ = 0;
    bool ok_ = true;
  };

 private:
  const int64_t limit_;
  std::atomic<int64_t> used_{0};
};

}  // namespace loom::server
