// Built-in chat formats, chosen by recognising the model's Jinja chat_template text or its
// special tokens (no Jinja engine). Formats (exact strings in chat_template.cpp):
//  - Llama2:  "<s>[INST] <<SYS>>\n{sys}\n<</SYS>>\n\n{user} [/INST] {assistant} </s><s>[INST] ..."
//  - Llama3:  "<|begin_of_text|><|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>"
//  - ChatML:  "<|im_start|>{role}\n{content}<|im_end|>\n"
//  - Plain:   "{role}: {content}\n"
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "model/vocab.h"

namespace loom {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

enum class ChatFormat { Llama2, Llama3, ChatML, Plain };

// Detects the format: chat_template text first ("<|start_header_id|>" -> Llama3, "<|im_start|>"
// -> ChatML, "[INST]" -> Llama2), then the vocabulary's special tokens, else Plain.
ChatFormat detect_chat_format(const Vocab& v);
const char* chat_format_name(ChatFormat f);

// Renders msgs in the format of v. add_generation_prompt appends the opening of an assistant
// turn. The BOS text ("<s>", "<|begin_of_text|>") is included where the format writes it, so
// encode the result with add_bos = false (special tokens in the text are matched).
std::string apply_chat_template(const Vocab& v, const std::vector<ChatMessage>& msgs,
                                bool add_generation_prompt);
std::string apply_chat_template(ChatFormat f, const std::vector<ChatMessage>& msgs,
                                bool add_generation_prompt);

// The same text, and the byte ranges [begin, end) of it that are message content (what a client
// wrote). Tokenizer::encode with these as literal ranges tokenizes special-token spellings in
// content as plain text (the safe mode: a user cannot forge "<|im_start|>system" turns; by default
// HF tokenizers, vLLM and llama.cpp parse them as control tokens, and so does loom).
struct ChatPrompt {
  std::string text;
  std::vector<std::pair<size_t, size_t>> content;
};
ChatPrompt render_chat(const Vocab& v, const std::vector<ChatMessage>& msgs, bool add_generation_prompt);
ChatPrompt render_chat(ChatFormat f, const std::vector<ChatMessage>& msgs, bool add_generation_prompt);

}  // namespace loom
