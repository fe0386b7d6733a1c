// `loom generate`: load a model, tokenize a prompt, stream the generated text.
//
// Many ranks: `--ranks N --plan tp=4 [--comm local|mpi]` (or several --prompt) run the prompts as
// one batch through the distributed engine (engine/dist_engine.h): local = N ranks as threads of
// this process (1 worker thread each unless --threads), mpi = one rank per process under
// `mpirun -np N loom generate ... --comm mpi` (each process maps the model; only rank 0 prints).
// --prefill-chunk is then the engine's token budget per step (chunked prefill beside decodes).
// Plan sets (cli/layout_cli.h): `--plan tp=4 --plan dp=4 --policy cycle:8`; Shift Parallelism:
// `--plan sp=2,tp=2 --policy shift [--shift-threshold N] [--shift-weights separate|slice]`. The
// start-up lines report the weights per rank and plan, the last lines the steps, switches and KV
// bytes moved per plan.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/cli.h"
#include "cli/layout_cli.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/dist_engine.h"
#include "engine/generator.h"
#include "kernels/kernels.h"
#include "model/loader.h"
#include "model/tokenizer.h"

namespace loom::cli {

namespace {

struct GenerateArgs {
  std::string model, tokenizer;
  std::vector<std::string> prompts;  // default {"Once upon a time"}
  int n = 256;
  float temperature = 0.0f, top_p = 1.0f;
  int top_k = 0;
  uint64_t seed = 0;
  int threads = 0;
  int prefill_chunk = 512;
  int max_model_len = 0;
  bool print_ids = false;
  bool no_bos = false;
  int ranks = 0;  // 0: not given
  std::string comm;
  LayoutArgs layout;
};

std::vector<int32_t> stop_ids_of(const Model& model, const Tokenizer& tok) {
  std::vector<int32_t> ids;
  for (int i = 0; i < tok.vocab_size(); ++i)
    if (tok.is_eog(i)) ids.push_back(i);
  // llama2.c checkpoints end a story by starting the next one: BOS stops generation there
  // (as llama2.c's run.c does).
  if (model.format == "llama2c" && model.config.bos_id >= 0) ids.push_back(model.config.bos_id);
  return ids;
}

void print_ids(const std::vector<int32_t>& prompt, const std::vector<int32_t>& generated) {
  std::fputs("ids:", stdout);
  for (int32_t id : prompt) std::printf(" %d", id);
  std::fputs(" |", stdout);
  for (int32_t id : generated) std::printf(" %d", id);
  std::fputs("\n", stdout);
}

// The prompts as one batch through the distributed engine; rank 0 prints, in prompt order.
void run_generate_distributed(const GenerateArgs& a) {
  if (a.n < 1) fail("--max-tokens (-n) must be >= 1 with --ranks/--plan/--comm or several prompts, got ", a.n);
  DistOptions o;
  o.comm = a.comm.empty() ? "local" : a.comm;
  int ranks = layout_ranks(a.layout, a.ranks);
  // Under mpi without --ranks: as many as mpirun started (the plan's size is checked against them).
  if (a.comm == "mpi" && a.ranks == 0) ranks = 0;
  o.ranks = ranks > 0 ? ranks : (o.comm == "mpi" ? 0 : 1);
  apply_layout_options(a.layout, o.ranks > 0 ? o.ranks : 1, o);
  if (a.layout.plans.empty() && o.comm == "mpi" && a.ranks == 0)
    fail("--comm mpi without --ranks needs a --plan (e.g. --plan tp=4)");
  o.model_path = a.model;
  o.engine.threads = a.threads;
  o.engine.max_tokens_per_step = a.prefill_chunk;
  o.engine.max_model_len = a.max_model_len;
  run_distributed(o, [&](DistEngine& e) {
    for (const std::string& line : e.start_info()) std::fprintf(stderr, "[%s]\n", line.c_str());
    auto tok = Tokenizer::create(load_vocab(a.model, a.tokenizer));
    const std::vector<int32_t> stop = stop_ids_of(*e.model(), *tok);
    std::vector<Request> reqs;
    std::vector<std::vector<int32_t>> prompts;
    for (size_t i = 0; i < a.prompts.size(); ++i) {
      Request r;
      r.id = int64_t(i);
      r.prompt = tok->encode(a.prompts[i], !a.no_bos);
      r.max_tokens = a.n;
      r.stop.eos_ids = stop;
      r.sampling.temperature = a.temperature;
      r.sampling.top_p = a.top_p;
      r.sampling.top_k = a.top_k;
      r.sampling.seed = a.seed;
      prompts.push_back(r.prompt);
      reqs.push_back(std::move(r));
    }
    // Streamed as it is generated (issue 19, defect 14): prompt i's text goes out token by token
    // while every earlier prompt has finished; a later prompt's text is held until then, so stdout
    // is the prompts' texts in prompt order, each on its own line(s), and a fault late in a long
    // run leaves everything generated before it on stdout.
    struct Out {
      std::unique_ptr<StreamDecoder> dec;
      std::string held;  // decoded, not yet printed (not its turn)
      bool finished = false;
      std::vector<int32_t> output;
    };
    std::vector<Out> outs(reqs.size());
    size_t turn = 0;  // the prompt whose text streams now
    auto emit = [&](size_t i, const std::string& piece) {
      if (piece.empty()) return;
      if (i == turn) {
        std::fputs(piece.c_str(), stdout);
        std::fflush(stdout);
      } else {
        outs[i].held += piece;
      }
    };
    for (size_t i = 0; i < reqs.size(); ++i) {
      outs[i].dec = std::make_unique<StreamDecoder>(*tok);
      std::string shown;
      for (int32_t id : prompts[i]) shown += outs[i].dec->push(id);
      emit(i, shown);
    }
    auto advance = [&] {
      // Finished prompts in order end their line; the next one's held text comes out.
      while (turn < outs.size() && outs[turn].finished) {
        std::fputs("\n", stdout);
        if (a.print_ids) print_ids(prompts[turn], outs[turn].output);
        ++turn;
        if (turn < outs.size()) {
          std::fputs(outs[turn].held.c_str(), stdout);
          outs[turn].held.clear();
        }
      }
      std::fflush(stdout);
    };
    int64_t n_gen = 0;
    std::vector<const Sequence*> by_id(reqs.size(), nullptr);
    e.loop().on_token = [&](const TokenEvent& ev) {
      const size_t i = size_t(ev.seq_id);
      if (i >= outs.size() || outs[i].finished) return;
      if (std::find(stop.begin(), stop.end(), ev.token) == stop.end()) emit(i, outs[i].dec->push(ev.token));
    };
    std::vector<Sequence> finished_seqs;
    finished_seqs.reserve(reqs.size());
    auto prev_finish = e.loop().on_finish;
    e.loop().on_finish = [&](const Sequence& s) {
      if (prev_finish) prev_finish(s);
      const size_t i = size_t(s.id());
      if (i >= outs.size() || outs[i].finished) return;
      emit(i, outs[i].dec->flush());
      outs[i].output = s.output;
      outs[i].finished = true;
      advance();
    };
    const double t0 = e.clock().now();
    std::vector<Sequence> done;
    try {
      done = e.run(reqs);
    } catch (...) {
      e.loop().on_token = nullptr;
      e.loop().on_finish = prev_finish;
      std::fflush(stdout);
      throw;
    }
    e.loop().on_token = nullptr;
    e.loop().on_finish = prev_finish;
    const double secs = e.clock().now() - t0;
    for (const Sequence& s : done) by_id.at(size_t(s.id())) = &s;
    for (size_t i = 0; i < reqs.size(); ++i) {
      const Sequence* s = by_id[i];
      if (!s) fail("prompt ", i, " did not finish");
      if (s->finish_reason == FinishReason::kRejected || s->finish_reason == FinishReason::kError)
        fail("prompt ", i, ": ", finish_reason_name(s->finish_reason), ": ", s->finish_detail);
      n_gen += s->num_output();
    }
    std::fflush(stdout);
    std::fprintf(stderr, "[%zu prompts, %lld tokens generated in %.3f s (%.1f tok/s), plan %s on %d %s ranks, %d threads per rank, %s kernels, %s numerics]\n",
                 reqs.size(), (long long)n_gen, secs, secs > 0 ? double(n_gen) / secs : 0.0,
                 e.plan().to_string().c_str(), e.world_size(), std::string(e.backend()).c_str(),
                 e.threads_per_rank(), kernels::kernel_path(), kernels::numerics_name(kernels::default_numerics()));
    print_plan_stats(e);
  });
}

void run_generate(const GenerateArgs& a) {
  if (a.temperature < 0.0f) fail("--temperature must be >= 0, got ", a.temperature);
  if (!(a.top_p > 0.0f && a.top_p <= 1.0f)) fail("--top-p must be in (0, 1], got ", a.top_p);
  if (a.top_k < 0) fail("--top-k must be >= 0, got ", a.top_k);
  if (a.n < 0) fail("--max-tokens (-n) must be >= 0, got ", a.n);
  if (a.ranks != 0 || !a.comm.empty() || a.prompts.size() > 1 || a.layout.given())
    return run_generate_distributed(a);
  layout_ranks(a.layout, 1);  // --device (and the defaults) checked before the model loads

  std::shared_ptr<Model> model = load_model(a.model);
  auto tok = Tokenizer::create(load_vocab(a.model, a.tokenizer));

  std::vector<int32_t> prompt = tok->encode(a.prompts.at(0), !a.no_bos);
  ThreadPool pool(a.threads > 0 ? a.threads : default_thread_count());

  GenerateOptions opts;
  opts.max_new_tokens = a.n;
  opts.prefill_chunk = a.prefill_chunk;
  opts.sampling.temperature = a.temperature;
  opts.sampling.top_p = a.top_p;
  opts.sampling.top_k = a.top_k;
  opts.seed = a.seed;
  opts.stop_ids = stop_ids_of(*model, *tok);

  StreamDecoder stream(*tok);
  // The prompt text first, as the model sees it (after BOS), then the continuation.
  std::string shown;
  for (int32_t id : prompt) {
    shown += stream.push(id);
  }
  std::fputs(shown.c_str(), stdout);
  std::fflush(stdout);
  std::vector<int32_t> generated;
  GenerateResult r = generate(model, &pool, prompt, opts, [&](int32_t id) {
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
  if (a.print_ids) print_ids(prompt, generated);
  const double pf = r.prefill_s > 0 ? double(prompt.size()) / r.prefill_s : 0.0;
  const double dc = r.decode_s > 0 && r.tokens.size() > 1 ? double(r.tokens.size() - 1) / r.decode_s : 0.0;
  std::fprintf(stderr, "[%zu prompt tokens at %.1f tok/s, %zu generated at %.1f tok/s, %d threads, %s kernels, %s numerics]\n",
               prompt.size(), pf, r.tokens.size(), dc, pool.size(), kernels::kernel_path(),
               kernels::numerics_name(kernels::default_numerics()));
}

}  // namespace

void register_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* sub = app.add_subcommand("generate", "Generate text from a prompt, streaming it as it is produced");
  sub->add_option("--model,-m", a->model, "Model: llama2.c .bin, GGUF file, or safetensors dir/file")->required();
  sub->add_option("--tokenizer,-t", a->tokenizer, "Tokenizer file (llama2.c .bin or tokenizer.json) if not with the model");
  sub->add_option("--prompt,-p", a->prompts, "Prompt text (repeat for a batch of prompts)");
  sub->add_option("--max-tokens,-n", a->n, "Tokens to generate at most (vLLM's max_tokens)")->capture_default_str();
  sub->add_option("--temperature", a->temperature, "Sampling temperature (0 = greedy)");
  sub->add_option("--top-p", a->top_p, "Nucleus sampling threshold");
  sub->add_option("--top-k", a->top_k, "Top-k sampling (0 = off)");
  sub->add_option("--seed", a->seed, "Sampling seed");
  sub->add_option("--threads", a->threads, "Worker threads (default: all cores, or LOOM_THREADS)");
  add_numerics_option(sub);
  sub->add_option("--prefill-chunk", a->prefill_chunk, "Prompt tokens per forward step");
  sub->add_option("--max-model-len", a->max_model_len, "Prompt + output tokens at most (default: the model's context)");
  sub->add_flag("--print-ids", a->print_ids, "Also print the prompt and generated token ids");
  sub->add_flag("--no-bos", a->no_bos, "Do not prepend BOS to the prompt");
  sub->add_option("--ranks", a->ranks, "Ranks to run on (local: threads of this process; mpi: must match mpirun -np)");
  sub->add_option("--comm", a->comm, "Communicator backend: single, local or mpi (default local)");
  add_layout_options(sub, a->layout);
  CLI::Option* ranks = sub->get_option("--ranks");
  set_action(sub, [a, ranks] {
    // Ranges: cli/option_ranges.cpp. --ranks 0 (or negative) no longer silently means 1.
    if (ranks->count() > 0 && a->ranks == 0 && a->comm != "mpi")
      fail("--ranks 0 means as many ranks as mpirun started: only with --comm mpi (give --ranks N >= 1)");
    if (a->prompts.empty()) a->prompts.push_back("Once upon a time");
    run_generate(*a);
  });
}

}  // namespace loom::cli
