// bench_gpu (CUDA builds only): loom's engine on the GPU against this GPU's own measured limits.
// The engine is loom's one forward (RankEngine: the stages of engine/stage.h over the CUDA device,
// device/device.h), not a separate GPU loop.
//   1. device-to-device copy bandwidth (cudaMemcpyAsync, read + write bytes) and bf16 GEMM peak
//      (cuBLAS, 8192^3, f32 accumulation): the two roofs;
//   2. decode of the llama-3.1-8b shape in bf16 at batch 1 (random weights built in host memory,
//      model/random_model.h, uploaded once; context 512): weight and KV bytes read per step over the
//      step time, against the measured copy bandwidth (target >= 80%);
//   3. prefill of 2048 tokens: FLOP/s (2 x matrix parameters x tokens, plus attention) against the
//      measured GEMM peak (target >= 60%);
//   4. batched decode: tokens/s and bytes/s at batch 1..64 (target at 64: >= 70% of the bandwidth);
//   4b. switches on one GPU (two rank threads sharing it, llama-3.2-1b shape): a Shift switch
//      (same placement), a TP-degree switch tp=2 -> dp=2 with its KV migration, a Seesaw
//      transition pp=2 -> tp=2, in milliseconds;
//   5. per-operator times in the CSV format of ../shared/data/gpu-measurements/a100/mlp_*.csv
//      (time_stats.<op>.{min,max,mean,median,std} in ms, then the model and shape columns) at
//      the token counts and TP degrees of each of that folder's files (the MLP and attention
//      projections of one TP shard, bf16 weights), one file per model into $LOOM_GPU_CSV_DIR, so
//      `loom sim validate --calibrate-on <a100> --hardware <this GPU> --measurements <dir>` checks
//      the calibration transfer (see write_op_csvs for the knobs).
// Prints ratios measured in one run; never run by CI. Exits 0 with a message without a GPU.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "comm/local.h"
#include "comm/single.h"
#include "engine/rank_engine.h"
#include "engine/stage.h"
#include "gpu/cuda/cuda_device.h"
#include "gpu/cuda/cuda_util.h"
#include "gpu/cuda/gemm.h"
#include "gpu/cuda/ops.h"
#include "gpu/cuda/shared_gpu.h"
#include "gpu/device.h"
#include "model/random_model.h"
#include "model/synth.h"

using namespace loom;
using namespace loom::gpu;

