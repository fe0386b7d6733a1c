// What the operating system says about memory.
#pragma once

#include <cstdint>
#include <optional>

namespace loom {

// MemAvailable from /proc/meminfo in bytes (free memory plus what the kernel can reclaim, such as
// clean page cache); nullopt when it cannot be read or parsed.
std::optional<int64_t> mem_available();
// MemTotal from /proc/meminfo in bytes (the machine's memory); nullopt when unreadable.
std::optional<int64_t> mem_total();

}  // namespace loom
