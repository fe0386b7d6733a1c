// `loom generate`: load a model, tokenize a prompt, stream the generated text.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/cli.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/generator.h"
#include "engine/transformer.h"
#include "kernels/kernels.h"
#include "model/loader.h"
#include "model/tokenizer.h"

namespace loom::cli {

namespace {

struct GenerateArgs {
  std::string model, tokenizer, prompt = "Once upon a time";
  int n = 256;
  float temperature = 0.0f, top_p = 1.0f;
  int top_k = 0;
  uint64_t seed = 0;
  int threads = 0;
  int prefill_chunk = 512;
  bool print_ids = false;
  bool no_bos = false;
};

void run_generate(const GenerateArgs& a) {
  if (a.temperature < 0.0f) fail("--temperature must be >= 0, got ", a.temperature);
  if (!(a.top_p > 0.0f && a.top_p <= 1.0f)) fail("--top-p must be in (0, 1], got ", a.top_p);
  if (a.top_k < 0) fail("--top-k must be >= 0, got ", a.top_k);
  if (a.n < 0) fail("-n must be >= 0, got ", a.n);

  std::shared_ptr<Model> model = load_model(a.model);
  auto tok = Tokenizer::create(load_vocab(a.model, a.tokenizer));
  const ModelConfig& c = model->config;

  std::vector<int32_t> prompt = tok->encode(a.prompt, !a.no_bos);
  ThreadPool pool(a.threads > 0 ? a.threads : default_thread_count());
  Transformer tf(model, ShardSpec::full(c), &pool);

  GenerateOptions opts;
  opts.max_new_tokens = a.n;
  opts.prefill_chunk = a.prefill_chunk;
  opts.sampling.temperature = a.temperature;
  opts.sampling.top_p = a.top_p;
  opts.sampling.top_k = a.top_k;
  opts.seed = a.seed;
  for (int i = 0; i < tok->vocab_size(); ++i)
    if (tok->is_eog(i)) opts.stop_ids.push_back(i);
  // llama2.c checkpoints end a story by starting the next one: BOS stops generation there
  // (as llama2.c's run.c does).
  if (model->format == "llama2c" && c.bos_id >= 0) opts.stop_ids.push_back(c.bos_id);

  StreamDecoder stream(*tok);
  // The prompt text first, as the model sees it (after BOS), then the continuation.
  std::string shown;
  for (int32_t id : prompt) {
    shown += stream.push(id);
  }
  std::fputs(shown.c_str(), stdout);
  std::fflush(stdout);
  std::vector<int32_t> generated;
  GenerateResult r = generate(tf, prompt, opts, [&](int32_t id) {
    generated.push_back(id);
    const bool is_stop = std::find(opts.stop_ids.begin(), opts.stop_ids.end(), id) != opts.stop_ids.end();
    if (!is_stop) {
      std::string piece = stream.push(id);
      std::fputs(piece.c_str(), stdout);
      std::fflush(stdout);
    }
    return true;
  });
  std::string rest = stream.flush();
  std::fputs(rest.c_str(), stdout);
  std::fputs("\n", stdout);
  if (a.print_ids) {
    std::fputs("ids:", stdout);
    for (int32_t id : prompt) std::printf(" %d", id);
    std::fputs(" |", stdout);
    for (int32_t id : generated) std::printf(" %d", id);
    std::fputs("\n", stdout);
  }
  const double pf = r.prefill_s > 0 ? double(prompt.size()) / r.prefill_s : 0.0;
  const double dc = r.decode_s > 0 && r.tokens.size() > 1 ? double(r.tokens.size() - 1) / r.decode_s : 0.0;
  std::fprintf(stderr, "[%zu prompt tokens at %.1f tok/s, %zu generated at %.1f tok/s, %d threads, %s kernels]\n",
               prompt.size(), pf, r.tokens.size(), dc, pool.size(), kernels::kernel_path());
}

}  // namespace

void register_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* sub = app.add_subcommand("generate", "Generate text from a prompt, streaming it as it is produced");
  sub->add_option("--model,-m", a->model, "Model: llama2.c .bin, GGUF file, or safetensors dir/file")->required();
  sub->add_option("--tokenizer,-t", a->tokenizer, "Tokenizer file (llama2.c .bin or tokenizer.json) if not with the model");
  sub->add_option("--prompt,-p", a->prompt, "Prompt text");
  sub->add_option("-n", a->n, "Tokens to generate");
  sub->add_option("--temperature", a->temperature, "Sampling temperature (0 = greedy)");
  sub->add_option("--top-p", a->top_p, "Nucleus sampling threshold");
  sub->add_option("--top-k", a->top_k, "Top-k sampling (0 = off)");
  sub->add_option("--seed", a->seed, "Sampling seed");
  sub->add_option("--threads", a->threads, "Worker threads (default: all cores, or LOOM_THREADS)");
  sub->add_option("--prefill-chunk", a->prefill_chunk, "Prompt tokens per forward step");
  sub->add_flag("--print-ids", a->print_ids, "Also print the prompt and generated token ids");
  sub->add_flag("--no-bos", a->no_bos, "Do not prepend BOS to the prompt");
  set_action(sub, [a] { run_generate(*a); });
}

}  // namespace loom::cli
