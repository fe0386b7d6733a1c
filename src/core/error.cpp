#include "core/error.h"

#include <cctype>
#include <new>

namespace loom {

std::string describe_exception(const std::exception& e) {
  if (dynamic_cast<const Error*>(&e) || dynamic_cast<const InternalError*>(&e)) return e.what();
  if (dynamic_cast<const std::bad_array_new_length*>(&e) || dynamic_cast<const std::length_error*>(&e))
    return "a size too large to allocate";
  if (dynamic_cast<const std::bad_alloc*>(&e)) return "out of memory";
  const std::string what = e.what();
  // A library's bare name ("stoi", "vector::reserve", "std::bad_cast"): one word, no sentence.
  bool bare = what.empty();
  if (!bare) {
    bare = true;
    for (char c : what)
      if (c == ' ') bare = false;
  }
  if (!bare) return what;
  if (dynamic_cast<const std::invalid_argument*>(&e)) return cat("a value that is not a number (", what, ")");
  if (dynamic_cast<const std::out_of_range*>(&e)) return cat("a value out of range (", what, ")");
  return cat("an unexpected failure (", what.empty() ? "no message" : what, ")");
}

}  // namespace loom
