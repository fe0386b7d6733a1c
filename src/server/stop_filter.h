// Stop strings over streamed text, as vLLM applies them: generation ends at the first stop string
// in the output text, the stop string and everything after it are dropped, and text that could
// still turn out to be the beginning of a stop string is held back from the stream until it is
// known not to be (so a stop string never leaks to the client, not even partially).
//
// Usage (one per request, one thread):
//   f.append(new_text);             // text completed by each token (StreamDecoder::push)
//   if (f.stopped()) ...            // a stop string matched: text() ends before it
//   client << f.take_ready();       // text now safe to send
//   ... at the end: client << f.take_all();  // whatever is left (held back text included)
// Invariant: every byte returned by take_ready()/take_all() is a prefix of the final text.
//
// Cost: each stop string keeps a Knuth-Morris-Pratt automaton state (the longest suffix of the
// text that is a prefix of it), so append() examines each new byte at most twice per stop string
// amortised, and take_ready() finds the held-back length from those states without searching:
// O(new bytes x stop strings) per token, whatever the strings' lengths (work() counts it).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom::server {

class StopFilter {
 public:
  explicit StopFilter(std::vector<std::string> stops = {});

  // Appends text; returns true when a stop string matched (now or before). After a match the
  // text is cut at the earliest stop string start and further appends are ignored.
  bool append(std::string_view more);
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }  // the stop string that matched
  const std::string& text() const { return text_; }

  // Text not yet taken that cannot be part of a stop string; after a match, all of it.
  std::string take_ready();
  // Everything not yet taken (end of the stream).
  std::string take_all();

  // Automaton steps taken so far (tests bound it by the bytes appended).
  int64_t work() const { return work_; }

 private:
  // Length of the longest suffix of text_ not yet taken that is a proper prefix of a stop string.
  size_t held_back() const;

  struct Pattern {
    std::string s;
    std::vector<uint32_t> border;  // KMP prefix function: border[i] of s[0..i]
    uint32_t state = 0;            // longest suffix of text_ that is a prefix of s
  };
  std::vector<Pattern> stops_;
  std::string text_;
  size_t taken_ = 0;  // bytes of text_ already returned
  bool stopped_ = false;
  std::string matched_;
  int64_t work_ = 0;
};

}  // namespace loom::server