namespace {

// Milliseconds of fn() on `s`, `reps` times after 2 warm-ups.
template <class F>
std::vector<double> time_ms(cudaStream_t s, int reps, F&& fn) {
  Event a, b;
  for (int i = 0; i < 2; ++i) fn();
  std::vector<double> out;
  for (int i = 0; i < reps; ++i) {
    a.record(s);
    fn();
    b.record(s);
    b.sync();
    out.push_back(b.ms_since(a));
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Stats {
  double min, max, mean, median, std;
};
Stats stats(const std::vector<double>& v) {
  Stats s{};
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  s.median = median(v);
  double var = 0;
  for (double x : v) var += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(var / double(v.size()));
  return s;
}

double copy_bandwidth(cudaStream_t s) {
  const std::size_t bytes = std::size_t(1) << 30;
  DeviceBuffer a(bytes), b(bytes);
  LOOM_CUDA_CHECK(cudaMemsetAsync(a.data(), 1, bytes, s));
  const double ms = median(time_ms(s, 10, [&] {
    LOOM_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, s));
  }));
  return 2.0 * double(bytes) / (ms * 1e-3);  // read + write
}

double gemm_peak(cudaStream_t s, Gemm& g) {
  const int64_t n = 8192;
  DeviceBuffer x(std::size_t(n * n) * 2), w(std::size_t(n * n) * 2), y(std::size_t(n * n) * 4);
  fill_random(x.data(), DType::BF16, n * n, 1, 1.0f, s);
  fill_random(w.data(), DType::BF16, n * n, 2, 1.0f, s);
  const double ms = median(time_ms(s, 10, [&] {
    g.gemm_bf16(x.as<uint16_t>(), n, w.as<uint16_t>(), n, n, y.as<float>());
  }));
  return 2.0 * double(n) * double(n) * double(n) / (ms * 1e-3);
}

// Seconds of fn() by the wall clock (the engine's forward returns when its logits are on the host).
template <class F>
double wall_s(F&& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Decode steps of `batch` sequences at context `ctx` through the engine: seconds per step (median
// of `steps`).
double decode_step_s(RankEngine& e, int batch, int ctx, int steps) {
  ForwardBatch fb;
  std::vector<float> logits;
  for (int b = 0; b < batch; ++b) {  // prefill each context (not timed)
    fb.tokens.assign(std::size_t(ctx), 7);
    fb.seqs = {ForwardSeq{1000 + b, 0, ctx, true}};
    e.forward(fb, &logits);
  }
  std::vector<double> t;
  for (int i = 0; i < steps; ++i) {
    fb.tokens.assign(std::size_t(batch), 11);
    fb.seqs.clear();
    for (int b = 0; b < batch; ++b) fb.seqs.push_back(ForwardSeq{1000 + b, ctx + i, 1, true});
    t.push_back(wall_s([&] { e.forward(fb, &logits); }));
  }
  std::vector<RequestId> ids;
  for (int b = 0; b < batch; ++b) ids.push_back(1000 + b);
  e.release(ids);
  return median(t);
}

// Bytes one decode step reads: every layer's matrices and the classifier once, and each sequence's
// K and V (f32) over its context.
double decode_bytes(const Model& m, int batch, int ctx) {
  const ModelConfig& c = m.config;
  double w = double(m.output.bytes());
  for (const LayerWeights& L : m.layers)
    for (const WeightView* v : L.matrices()) w += double(v->bytes());
  const double kv = double(batch) * double(ctx) * double(c.n_layers) * double(c.kv_dim()) * 2.0 * 4.0;
  return w + kv;
}

// Switch times on one GPU shared by two rank threads (milliseconds, median of `reps`).
void switch_times(int reps) {
  const ModelConfig c = synth_shape("llama-3.2-1b").config;
  ThreadPool host(8);
  auto model = random_model(c, DType::BF16, 5, &host);
  const ModelShape shape = ModelShape::from(c, weight_block_elems(*model));
  struct Case {
    const char* what;
    std::vector<Plan> plans;
  };
  const std::vector<Case> cases = {
      {"Shift switch sp=2 <-> its shift config (same KV placement)", {Plan::parse("sp=2"), Plan::parse("shift:sp=2")}},
      {"TP-degree switch tp=2 <-> dp=2 (KV migrated)", {Plan::parse("tp=2"), Plan::parse("dp=2")}},
      {"Seesaw transition pp=2 <-> tp=2 (KV migrated)", {Plan::parse("pp=2"), Plan::parse("tp=2")}},
  };
  const int n_seqs = 16, ctx = 1024;
  for (const Case& k : cases) {
    const PlanSet set = PlanSet::make(k.plans, shape);
    std::vector<double> ms;
    int64_t moved = 0;
    LocalWorld::run(
        2,
        [&](Communicator& world) {
          auto dev = make_device(DeviceKind::Cuda, 0, nullptr);
          RankEngineOptions o;
          o.device = dev.get();
          o.kv_pages = int64_t(n_seqs) * (ctx / 16 + 1) * c.n_layers * c.n_kv_heads;
          RankEngine e(model, set, world, nullptr, o);
          ForwardBatch fb;
          std::vector<float> logits;
          std::vector<SeqExtent> seqs;
          for (int i = 0; i < n_seqs; ++i) {  // KV to move: n_seqs contexts written by a prefill
            fb.tokens.assign(std::size_t(ctx), 3);
            fb.seqs = {ForwardSeq{i, 0, ctx, false}};
            e.forward(fb, &logits);
            seqs.push_back(SeqExtent{i, ctx});
          }
          for (int r = 0; r < reps; ++r)
            for (int to : {1, 0}) {
              world.barrier();
              const double s = wall_s([&] {
                const SwitchResult sw = e.switch_to(to, seqs);
                e.device().sync();
                if (world.rank() == 0) moved = sw.total_bytes;
              });
              if (world.rank() == 0) ms.push_back(s * 1e3);
            }
        },
        CommOptions{}, shared_gpu_memory(0));
    std::printf("  %-58s %8.3f ms (median of %zu), %.1f MB moved\n", k.what, median(ms), ms.size(), double(moved) / 1e6);
  }
}

// One per-operator measurement file of the a100 folder: the model shape its columns give and the
// (num_tokens, TP) grid its rows cover.
struct CsvShape {
  std::string name;  // mlp_<model>.csv
  int64_t n_head = 0, n_kv_head = 0, n_embd = 0, n_expanded = 0, vocab = 0;
  bool gated = true;
  std::vector<std::pair<int, int>> grid;  // (tokens, tp), sorted
};

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> f;
  std::stringstream ss(line);
  std::string c;
  while (std::getline(ss, c, ',')) f.push_back(c);
  return f;
}

bool read_shape(const std::string& path, CsvShape& out) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return false;
  const auto head = split_csv(line);
  auto col = [&](const char* n) {
    for (std::size_t i = 0; i < head.size(); ++i)
      if (head[i] == n) return int(i);
    return -1;
  };
  const int ch = col("n_head"), ckv = col("n_kv_head"), ce = col("n_embd"), cx = col("n_expanded_embd"),
            cv = col("vocab_size"), cg = col("use_gated_mlp"), ct = col("num_tokens"),
            cp = col("num_tensor_parallel_workers");
  if (ch < 0 || ckv < 0 || ce < 0 || cx < 0 || ct < 0 || cp < 0) return false;
  std::set<std::pair<int, int>> seen;
  while (std::getline(in, line)) {
    const auto f = split_csv(line);
    if (int(f.size()) != int(head.size())) continue;
    out.n_head = std::atoll(f[std::size_t(ch)].c_str());
    out.n_kv_head = std::atoll(f[std::size_t(ckv)].c_str());
    out.n_embd = std::atoll(f[std::size_t(ce)].c_str());
    out.n_expanded = std::atoll(f[std::size_t(cx)].c_str());
    out.vocab = cv >= 0 ? std::atoll(f[std::size_t(cv)].c_str()) : 32000;
    out.gated = cg < 0 || f[std::size_t(cg)] == "True";
    seen.insert({std::atoi(f[std::size_t(ct)].c_str()), std::atoi(f[std::size_t(cp)].c_str())});
  }
  out.grid.assign(seen.begin(), seen.end());
  return !out.grid.empty();
}

// Keeps `keep` token counts of the grid (all TPs of each), evenly spaced over the sorted distinct
// counts, first and last included: a grid that takes minutes becomes one that takes seconds.
void thin_grid(CsvShape& s, int keep) {
  std::vector<int> tokens;
  for (auto [t, tp] : s.grid)
    if (tokens.empty() || tokens.back() != t) tokens.push_back(t);
  if (keep <= 0 || int(tokens.size()) <= keep) return;
  std::set<int> kept;
  for (int i = 0; i < keep; ++i)
    kept.insert(tokens[std::size_t(std::llround(double(i) * double(tokens.size() - 1) / double(keep - 1)))]);
  std::vector<std::pair<int, int>> g;
  for (auto p : s.grid)
    if (kept.count(p.first)) g.push_back(p);
  s.grid = std::move(g);
}

// Milliseconds of fn(): reps chosen so one operator takes about 40 ms (3..20 repetitions).
template <class F>
Stats op_stats(cudaStream_t s, F&& fn) {
  const double one = median(time_ms(s, 1, fn));
  const int reps = std::clamp(int(40.0 / std::max(one, 1e-3)), 3, 20);
  return stats(time_ms(s, reps, fn));
}

// Per-operator times of one TP shard of `c` over its grid, written in the a100 file's format.
void write_op_csv(const CsvShape& c, const std::string& path, cudaStream_t s, Gemm& g) {
  std::ofstream out(path);
  const char* ops[] = {"emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
                       "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add"};
  for (const char* op : ops)
    for (const char* st : {"min", "max", "mean", "median", "std"}) out << "time_stats." << op << "." << st << ",";
  out << "n_head,n_kv_head,n_embd,n_expanded_embd,vocab_size,use_gated_mlp,num_tokens,num_tensor_parallel_workers\n";
  const int64_t D = c.n_embd, hd = c.n_embd / c.n_head;
  kernels::RopeParams rp;
  rp.head_dim = int(hd);
  std::vector<float> inv(std::size_t(hd / 2));
  kernels::rope_inv_freq(rp, inv.data());
  DeviceBuffer dinv(inv.size() * 4);
  dinv.upload(inv.data(), inv.size() * 4);
  int done = 0;
  int last_tp = -1;
  DeviceWeight wqkv, wo, wup, wdown;
  DeviceWeight emb = DeviceWeight::random(DType::BF16, 4096, D, 15, 1.0f);
  for (auto [tokens, tp] : c.grid) {
    const int64_t T = tokens, Qh = c.n_head / tp, KVh = std::max<int64_t>(1, c.n_kv_head / tp),
                  F = c.n_expanded / tp;
    const int64_t qkv = (Qh + 2 * KVh) * hd, up = c.gated ? 2 * F : F;
    if (tp != last_tp) {  // one TP shard's weights, bf16, reused over token counts
      wqkv = DeviceWeight::random(DType::BF16, qkv, D, 11, 0.02f);
      wo = DeviceWeight::random(DType::BF16, D, Qh * hd, 12, 0.02f);
      wup = DeviceWeight::random(DType::BF16, up, D, 13, 0.02f);  // gate and up fused when gated
      wdown = DeviceWeight::random(DType::BF16, D, F, 14, 0.02f);
      last_tp = tp;
    }
    DeviceBuffer x(std::size_t(T * D) * 4), y(std::size_t(T * std::max<int64_t>(up, qkv)) * 4), nw(std::size_t(D) * 4);
    DeviceBuffer tok(std::size_t(T) * 4), pos(std::size_t(T) * 4);
    std::vector<int32_t> ht(static_cast<std::size_t>(T));
    for (int64_t i = 0; i < T; ++i) ht[std::size_t(i)] = int32_t(i % 4096);
    tok.upload(ht.data(), ht.size() * 4);
    pos.upload(ht.data(), ht.size() * 4);
    fill_random(x.data(), DType::F32, T * D, 3, 1.0f, s);
    fill_random(nw.data(), DType::F32, D, 4, 1.0f, s);
    std::map<std::string, Stats> r;
    r["emb"] = op_stats(s, [&] { embed_rows(emb.data(), DType::BF16, D, tok.as<int32_t>(), T, x.as<float>(), s); });
    r["input_layernorm"] = op_stats(s, [&] { rmsnorm(y.as<float>(), x.as<float>(), nw.as<float>(), T, D, 1e-5f, s); });
    r["post_attention_layernorm"] = r["input_layernorm"];
    r["attn_pre_proj"] = op_stats(s, [&] { g.matmul(x.as<float>(), T, D, wqkv, y.as<float>(), qkv); });
    r["attn_rope"] = op_stats(s, [&] {
      rope(y.as<float>(), T, qkv, int(Qh + KVh), int(hd), pos.as<int32_t>(), dinv.as<float>(), false, s);
    });
    r["attn_post_proj"] = op_stats(s, [&] { g.matmul(y.as<float>(), T, Qh * hd, wo, x.as<float>(), D); });
    r["mlp_up_proj"] = op_stats(s, [&] { g.matmul(x.as<float>(), T, D, wup, y.as<float>(), up); });
    r["mlp_act"] = op_stats(s, [&] { swiglu(y.as<float>(), y.as<float>(), y.as<float>() + T * F, T * F, s); });
    r["mlp_down_proj"] = op_stats(s, [&] { g.matmul(y.as<float>(), T, F, wdown, x.as<float>(), D); });
    r["add"] = op_stats(s, [&] { add_inplace(x.as<float>(), y.as<float>(), T * D, s); });
    for (const char* op : ops) {
      const Stats& st = r[op];
      out << st.min << "," << st.max << "," << st.mean << "," << st.median << "," << st.std << ",";
    }
    out << c.n_head << "," << c.n_kv_head << "," << D << "," << c.n_expanded << "," << c.vocab << ","
        << (c.gated ? "True" : "False") << "," << T << "," << tp << "\n";
    ++done;
  }
  std::printf("  %-36s %4d rows -> %s\n", c.name.c_str(), done, path.c_str());
}

// Every mlp_*.csv of the a100 folder ($LOOM_GPU_CSV_FROM, else ../shared's) measured on this GPU
// into $LOOM_GPU_CSV_DIR (default .), same names, same columns; $LOOM_GPU_CSV_TOKENS=k keeps k
// token counts per file (default 24; 0 = all). Without the folder: the llama-3.1-8b shape on a
// default grid.
void write_op_csvs(cudaStream_t s, Gemm& g) {
  std::string from;
  if (const char* e = std::getenv("LOOM_GPU_CSV_FROM")) from = e;
  else if (const char* sh = std::getenv("LOOM_SHARED")) from = std::string(sh) + "/data/gpu-measurements/a100";
  else from = std::string(LOOM_SHARED_DIR_BENCH) + "/data/gpu-measurements/a100";
  const char* dir_env = std::getenv("LOOM_GPU_CSV_DIR");
  const std::string dir = dir_env && *dir_env ? dir_env : ".";
  const char* keep_env = std::getenv("LOOM_GPU_CSV_TOKENS");
  const int keep = keep_env ? std::atoi(keep_env) : 24;
  std::vector<CsvShape> shapes;
  if (std::filesystem::is_directory(from)) {
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(from)) {
      const std::string n = e.path().filename().string();
      if (n.rfind("mlp_", 0) == 0 && e.path().extension() == ".csv") files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      CsvShape sh;
      sh.name = std::filesystem::path(f).filename().string();
      if (read_shape(f, sh)) shapes.push_back(std::move(sh));
    }
  }
  if (shapes.empty()) {
    const ModelConfig c = synth_shape("llama-3.1-8b").config;
    CsvShape sh;
    sh.name = "mlp_Meta-Llama-3-8B.csv";
    sh.n_head = c.n_heads, sh.n_kv_head = c.n_kv_heads, sh.n_embd = c.d_model, sh.n_expanded = c.ffn_dim;
    sh.vocab = c.vocab_size;
    for (int tp : {1, 2, 4, 8})
      for (int t : {1, 8, 32, 128, 512, 2048, 8192}) sh.grid.push_back({t, tp});
    std::sort(sh.grid.begin(), sh.grid.end());
    shapes.push_back(std::move(sh));
  }
  std::filesystem::create_directories(dir);
  std::printf("per-operator CSVs (shapes and grids of %s, %d token counts each):\n", from.c_str(), keep);
  for (auto& sh : shapes) {
    thin_grid(sh, keep);
    // Sorted by TP first so one shard's weights serve every token count.
    std::sort(sh.grid.begin(), sh.grid.end(), [](auto a, auto b) { return std::pair(a.second, a.first) < std::pair(b.second, b.first); });
    write_op_csv(sh, dir + "/" + sh.name, s, g);
  }
}

}  // namespace

