// A vocabulary as model files carry it, independent of the file format, and the tokenizer built
// from it. Loaders fill a Vocab (llama2.c tokenizer file, GGUF tokenizer.ggml.* keys,
// tokenizer.json); writers (loom synth) serialise one. Two kinds:
//  - Spm: SentencePiece-style BPE by piece scores (llama2.c, GGUF "llama"): pieces use U+2581 or
//    a plain space as word marker (llama2.c uses ' '), byte fallback pieces "<0xAB>".
//  - Bpe: byte-level BPE with ranked merges (GPT-2 / Llama-3 / Qwen2; GGUF "gpt2";
//    tokenizer.json "BPE"), tokens spelled in the GPT-2 byte-to-unicode alphabet.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

enum class VocabKind { Spm, Bpe };

// GGUF token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

struct Vocab {
  VocabKind kind = VocabKind::Spm;
  std::string pre = "default";        // Bpe pre-tokenizer: "llama3", "qwen2", "gpt2", "default"
  std::vector<std::string> tokens;    // id -> piece (as stored in the file)
  std::vector<float> scores;          // Spm: merge priority per piece (may be empty for Bpe)
  std::vector<TokenType> types;       // per token (may be empty: all Normal)
  std::vector<std::string> merges;    // Bpe: "left right" in rank order
  int bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
  bool add_bos = true;                // prepend BOS when encoding a prompt
  bool add_space_prefix = true;       // Spm: prepend a space to non-empty text (llama2.c)
  std::string chat_template;          // Jinja text from the file, if any
  // Bpe: a pre-token that is itself a token is emitted whole, without applying merges (HF
  // tokenizer.json model.ignore_merges; Llama-3 sets it, and llama.cpp sets it for pre
  // "llama3", so GGUF loaders should set it when pre == "llama3").
  bool ignore_merges = false;

  int size() const { return int(tokens.size()); }
};

}  // namespace loom
