// Text <-> token ids for the two vocabulary kinds of vocab.h.
//  - Spm: llama2.c's `encode` exactly: optional BOS; a dummy-prefix " " when add_space_prefix
//    and the text is non-empty; each UTF-8 code point maps to its piece, else to byte pieces
//    "<0xAB>"; then repeatedly merge the adjacent pair whose concatenation is a piece with the
//    highest score (leftmost on ties). Pieces may use ' ' (llama2.c) or U+2581 (GGUF "llama");
//    the tokenizer detects which and rewrites spaces before lookup.
//  - Bpe: byte-level BPE: special added tokens are matched in the text first, the rest is split
//    by the model's pre-tokenizer regex (bpe_pretokenize.h), bytes are mapped through the GPT-2
//    byte-to-unicode table and merges are applied lowest rank first within each pre-token.
// A Tokenizer is immutable after create(): all methods are const and thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/vocab.h"

namespace loom {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Validates the vocabulary (unique pieces, merges naming existing tokens, ids in range) and
  // builds the lookup tables. Throws loom::Error on an invalid vocabulary.
  static std::unique_ptr<Tokenizer> create(Vocab v);

  // Token ids of text; BOS first when add_bos and the vocabulary has one. With parse_special,
  // the text of Control and UserDefined tokens (e.g. "<|eot_id|>", "<s>") is matched first,
  // longest match wins, and becomes that token (HF added-token and llama.cpp parse_special
  // behaviour; llama2.c itself never does this, which only differs for text containing the
  // exact spelling of such a token). Spm then adds the dummy-prefix space to each text
  // fragment that starts the text or follows a special token (llama.cpp's rule).
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special = true) const;
  // The same with parse_special, except that no special token is matched that starts or ends in
  // one of the `literal` byte ranges [begin, end) (sorted, disjoint): text there is tokenized as
  // plain text. Outside them, and for text without special spellings inside them, the tokens are
  // exactly encode(text, add_bos) (chat_template.h ChatPrompt: the safe mode for message content).
  std::vector<int32_t> encode(std::string_view text, bool add_bos,
                              const std::vector<std::pair<size_t, size_t>>& literal) const;
  // Concatenated bytes of ids (each via token_piece_bytes with its predecessor; the first
  // token's predecessor is -1). May end in an incomplete UTF-8 sequence.
  std::string decode(const std::vector<int32_t>& ids) const;
  // Raw bytes token id contributes when it follows prev (-1: none). Spm: a leading ' ' is
  // dropped right after BOS (llama2.c), "<0xAB>" becomes byte 0xAB, U+2581 becomes ' '.
  // Bpe: the byte-level alphabet maps back to bytes. Control tokens (BOS, EOS, <|eot_id|>...)
  // give "", unless they are printable added tokens (UserDefined). Out of range id -> "".
  virtual std::string token_piece_bytes(int32_t prev, int32_t id) const = 0;

  int vocab_size() const { return vocab_.size(); }
  int bos_id() const { return vocab_.bos_id; }
  int eos_id() const { return vocab_.eos_id; }
  // End of generation: eos, and end-of-turn tokens (<|eot_id|>, <|im_end|>, <|end_of_text|>,
  // <|endoftext|>, </s>, <|eom_id|>, <end_of_turn>) when present.
  bool is_eog(int32_t id) const;
  const Vocab& vocab() const { return vocab_; }
  // Id of the piece spelled exactly as stored in the vocabulary, or -1.
  virtual int32_t token_id(std::string_view piece) const = 0;

 protected:
  explicit Tokenizer(Vocab v);
  // Appends the tokens of a fragment holding no special token. first_or_after_special: the
  // fragment starts the text or follows a special token (Spm's dummy prefix rule).
  virtual void encode_fragment(std::string_view text, bool first_or_after_special,
                               std::vector<int32_t>& out) const = 0;

  Vocab vocab_;
  std::vector<int32_t> eog_ids_;  // sorted
  // Special tokens matched in text, grouped by first byte, longest first.
  std::vector<std::vector<std::pair<std::string, int32_t>>> specials_by_byte_;
};

// Turns a stream of token ids into complete UTF-8 text: bytes of an incomplete multi-byte
// sequence are held back until it completes. An invalid byte sequence (a stray continuation
// byte, a truncated sequence followed by a new lead byte) is emitted as U+FFFD so the output
// is always valid UTF-8. Not thread-safe; one per stream.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok) : tok_(tok) {}
  // Text completed by this token (may be "").
  std::string push(int32_t id);
  // What is held back at the end of the stream, as U+FFFD for each incomplete sequence.
  std::string flush();

 private:
  std::string take_complete();
  const Tokenizer& tok_;
  int32_t prev_ = -1;
  std::string pending_;
};

// True when s is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool is_valid_utf8(std::string_view s);

}  // namespace loom
