// "Did you mean ...?": the name of a list closest to a misspelt one (an unknown command-line flag,
// an unknown plan key), for error messages. Only a name of the list is ever returned, so a
// suggestion always names something that exists.
#pragma once

#include <string>
#include <vector>

namespace loom {

// Edit distance (insertions, deletions, substitutions and swaps of adjacent characters, each 1),
// case-insensitive.
int edit_distance(const std::string& a, const std::string& b);

// The candidate closest to `word`, or "" when none is close: within max(1, |word| / 3) edits, or
// one that `word` is a prefix of (at least 3 characters). Ties go to the earlier candidate.
std::string closest_name(const std::string& word, const std::vector<std::string>& candidates);

// " (did you mean X?)" for closest_name's answer, "" when it has none.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace loom
