// `loom tokenize --model PATH --text T [--tokenizer FILE] [--no-bos]`: prints the token ids of
// T as a JSON array on one line (e.g. `[1, 403, 22]`). Hidden from `loom --help` (a tool for
// tests and debugging, e.g. tests/model/interop/ compares it with Hugging Face's tokenizers);
// the vocabulary comes from load_vocab (model/loader.h), BOS is prepended when the vocabulary
// asks for it (Vocab::add_bos) unless --no-bos, and special-token text is matched
// (Tokenizer::encode with parse_special).
#include <cstdio>
#include <memory>
#include <string>

#include "cli/cli.h"
#include "core/error.h"
#include "model/loader.h"
#include "model/tokenizer.h"

namespace loom::cli {

void register_tokenize(CLI::App& app) {
  struct Args {
    std::string model, tokenizer, text;
    bool no_bos = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("tokenize", "Print the token ids of a text as JSON");
  sub->group("");  // hidden: documented above and in cli.h
  sub->add_option("--model,-m", a->model, "Model: llama2.c .bin, GGUF file, or safetensors dir/file")->required();
  sub->add_option("--tokenizer,-t", a->tokenizer, "Tokenizer file (llama2.c .bin or tokenizer.json) if not with the model");
  sub->add_option("--text", a->text, "Text to encode")->required();
  sub->add_flag("--no-bos", a->no_bos, "Do not prepend BOS");
  set_action(sub, [a] {
    auto tok = Tokenizer::create(load_vocab(a->model, a->tokenizer));
    const auto ids = tok->encode(a->text, !a->no_bos && tok->vocab().add_bos);
    std::string out = "[";
    for (size_t i = 0; i < ids.size(); ++i) out += cat(i ? ", " : "", ids[i]);
    out += "]\n";
    std::fputs(out.c_str(), stdout);
  });
}

}  // namespace loom::cli
