// A read-only memory-mapped file. Loaders keep the mapping alive as long as any weight view
// points into it (shared_ptr ownership in model/weights.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace loom {

class MappedFile {
 public:
  // Throws loom::Error naming the path when it cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Reads a whole (small) file into a string; throws loom::Error naming the path.
// max_bytes: files larger than this are refused (one line naming the size and the limit)
// before anything is read, so an untrusted path cannot make loom allocate its size.
std::string read_text_file(const std::string& path, size_t max_bytes = size_t(-1));
bool file_exists(const std::string& path);

}  // namespace loom
