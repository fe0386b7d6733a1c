#include "model/chat_template.h"

namespace loom {

ChatFormat detect_chat_format(const Vocab& v) { return ChatFormat::Plain; }
const char* chat_format_name(ChatFormat f) { return "plain"; }
std::string apply_chat_template(const Vocab& v, const std::vector<ChatMessage>& msgs, bool add_generation_prompt) { return apply_chat_template(detect_chat_format(v), msgs, add_generation_prompt); }
std::string apply_chat_template(ChatFormat f, const std::vector<ChatMessage>& msgs, bool add_generation_prompt) { return {}; }

}  // namespace loom
