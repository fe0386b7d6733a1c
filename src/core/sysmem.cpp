#include "core/sysmem.h"

#include <fstream>
#include <sstream>
#include <string>

namespace loom {

namespace {

std::optional<int64_t> meminfo_bytes(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (in && std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    std::istringstream ls(line.substr(key.size()));
    int64_t kb = -1;
    std::string unit;
    ls >> kb >> unit;
    if (kb < 0 || unit != "kB" || kb > (int64_t(1) << 52)) return std::nullopt;
    return kb * 1024;
  }
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> mem_available() { return meminfo_bytes("MemAvailable:"); }
std::optional<int64_t> mem_total() { return meminfo_bytes("MemTotal:"); }

}  // namespace loom
