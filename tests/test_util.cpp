#include "test_util.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>

namespace loom::test {

namespace {
bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
}  // namespace

std::string shared_dir() {
  if (const char* env = std::getenv("LOOM_SHARED")) return is_dir(env) ? env : "";
  return is_dir(LOOM_SHARED_DIR) ? LOOM_SHARED_DIR : "";
}

std::string stories_dir() {
  const std::string s = shared_dir();
  return s.empty() ? "" : s + "/models/stories260K";
}

std::string loom_bin() { return LOOM_BIN; }

std::string temp_dir() {
  static std::mutex mu;
  static std::vector<std::string> made;
  std::lock_guard<std::mutex> lock(mu);
  std::string tmpl = (std::filesystem::temp_directory_path() / "loom-test-XXXXXX").string();
  char* p = ::mkdtemp(tmpl.data());
  if (!p) std::abort();
  if (made.empty()) {
    std::atexit([] {
      for (auto& d : made) std::filesystem::remove_all(d);
    });
  }
  made.push_back(p);
  return p;
}

int run_command(const std::string& cmd, std::string* output) {
  std::string full = cmd + " 2>&1";
  FILE* f = ::popen(full.c_str(), "r");
  if (!f) return -1;
  std::array<char, 4096> buf;
  std::string out;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(f);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace loom::test
