// Reading, writing and synthesising vocabularies (see vocab.h for the two kinds).
//  - llama2.c tokenizer file: int32 max_token_length, then per token: float32 score, int32 len,
//    len bytes. Always Spm, bos 1, eos 2, unk 0, pieces use a plain ' ' as the word marker.
//  - HF tokenizer.json with model.type "BPE": byte-level (GPT-2 / Llama-3 / Qwen2) -> Bpe, and
//    SentencePiece BPE with byte fallback (Llama-2's layout) -> Spm; plus the
//    tokenizer_config.json beside it when present (bos/eos tokens, chat_template, add_bos_token).
//  - synth_vocab: deterministic synthetic vocabularies for `loom synth`.
// All functions throw loom::Error on a malformed or unsupported file, naming the file and value.
#pragma once

#include <cstdint>
#include <string>

#include "model/vocab.h"

namespace loom {

// Reads a llama2.c tokenizer with exactly vocab_size tokens (the count is not in the file; it
// comes from the checkpoint header). Errors when the file is shorter than vocab_size tokens.
Vocab load_llama2c_vocab(const std::string& path, int vocab_size);
// Writes v in the llama2.c tokenizer format (pieces and scores; max_token_length computed).
// Meant for Spm vocabularies; U+2581 in pieces is written as ' ' (llama2.c's convention), so
// load_llama2c_vocab gives back a vocabulary that encodes and decodes identically. Token types
// are not stored: on reading, 0 is <unk>, 1 and 2 are control, "<0xAB>" pieces are bytes.
void write_llama2c_vocab(const Vocab& v, const std::string& path);
// The same format as bytes (for tests and for writers that stream).
std::string llama2c_vocab_bytes(const Vocab& v);

// Reads an HF tokenizer.json with model.type "BPE", plus tokenizer_config.json from the same
// directory when it exists (bos_token, eos_token, pad_token, add_bos_token, chat_template as a
// string or a [{name, template}] list). Two layouts:
//  - byte-level BPE (byte_fallback false) -> Bpe. Vocab::pre comes from the pre_tokenizer's
//    Split regex, which must be exactly the GPT-2, Llama-3 or Qwen2 one (any other regex is a
//    loom::Error naming it); a plain ByteLevel with use_regex -> "gpt2". A normalizer (Qwen2's
//    NFC) is ignored, which only matters for text that is not already NFC.
//  - SentencePiece BPE as HF's LlamaConverter writes it (Llama-2: byte_fallback true,
//    normalizer Prepend("▁") + Replace(" ", "▁"), pre_tokenizer null; or a Metaspace
//    pre_tokenizer with split false) -> Spm, pieces spelled with U+2581, "<0xAB>" pieces Byte,
//    add_space_prefix from Prepend / prepend_scheme. Scores: a piece produced by merges scores
//    -(rank of the first merge producing it), others score below every merge result, so
//    Spm's score-ordered merging takes pairs in the file's merge order. Same ids as HF's BPE
//    whenever every split of a piece into two vocabulary pieces is a merge (LlamaConverter's
//    files: it emits all such splits) and a piece's splits rank next to each other (true when
//    scores are distinct); otherwise loom may merge a pair HF has no merge for.
// Added tokens: special -> Control, others -> UserDefined; ids missing from both the vocab
// and added_tokens become Unused "<|loom_unused_N|>". BOS: bos_token, else the first
// SpecialToken of a TemplateProcessing post-processor; add_bos: add_bos_token, else whether
// that template adds one. Model types other than BPE are errors.
// Untrusted input: both files are parsed within kTokenizerJsonLimits (core/json_bounded.h), and
// every token id must lie in [0, max_tokens) (the model's vocab_size; 0: 2^24) before anything
// is sized from the ids.
Vocab load_tokenizer_json(const std::string& path, int64_t max_tokens = 0);
// The same from text; config_json may be "" (no tokenizer_config.json).
Vocab parse_tokenizer_json(const std::string& tokenizer_json, const std::string& config_json = "",
                           const std::string& what = "tokenizer.json", int64_t max_tokens = 0);
// Serialises v as an HF-compatible tokenizer.json (loadable by the `tokenizers` library).
//  - Bpe: version, truncation/padding null, added_tokens (the Control/UserDefined tokens),
//    normalizer null, pre_tokenizer Sequence[Split(regex of v.pre), ByteLevel], post_processor
//    ByteLevel (or TemplateProcessing adding BOS when v.add_bos), decoder ByteLevel, model BPE.
//  - Spm: the layout of Llama-2's tokenizer.json (HF LlamaConverter): model BPE with
//    byte_fallback and fuse_unk true, vocab holding every token (pieces spelled with U+2581;
//    llama2.c's ' ' is converted), merges "a b" for every split of a Normal piece p = a + b
//    (at a code point) into two Normal pieces, ordered by the score of p, highest first, ties
//    by p's id, then (id of a, id of b) (the order HF's SentencePieceExtractor leaves after its
//    stable sort by score); normalizer Sequence[Prepend("▁"), Replace(" ", "▁")] (Replace only
//    without add_space_prefix), pre_tokenizer null, decoder Sequence[Replace("▁", " "),
//    ByteFallback, Fuse, Strip(" ", 1, 0)], added_tokens for Control/Unknown (special) and
//    UserDefined tokens, post_processor TemplateProcessing adding BOS when v.add_bos (else
//    null). Reading it back (parse_tokenizer_json) encodes identically when the scores of the
//    merge-produced pieces are distinct. Throws loom::Error when two pieces coincide once ' '
//    is spelled U+2581.
std::string vocab_to_tokenizer_json(const Vocab& v);
// The companion tokenizer_config.json: bos_token, eos_token, add_bos_token, chat_template.
std::string vocab_to_tokenizer_config_json(const Vocab& v);

// Deterministic synthetic vocabulary of exactly `size` tokens (same (kind, size, seed) -> same
// vocabulary on every machine).
//  - Bpe: synth_bpe_vocab(size, seed, "llama3").
//  - Spm: <unk>, <s>, </s>, <0x00>..<0xFF>, then pieces spelled with U+2581 as the word
//    marker (as GGUF "llama" vocabularies are): single code points first, then pieces learned
//    greedily from the built-in text and seeded random concatenations, scored -rank.
// Throws loom::Error when size is too small to hold the required tokens (Bpe: 256 + specials;
// Spm: 259).
Vocab synth_vocab(VocabKind kind, int size, uint64_t seed);
// Byte-level BPE: 256 byte tokens in the GPT-2 byte-to-unicode alphabet, then merges (each
// merge's result is a new token; learned greedily from pair frequencies of a small built-in
// English text, then seeded random pairs of existing tokens), then the special tokens of `pre`
// at the end: "llama3": <|begin_of_text|> (bos), <|end_of_text|> (eos), <|start_header_id|>,
// <|end_header_id|>, <|eot_id|>; "qwen2": <|endoftext|> (eos), <|im_start|>, <|im_end|>
// (no bos, add_bos false); "gpt2": <|endoftext|> (bos and eos). Merges are unique and every
// merge's parts are tokens defined before its result.
Vocab synth_bpe_vocab(int size, uint64_t seed, const std::string& pre);

}  // namespace loom
