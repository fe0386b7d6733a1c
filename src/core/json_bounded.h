// Bounded JSON for untrusted input (model files, tokenizer files, traces, request bodies).
//
// nlohmann::json parses iteratively, but much of what follows a parse recurses once per nesting
// level (dump(), copies, comparisons, loom's own walkers), and its parser allocates one node per
// value. A file or a request body is therefore checked before nlohmann sees it:
//  - its size against JsonLimits::max_bytes (so memory is bounded by the caller's limit),
//  - its nesting depth against JsonLimits::max_depth, by a linear scan of the raw text that
//    allocates nothing (so no later recursion can exhaust a stack).
// Errors are loom::Error with one line: "<what>: <reason>", where every piece of the input that
// the message quotes is capped (json_excerpt, text_excerpt) and made printable, so a message is
// never longer than a few hundred bytes and is always valid UTF-8 (it can be put into a JSON
// error body). Numbers out of the double range (1e400) and raw invalid UTF-8 inside strings are
// parse errors like any other.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace loom {

struct JsonLimits {
  size_t max_bytes = size_t(64) << 20;  // text size
  int max_depth = 64;                   // arrays/objects nested inside one another
};

// The limits loom applies to each kind of untrusted JSON (one place, so they can be compared):
//  - HF config.json and model.safetensors.index.json: a few KB (configs; multimodal ones nest
//    sub-configs ~4 deep) to a few hundred KB (indexes of the largest models);
//  - tokenizer.json / tokenizer_config.json: up to ~35 MB in published models (Gemma 3's is 33
//    MB), pre_tokenizer Sequences nest ~4 deep;
//    Memory: nlohmann holds a 16-byte node per value (plus container growth), so a file of the
//    maximum size made of 2-byte values ("0,") can cost ~8-16x its size, ~0.5-1 GB at 64 MB;
//  - safetensors header: the format's own cap is 100,000,000 bytes (the safetensors crate's
//    MAX_HEADER_SIZE); tensor entries nest 3 deep ({name: {shape: [..]}}), metadata is flat;
//  - an OpenAI request body: messages[i].content[j] is 4 deep; the server's body limit bounds
//    the size first;
//  - one JSONL trace line: a flat record with one array (hash_ids).
inline constexpr JsonLimits kHfConfigJsonLimits{size_t(4) << 20, 32};
inline constexpr JsonLimits kTokenizerJsonLimits{size_t(64) << 20, 64};
inline constexpr JsonLimits kSafetensorsHeaderLimits{size_t(100'000'000), 8};
inline constexpr JsonLimits kRequestJsonLimits{size_t(64) << 20, 64};
inline constexpr JsonLimits kTraceLineJsonLimits{size_t(16) << 20, 8};

// Parses `text` within `limits`; throws loom::Error "<what>: ..." when the text is larger than
// max_bytes, nests deeper than max_depth, or is not valid JSON (the parser's reason with the
// byte offset, its quoted input capped).
nlohmann::json parse_json_bounded(std::string_view text, const std::string& what, const JsonLimits& limits);

// The nesting depth of JSON text (arrays and objects; strings and escapes skipped), scanning
// only until it exceeds `stop_above`; returns the depth reached and, through *at, the byte
// offset where it was reached. Does not validate the text.
int json_text_depth(std::string_view text, int stop_above, size_t* at = nullptr);

// A short printable rendering of a JSON value for an error message, never longer than about
// max_chars + 40 bytes and never recursing deeper than a few levels: scalars as JSON (strings
// capped), arrays and objects as their first few bytes of JSON followed by
// "... (an array of N entries)". Safe on values of any depth.
std::string json_excerpt(const nlohmann::json& v, size_t max_chars = 64);

// Untrusted text for an error message: at most max_chars bytes (cut at a UTF-8 boundary) plus
// "... (N bytes)" when cut; valid UTF-8 kept, control characters and invalid bytes as \xNN.
std::string text_excerpt(std::string_view s, size_t max_chars = 64);

}  // namespace loom
