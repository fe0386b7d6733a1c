// CPU feature detection and the choice of the kernel path: the one dispatch point.
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace loom::kernels {

namespace {

#if defined(__x86_64__)
uint64_t xgetbv0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}
#endif

CpuFeatures detect() {
  CpuFeatures c;
#if defined(__x86_64__)
  unsigned a, b, cx, d;
  if (!__get_cpuid(1, &a, &b, &cx, &d)) return c;
  const bool osxsave = cx & (1u << 27), avx = cx & (1u << 28);
  if (!osxsave || !avx) return c;
  const uint64_t xcr0 = xgetbv0();
  const bool os_ymm = (xcr0 & 0x6) == 0x6, os_zmm = (xcr0 & 0xe6) == 0xe6;
  if (!os_ymm) return c;
  c.fma = cx & (1u << 12);
  c.f16c = cx & (1u << 29);
  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf < 7) return c;
  __cpuid_count(7, 0, a, b, cx, d);
  c.avx2 = b & (1u << 5);
  if (os_zmm) {
    c.avx512f = b & (1u << 16);
    c.avx512dq = b & (1u << 17);
    c.avx512bw = b & (1u << 30);
    c.avx512vl = b & (1u << 31);
    c.avx512_vnni = cx & (1u << 11);
    // AMX: tile state in XCR0 bits 17 and 18 (using it also needs arch_prctl(ARCH_REQ_XCOMP_PERM)).
    if ((xcr0 & 0x60000) == 0x60000) {
      c.amx_bf16 = d & (1u << 22);
      c.amx_tile = d & (1u << 24);
      c.amx_int8 = d & (1u << 25);
    }
    __cpuid_count(7, 1, a, b, cx, d);
    c.avx512_bf16 = a & (1u << 5);
  }
#endif
  return c;
}

enum Path { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
const char* const kPathNames[] = {"scalar", "avx2", "avx512"};

int best_path() {
  const CpuFeatures& f = cpu_features();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  if (avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq) return kAvx512;
  if (avx2) return kAvx2;
  return kScalar;
}

int parse_path(const char* name, const char* what) {
  for (int i = 0; i < 3; ++i)
    if (std::strcmp(name, kPathNames[i]) == 0) return i;
  fail(what, "='", name, "' is not a kernel path (expected scalar, avx2 or avx512)");
}

// The AVX-512 table with the fast-mode kernels this CPU runs: VNNI / AVX512-BF16 where present,
// else the AVX2 ones (which run on any AVX-512 CPU).
const detail::KernelTable& avx512_table() {
  static const detail::KernelTable t = [] {
    detail::KernelTable x = detail::table_avx512();
    const detail::KernelTable& avx2 = detail::table_avx2();
    x.quantize_q8 = avx2.quantize_q8;
    const CpuFeatures& f = cpu_features();
    if (f.avx512_vnni && f.avx512vl) {
      x.quant_fast_rows = detail::quant_fast_rows_vnni();
      x.quant_fast_name = "vnni";
    } else {
      x.quant_fast_rows = avx2.quant_fast_rows;
      x.quant_fast_name = avx2.quant_fast_name;
    }
    if (f.avx512_vnni) {
      x.q8_fast_rows = detail::q8_fast_rows_vnni();
      x.q8_fast_name = "vnni";
    } else {
      x.q8_fast_rows = avx2.q8_fast_rows;
      x.q8_fast_name = avx2.q8_fast_name;
    }
    if (f.avx512_bf16) {
      x.bf16_fast_rows = detail::bf16_fast_rows_avx512bf16();
      x.bf16_fast_name = "avx512bf16";
    } else {
      x.bf16_fast_rows = avx2.bf16_fast_rows;
      x.bf16_fast_name = avx2.bf16_fast_name;
    }
    return x;
  }();
  return t;
}

const detail::KernelTable& table_of(int path) {
  switch (path) {
    case kAvx512: return avx512_table();
    case kAvx2: return detail::table_avx2();
    default: return detail::table_scalar();
  }
}

std::atomic<const detail::KernelTable*> g_table{nullptr};

const detail::KernelTable& init_table() {
  int path = best_path();
  if (const char* env = std::getenv("LOOM_KERNELS"); env && *env) {
    const int want = parse_path(env, "LOOM_KERNELS");
    if (want < path) path = want;
  }
  const detail::KernelTable* t = &table_of(path);
  g_table.store(t, std::memory_order_release);
  return *t;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

const detail::KernelTable& detail::active_table() {
  const KernelTable* t = g_table.load(std::memory_order_acquire);
  return t ? *t : init_table();
}

const char* kernel_path() { return detail::active_table().name; }
const char* fast_q8_kernel() { return detail::active_table().q8_fast_name; }
const char* fast_bf16_kernel() { return detail::active_table().bf16_fast_name; }
const char* fast_quant_kernel() { return detail::active_table().quant_fast_name; }

std::vector<const char*> available_kernel_paths() {
  std::vector<const char*> out;
  for (int i = 0; i <= best_path(); ++i) out.push_back(kPathNames[i]);
  return out;
}

void set_kernel_path_for_testing(const char* path) {
  const int want = parse_path(path, "kernel path");
  if (want > best_path())
    fail("kernel path '", path, "' is not supported by this CPU (best: ", kPathNames[best_path()], ")");
  g_table.store(&table_of(want), std::memory_order_release);
}

}  // namespace loom::kernels
