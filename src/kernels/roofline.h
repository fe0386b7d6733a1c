// This machine's roofline, measured at run time: memory-copy bandwidth and peak f32 FMA FLOP/s.
// Benchmarks print achieved throughput as a fraction of these (never absolute-time asserts).
#pragma once

#include <cstddef>

namespace loom::kernels {

// Bytes moved per second by a large memcpy split over `threads` threads: (bytes read + bytes
// written) / time, best of several repetitions. `bytes` is the size of each of the two buffers;
// 0 picks 2x the last-level cache, clamped to [256 MiB, 1 GiB], so the copy runs from DRAM.
double measure_memcpy_bandwidth(int threads = 1, size_t bytes = 0);

// Peak f32 FLOP/s (one FMA = 2 FLOP) of the active kernel path (kernel_path()) on `threads`
// threads: independent register-resident FMA chains, best of several repetitions.
double measure_peak_flops(int threads = 1);

// The last-level cache size in bytes as the OS reports it (0 if unknown).
size_t last_level_cache_bytes();

}  // namespace loom::kernels
