// A CPU device whose memory faults on any access from outside one of its ops: the check that the
// stages, the layer loop, the KV migration and the CPU tier touch a rank's device memory only
// through the Device seam (device/device.h), so the same code runs on a GPU, where a host access
// to device memory is a crash. Header-only, for the test areas that link the engine.
//
// Every allocation is its own anonymous mapping, PROT_NONE while no op of any StrictCpuDevice (and
// no copy of StrictRankMemory, the local communicator's memory that moves it) is running; the first
// op to start opens every mapping (read + write), the last to end closes them. A host access from
// outside an op is a SIGSEGV while every rank is between ops; one that happens while another rank
// is inside an op goes unseen (never a false alarm, sometimes a miss).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "comm/rank_memory.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "device/cpu_device.h"

namespace loom::test {

class StrictMemory {
 public:
  static StrictMemory& get() {
    static StrictMemory* m = new StrictMemory;
    return *m;
  }
  void* map(std::size_t bytes) {
    const std::size_t len = round(bytes);
    void* p = ::mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    LOOM_CHECK(p != MAP_FAILED, "strict device: mmap of ", len, " bytes");
    std::lock_guard<std::mutex> lk(mu_);
    live_[p] = len;
    if (depth_ > 0) ::mprotect(p, len, PROT_READ | PROT_WRITE);
    ++mappings_;
    return p;
  }
  void unmap(void* p) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return;
    ::munmap(p, it->second);
    live_.erase(it);
  }
  void open() {
    std::lock_guard<std::mutex> lk(mu_);
    if (depth_++ == 0) protect(PROT_READ | PROT_WRITE);
    ++ops_;
  }
  void close() {
    std::lock_guard<std::mutex> lk(mu_);
    if (--depth_ == 0) protect(PROT_NONE);
  }
  int64_t ops() const { return ops_; }
  int64_t mappings() const { return mappings_; }

 private:
  static std::size_t round(std::size_t b) {
    const std::size_t page = std::size_t(::sysconf(_SC_PAGESIZE));
    return (std::max<std::size_t>(b, 1) + page - 1) / page * page;
  }
  void protect(int prot) {
    for (const auto& [p, len] : live_) ::mprotect(p, len, prot);
  }
  std::mutex mu_;
  std::map<void*, std::size_t> live_;
  int depth_ = 0;
  int64_t ops_ = 0, mappings_ = 0;
};

class StrictCpuDevice final : public CpuDevice {
 public:
  explicit StrictCpuDevice(ThreadPool* pool) : CpuDevice(pool) {}
  std::string name() const override { return "cpu (strict)"; }
  void* allocate(std::size_t bytes) override { return bytes ? StrictMemory::get().map(bytes) : nullptr; }
  void deallocate(void* p, std::size_t) noexcept override {
    if (p) StrictMemory::get().unmap(p);
  }

 protected:
  void enter() override { StrictMemory::get().open(); }
  void leave() override { StrictMemory::get().close(); }
};

// The local backend's memory for ranks on strict devices: host copies and sums, inside open/close.
class StrictRankMemory final : public RankMemory {
 public:
  std::string_view name() const override { return "strict"; }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    StrictMemory::get().open();
    host_.copy(dst, src, bytes);
    StrictMemory::get().close();
  }
  void reduce_sum(float* out, const float* const* in, int n_inputs, std::size_t count) override {
    StrictMemory::get().open();
    host_.reduce_sum(out, in, n_inputs, count);
    StrictMemory::get().close();
  }
  void fence() override {}

 private:
  HostRankMemory host_;
};

inline RankMemoryFactory strict_rank_memory() {
  return [](int) { return std::make_unique<StrictRankMemory>(); };
}

}  // namespace loom::test
