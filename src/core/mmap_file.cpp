#include "core/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace loom {

namespace {

const char* file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

}  // namespace

int open_regular_file(const std::string& path, const std::string& what, uint64_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail("cannot open ", what, " '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail("cannot read ", what, " '", path, "': ", std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(what, " '", path, "' is ", file_kind(st.st_mode), ", not a regular file");
  }
  // Regular files ignore O_NONBLOCK; clear it anyway so reads have their usual meaning.
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  if (size) *size = uint64_t(st.st_size);
  return fd;
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  uint64_t bytes = 0;
  const int fd = open_regular_file(path, "file", &bytes);
  size_ = size_t(bytes);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      fail("cannot map '", path, "': ", std::strerror(e));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

std::string read_text_file(const std::string& path, size_t max_bytes, const std::string& what) {
  uint64_t size = 0;
  const int fd = open_regular_file(path, what, &size);
  auto too_big = [&](uint64_t n) {
    ::close(fd);
    fail(what, " '", path, "': ", n, " bytes, more than the limit of ", max_bytes, " bytes");
  };
  if (size > max_bytes) too_big(size);
  std::string out;
  out.reserve(size_t(size));
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      fail("cannot read ", what, " '", path, "': ", std::strerror(e));
    }
    if (n == 0) break;
    if (out.size() + size_t(n) > max_bytes) too_big(out.size() + size_t(n));
    out.append(buf, size_t(n));
  }
  ::close(fd);
  return out;
}

std::string read_file_head(const std::string& path, size_t n) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return {};
  struct stat st {};
  std::string out;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    out.resize(n);
    ssize_t got = 0;
    do got = ::read(fd, out.data(), n);
    while (got < 0 && errno == EINTR);
    out.resize(got > 0 ? size_t(got) : 0);
  }
  ::close(fd);
  return out;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace loom
