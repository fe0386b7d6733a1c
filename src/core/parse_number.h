// Numbers from text a user wrote (CLI values, spec strings such as "poisson:RATE", files): the
// whole text must be the number, finite, and inside [lo, hi]; otherwise loom::Error names what,
// the text (a short excerpt) and the range. Replaces std::stoi & co., whose errors reach users as
// a bare "stoi" and which accept "12abc" or wrap on overflow.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace loom {

int64_t parse_int(std::string_view text, const std::string& what,
                  int64_t lo = std::numeric_limits<int64_t>::min(), int64_t hi = std::numeric_limits<int64_t>::max());
double parse_double(std::string_view text, const std::string& what, double lo = -std::numeric_limits<double>::max(),
                    double hi = std::numeric_limits<double>::max());

// A range bound for messages: integers without a fraction, 2^k as "2^k" when large.
std::string range_text(double lo, double hi);

// A size for people: "512 bytes", "64 MiB", "2.8 GiB" (powers of 1024, one decimal unless whole).
std::string human_bytes(int64_t bytes);

}  // namespace loom