int main() {
  const std::string why = gpu_skip_reason();
  if (!why.empty()) {
    std::printf("bench_gpu: %s; nothing to measure\n", why.c_str());
    return 0;
  }
  LOOM_CUDA_CHECK(cudaSetDevice(0));
  cudaDeviceProp prop{};
  LOOM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %.1f GiB\n", prop.name, double(prop.totalGlobalMem) / double(1 << 30));
  Stream stream;
  Gemm gemm(stream.get());
  const double bw = copy_bandwidth(stream.get());
  const double peak = gemm_peak(stream.get(), gemm);
  std::printf("measured: D2D copy %.0f GB/s (read+write), bf16 GEMM %.1f TFLOP/s (8192^3)\n", bw / 1e9, peak / 1e12);

  const ModelConfig c = synth_shape("llama-3.1-8b").config;
  ThreadPool host(default_thread_count());
  std::shared_ptr<Model> model;
  const double t0 = wall_s([&] { model = random_model(c, DType::BF16, 1, &host); });
  CudaDevice dev;
  const PlanSet set = PlanSet::make({Plan::make_tp(1)}, ModelShape::from(c, weight_block_elems(*model)));
  SingleCommunicator single;
  RankEngineOptions o;
  o.device = &dev;
  const int ctx = 512, max_batch = 64, steps = 20;
  o.kv_pages = int64_t(max_batch) * ((ctx + steps + 16) / 16 + 1) * c.n_layers * c.n_kv_heads;
  std::unique_ptr<RankEngine> engine;
  const double t_up = wall_s([&] { engine = std::make_unique<RankEngine>(model, set, single, &host, o); });
  std::printf("llama-3.1-8b bf16 (random weights): %.2f GB of matrices, built in %.1f s, engine up in %.1f s; %s\n",
              decode_bytes(*model, 0, 0) / 1e9, t0, t_up, dev.name().c_str());

  const double t1 = decode_step_s(*engine, 1, ctx, steps);
  const double b1 = decode_bytes(*model, 1, ctx);
  std::printf("decode batch 1, context %d: %.2f ms/token; %.0f GB/s of weights + KV -> %.0f%% of the copy bandwidth "
              "(target >= 80%%)\n",
              ctx, t1 * 1e3, b1 / t1 / 1e9, 100.0 * b1 / t1 / bw);
  std::printf("BENCH decode_b1_frac_bw %.4f\n", b1 / t1 / bw);
  std::printf("BENCH decode_b1_ms %.4f\n", t1 * 1e3);
  {
    const int T = 2048;
    ForwardBatch fb;
    std::vector<float> logits;
    fb.tokens.assign(std::size_t(T), 5);
    fb.seqs = {ForwardSeq{1, 0, T, true}};
    engine->forward(fb, &logits);  // warm-up
    engine->release({1});
    const double s = wall_s([&] { engine->forward(fb, &logits); });
    engine->release({1});
    double params = 0;  // the layers' matrices (the classifier runs on the one sampled row)
    for (const LayerWeights& L : model->layers)
      for (const WeightView* v : L.matrices()) params += double(v->rows) * double(v->cols);
    const double attn = 2.0 * 2.0 * double(c.n_layers) * double(c.q_dim()) * double(T) * double(T) / 2.0;
    const double flops = 2.0 * params * T + attn;
    std::printf("prefill %d tokens: %.1f ms, %.1f TFLOP/s -> %.0f%% of measured GEMM peak (target >= 60%%)\n", T,
                s * 1e3, flops / s / 1e12, 100.0 * flops / s / peak);
    std::printf("BENCH prefill_frac_peak %.4f\n", flops / s / peak);
  }
  std::printf("batched decode (context %d): batch  tokens/s  x batch-1  GB/s  x copy bandwidth\n", ctx);
  for (int b : {1, 2, 4, 8, 16, 32, 64}) {
    const double t = decode_step_s(*engine, b, ctx, 10);
    const double bytes = decode_bytes(*model, b, ctx);
    std::printf("  %5d  %9.0f  %6.2f  %6.0f  %5.2f\n", b, double(b) / t, (double(b) / t) / (1.0 / t1), bytes / t / 1e9,
                bytes / t / bw);
    if (b == 64) std::printf("BENCH decode_b64_frac_bw %.4f\n", bytes / t / bw);
  }
  engine.reset();
  model.reset();
  std::printf("switches on one GPU, two rank threads (llama-3.2-1b bf16, 16 sequences x 1024 tokens of KV):\n");
  switch_times(5);
  write_op_csvs(stream.get(), gemm);
  return 0;
}
