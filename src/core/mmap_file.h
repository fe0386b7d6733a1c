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

// Every file loom reads as input goes through the functions below (issue 36): they open with
// O_NONBLOCK, so a FIFO or a device never blocks the open, and refuse what is not a regular file
// (a FIFO, /dev/zero through a symlink, a directory) in one line naming the path and what it is,
// before reading anything. Reads are bounded by the caller's limit, checked against the size
// before reading and again while reading (a file that grows is cut off at the limit).

// Opens `path` read-only as a regular file (following symlinks); returns the descriptor (the
// caller closes it) and, through *size, its size. `what` names the file in errors ("tokenizer").
int open_regular_file(const std::string& path, const std::string& what, uint64_t* size = nullptr);

// Reads a whole (small) file into a string; throws loom::Error naming the path.
// max_bytes: files larger than this are refused (one line naming the size and the limit)
// before anything is read, so an untrusted path cannot make loom allocate its size.
std::string read_text_file(const std::string& path, size_t max_bytes = size_t(-1), const std::string& what = "file");
// At most the first `n` bytes of a regular file (a format's magic); "" when it cannot be opened.
std::string read_file_head(const std::string& path, size_t n);
bool file_exists(const std::string& path);

}  // namespace loom
