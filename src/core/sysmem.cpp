#include "core/sysmem.h"

#include <fstream>
#include <sstream>
#include <string>

namespace loom {

std::optional<int64_t> mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (in && std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream ls(line.substr(13));
    int64_t kb = -1;
    std::string unit;
    ls >> kb >> unit;
    if (kb < 0 || unit != "kB") return std::nullopt;
    return kb * 1024;
  }
  return std::nullopt;
}

}  // namespace loom
