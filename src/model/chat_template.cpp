#include "model/chat_template.h"

#include <algorithm>

namespace loom {

namespace {

bool has_token(const Vocab& v, const char* piece) {
  return std::find(v.tokens.begin(), v.tokens.end(), piece) != v.tokens.end();
}

// Jinja's `| trim` and Meta's reference code's .strip(): ASCII whitespace at both ends.
std::string trim(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) + 1 - b);
}

// A rendering: the text, and where message contents sit in it (ChatPrompt::content).
struct Out {
  ChatPrompt p;
  void t(const std::string& x) { p.text += x; }
  void c(const std::string& x) {
    p.content.push_back({p.text.size(), p.text.size() + x.size()});
    p.text += x;
  }
};

// Llama-2 chat (Meta's llama/generation.py chat_completion): the system prompt is folded into
// the first user turn as "<<SYS>>\n{system}\n<</SYS>>\n\n"; each user/assistant pair is
// "<s>[INST] {user} [/INST] {assistant} </s>"; a final user turn is "<s>[INST] {user} [/INST]"
// (the model answers after it, so add_generation_prompt adds nothing). Contents are stripped.
ChatPrompt render_llama2(const std::vector<ChatMessage>& msgs) {
  Out out;
  std::string system;  // the system prompt waiting for the first user turn
  bool in_turn = false;  // an [INST] ... [/INST] is open, awaiting the assistant's answer
  for (const auto& m : msgs) {
    if (m.role == "system") {
      system += trim(m.content);
    } else if (m.role == "assistant") {
      if (!in_turn) out.t("<s>");  // an assistant message with no user before it
      out.t(" ");
      out.c(trim(m.content));
      out.t(" </s>");
      in_turn = false;
    } else {  // "user" and any other role speak inside [INST]
      out.t("<s>[INST] ");
      if (!system.empty()) {
        out.t("<<SYS>>\n");
        out.c(system);
        out.t("\n<</SYS>>\n\n");
        system.clear();
      }
      out.c(trim(m.content));
      out.t(" [/INST]");
      in_turn = true;
    }
  }
  if (!system.empty()) {
    out.t("<s>[INST] <<SYS>>\n");
    out.c(system);
    out.t("\n<</SYS>>\n\n [/INST]");
  }
  return out.p;
}

// Llama-3 instruct (Meta's model card / tokenizer_config chat_template): "<|begin_of_text|>"
// once, then per message "<|start_header_id|>{role}<|end_header_id|>\n\n{content | trim}
// <|eot_id|>"; the generation prompt is the assistant header.
ChatPrompt render_llama3(const std::vector<ChatMessage>& msgs, bool gen) {
  Out out;
  out.t("<|begin_of_text|>");
  for (const auto& m : msgs) {
    out.t("<|start_header_id|>" + m.role + "<|end_header_id|>\n\n");
    out.c(trim(m.content));
    out.t("<|eot_id|>");
  }
  if (gen) out.t("<|start_header_id|>assistant<|end_header_id|>\n\n");
  return out.p;
}

// ChatML (OpenAI's ChatML document, used by Qwen): "<|im_start|>{role}\n{content}<|im_end|>\n"
// per message, content as given; the generation prompt is "<|im_start|>assistant\n". No
// default system message is inserted (Qwen's own templates add one; ours leaves that to the
// caller).
ChatPrompt render_chatml(const std::vector<ChatMessage>& msgs, bool gen) {
  Out out;
  for (const auto& m : msgs) {
    out.t("<|im_start|>" + m.role + "\n");
    out.c(m.content);
    out.t("<|im_end|>\n");
  }
  if (gen) out.t("<|im_start|>assistant\n");
  return out.p;
}

// Plain: "{role}: {content}\n" per message; the generation prompt is "assistant:".
ChatPrompt render_plain(const std::vector<ChatMessage>& msgs, bool gen) {
  Out out;
  for (const auto& m : msgs) {
    out.t(m.role + ": ");
    out.c(m.content);
    out.t("\n");
  }
  if (gen) out.t("assistant:");
  return out.p;
}

}  // namespace

ChatFormat detect_chat_format(const Vocab& v) {
  const std::string& t = v.chat_template;
  if (!t.empty()) {
    if (t.find("<|start_header_id|>") != std::string::npos) return ChatFormat::Llama3;
    if (t.find("<|im_start|>") != std::string::npos) return ChatFormat::ChatML;
    if (t.find("[INST]") != std::string::npos) return ChatFormat::Llama2;
  }
  if (has_token(v, "<|start_header_id|>")) return ChatFormat::Llama3;
  if (has_token(v, "<|im_start|>")) return ChatFormat::ChatML;
  return ChatFormat::Plain;
}

const char* chat_format_name(ChatFormat f) {
  switch (f) {
    case ChatFormat::Llama2: return "llama2";
    case ChatFormat::Llama3: return "llama3";
    case ChatFormat::ChatML: return "chatml";
    case ChatFormat::Plain: return "plain";
  }
  return "plain";
}

std::string apply_chat_template(const Vocab& v, const std::vector<ChatMessage>& msgs,
                                bool add_generation_prompt) {
  return render_chat(detect_chat_format(v), msgs, add_generation_prompt).text;
}

std::string apply_chat_template(ChatFormat f, const std::vector<ChatMessage>& msgs,
                                bool add_generation_prompt) {
  return render_chat(f, msgs, add_generation_prompt).text;
}

ChatPrompt render_chat(const Vocab& v, const std::vector<ChatMessage>& msgs, bool add_generation_prompt) {
  return render_chat(detect_chat_format(v), msgs, add_generation_prompt);
}

ChatPrompt render_chat(ChatFormat f, const std::vector<ChatMessage>& msgs, bool add_generation_prompt) {
  switch (f) {
    case ChatFormat::Llama2: return render_llama2(msgs);
    case ChatFormat::Llama3: return render_llama3(msgs, add_generation_prompt);
    case ChatFormat::ChatML: return render_chatml(msgs, add_generation_prompt);
    case ChatFormat::Plain: return render_plain(msgs, add_generation_prompt);
  }
  return render_plain(msgs, add_generation_prompt);
}

}  // namespace loom
