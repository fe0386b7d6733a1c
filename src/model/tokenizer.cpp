#include "model/tokenizer.h"

#include "core/error.h"

namespace loom {

Tokenizer::Tokenizer(Vocab v) : vocab_(std::move(v)) {}
std::unique_ptr<Tokenizer> Tokenizer::create(Vocab v) { fail("Tokenizer::create: not implemented yet"); }
std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  int32_t prev = -1;
  for (int32_t id : ids) { out += token_piece_bytes(prev, id); prev = id; }
  return out;
}
bool Tokenizer::is_eog(int32_t id) const { return id == vocab_.eos_id; }
std::string StreamDecoder::push(int32_t id) { pending_ += tok_.token_piece_bytes(prev_, id); prev_ = id; return take_complete(); }
std::string StreamDecoder::flush() { std::string s; s.swap(pending_); return s; }
std::string StreamDecoder::take_complete() { std::string s; s.swap(pending_); return s; }
bool is_valid_utf8(std::string_view s) { return true; }

}  // namespace loom
