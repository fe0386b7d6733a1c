// Byte-level BPE building blocks: UTF-8 decoding, a Unicode letter/number/space classifier,
// the GPT-2 byte-to-unicode alphabet, and the pre-tokenizers (regex splits) of GPT-2, Llama-3
// and Qwen2 written as hand-coded matchers over code points (std::regex has no \p{L}).
//
// Regexes reproduced (alternatives tried in order at each position, as a backtracking regex
// engine does; each matcher below returns the same match length the regex would):
//  llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//  qwen2:  the same with \p{N} (single digits) instead of \p{N}{1,3}
//  gpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// Unicode coverage: \p{L} and \p{N} come from a range table generated from the Unicode 14.0
// General_Category (every L* and N* code point of every script; 782 ranges). \s is the Unicode
// White_Space property (what Oniguruma, used by HF tokenizers, means by \s). The case-insensitive
// contractions fold ASCII only (not U+017F LATIN SMALL LETTER LONG S or U+212A KELVIN SIGN).
// Checked once against Python's `regex` module (Unicode 16): identical splits for 3000 random
// mixed-script texts under all three regexes; the class of every code point agrees except for
// code points unassigned in Unicode 14.0 (later additions, e.g. new CJK extensions).
// Invalid UTF-8 bytes are treated as one code point each of class "other" (U+FFFD's class), so
// every byte of the input lands in exactly one pre-token.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

// Decodes the code point at s[i]; sets *len to its byte length (1..4). Invalid or truncated
// sequences decode as U+FFFD with *len = 1.
uint32_t utf8_decode(std::string_view s, size_t i, int* len);
// Appends the UTF-8 encoding of cp (cp <= 0x10FFFF).
void utf8_append(std::string& out, uint32_t cp);
// Length of the UTF-8 sequence that starts with lead byte b (1..4), or 0 for a continuation or
// invalid lead byte.
int utf8_seq_len(unsigned char b);

bool unicode_is_letter(uint32_t cp);  // \p{L}
bool unicode_is_number(uint32_t cp);  // \p{N}
bool unicode_is_space(uint32_t cp);   // \s (White_Space)

// GPT-2 byte-to-unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100 + k in byte order (so ' ' -> U+0120 'Ġ', '\n' -> U+010A 'Ċ').
uint32_t byte_to_unicode(unsigned char b);
// Inverse; returns -1 for a code point outside the alphabet.
int unicode_to_byte(uint32_t cp);
// Maps every byte of raw through byte_to_unicode (result is valid UTF-8).
std::string bytes_to_bpe_alphabet(std::string_view raw);
// Inverse for text in the alphabet. Code points outside the alphabet are kept as their UTF-8
// bytes (so added tokens written in plain text survive).
std::string bpe_alphabet_to_bytes(std::string_view text);

enum class PreTokenizer { Gpt2, Llama3, Qwen2 };
// "gpt2"/"default" -> Gpt2, "llama3"/"llama-bpe" -> Llama3, "qwen2" -> Qwen2; throws
// loom::Error naming the value otherwise.
PreTokenizer pre_tokenizer_from_name(const std::string& pre);
// The HF regex text of a pre-tokenizer (for tokenizer.json).
const char* pre_tokenizer_regex(PreTokenizer p);

// Splits text into pre-tokens; the pieces concatenate to text exactly. Linear in text length
// except \s+(?!\S), which is linear too (one scan of the space run).
std::vector<std::string_view> pretokenize(std::string_view text, PreTokenizer p);

}  // namespace loom
