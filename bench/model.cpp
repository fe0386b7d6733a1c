// Model benchmark (single rank): decode and prefill tokens/s of a synthetic llama-3.2-1b
// (model/synth.h shape, tied 128256 x 2048 classifier) in f32, bf16 and q8_0 at 1 and 2 threads,
// each next to this machine's roofline measured in the same run (kernels/roofline.h; memcpy
// bandwidth sampled before and after every decode measurement, the highest sample used):
//
//   decode  roofline time per token = weight bytes streamed per token / memcpy bandwidth
//           (every layer matrix + the classifier; one embedding row and the KV reads of a short
//           context are negligible and left out); fraction = roofline time / measured time.
//   prefill roofline time = FLOPs / peak FMA FLOP/s, FLOPs = 2 * layer params * T
//           + 2 * vocab * d (logits of the last token only, as the engine computes them)
//           + causal attention 2 * 2 * n_layers * n_heads * head_dim * T(T+1)/2.
//
// Each row also times decode with the layer matrices as plain memory-mapped rows (the classifier
// stays in the decode layout), to show what the row-tile layout (core/weight_tiles.h) gains.
//
// Then a per-kernel profile of one decode token at every thread count (--no-profile skips it):
// every matrix kind timed alone over all layers, from a cold cache (as in decode, where the rest
// of the model streams between two uses of a matrix), as time per token and as a fraction of
// memcpy bandwidth, with the remainder (attention, norms, RoPE, argmax) as "other", and the
// cost of one empty ThreadPool::run (paid by every pooled kernel call).
//
//   bench_model [--dtypes f32,bf16,q8_0] [--threads 1,2] [--decode-tokens N] [--prefill-tokens T]
//               [--no-profile]
//
// Models are written once to $LOOM_BENCH_DIR (default /tmp/loom-bench) and reused.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/shard_weights.h"
#include "engine/rank_engine.h"
#include "kernels/kernels.h"
#include "kernels/roofline.h"
#include "model/loader.h"
#include "model/synth.h"

#include "bench_util.h"

using namespace loom;
using bench::bench_dir;
using bench::ensure_model;
using bench::print_load;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t c = s.find(',', pos);
    if (c == std::string::npos) c = s.size();
    if (c > pos) out.push_back(s.substr(pos, c - pos));
    pos = c + 1;
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

struct MatrixKind {
  const char* name;
  std::vector<WeightView> views;  // one per layer (or the classifier alone)
  int64_t bytes() const {
    int64_t b = 0;
    for (const auto& v : views) b += v.bytes();
    return b;
  }
  int64_t params() const {
    int64_t p = 0;
    for (const auto& v : views) p += v.rows * v.cols;
    return p;
  }
};

// The matrices one decode token streams, as the engine holds them: the shard copy in the decode
// layout (row tiles; plain views with LOOM_WEIGHT_TILES=0) and the classifier's decode copy.
std::vector<MatrixKind> matrix_kinds(const Model& m, const std::vector<ShardLayerWeights>& layers) {
  std::vector<MatrixKind> k = {{"attn_q", {}},   {"attn_k", {}}, {"attn_v", {}},   {"attn_out", {}},
                               {"ffn_gate", {}}, {"ffn_up", {}}, {"ffn_down", {}}, {"output", {m.decode_output()}}};
  for (const ShardLayerWeights& l : layers) {
    k[0].views.push_back(l.wq), k[1].views.push_back(l.wk), k[2].views.push_back(l.wv);
    k[3].views.push_back(l.wo), k[4].views.push_back(l.w_gate), k[5].views.push_back(l.w_up);
    k[6].views.push_back(l.w_down);
  }
  return k;
}

ForwardBatch one_seq(const std::vector<int32_t>& tokens, int64_t start) {
  ForwardBatch b;
  b.tokens = tokens;
  b.seqs.push_back(ForwardSeq{0, start, int(tokens.size()), true});
  return b;
}

WeightShards full_shards(const Model& m) {
  return weight_shards(Plan::make_tp(1), ModelShape::from(m.config, weight_block_elems(m)), 0);
}

// Seconds per decode token after a 16-token prompt and 2 warm-up tokens: the fastest of
// n_tokens (the machine is shared: other processes only ever add time), and the median.
struct DecodeTime {
  double best = 0, median = 0;
};
DecodeTime time_decode(SingleRankModel& tf, int n_tokens) {
  const ModelConfig& c = tf.config();
  const int prompt_len = 16, warm = 2;
  tf.engine().release({0});
  std::vector<int32_t> prompt(prompt_len);
  for (int i = 0; i < prompt_len; ++i) prompt[size_t(i)] = (i * 7919 + 13) % c.vocab_size;
  std::vector<float> logits;
  tf.forward(one_seq(prompt, 0), logits);
  int32_t next = kernels::argmax(logits.data(), c.vocab_size);
  int64_t pos = prompt_len;
  std::vector<double> per_token;
  for (int i = 0; i < warm + n_tokens; ++i) {
    const double t0 = now_seconds();
    tf.forward(one_seq({next}, pos), logits);
    next = kernels::argmax(logits.data(), c.vocab_size);
    const double dt = now_seconds() - t0;
    ++pos;
    if (i >= warm) per_token.push_back(dt);
  }
  return {*std::min_element(per_token.begin(), per_token.end()), median(per_token)};
}

// Best-of-`reps` seconds for one forward pass over a prompt of `n_tokens` (one chunk).
double time_prefill(SingleRankModel& tf, int n_tokens, int reps) {
  const ModelConfig& c = tf.config();
  std::vector<int32_t> prompt(static_cast<size_t>(n_tokens));
  for (int i = 0; i < n_tokens; ++i) prompt[size_t(i)] = (i * 7919 + 13) % c.vocab_size;
  std::vector<float> logits;
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    tf.engine().release({0});
    const double t0 = now_seconds();
    tf.forward(one_seq(prompt, 0), logits);
    best = std::min(best, now_seconds() - t0);
  }
  return best;
}

// Reads `buf` once (sum of every 64th byte) so what was cached before is evicted.
uint64_t evict(const std::vector<uint8_t>& buf) {
  uint64_t s = 0;
  for (size_t i = 0; i < buf.size(); i += 64) s += buf[i];
  return s;
}

// Fastest of `reps` timings of one gemv over every view of the kind (all layers in turn), each pass
// starting from a cache emptied by reading `flush` (in decode, the rest of the model streams
// between two uses of a matrix, so nothing of it is cached).
double time_kind(const MatrixKind& k, ThreadPool* pool, int reps, const std::vector<uint8_t>& flush) {
  int64_t cols = 0, rows = 0;
  for (const auto& v : k.views) cols = std::max(cols, v.cols), rows = std::max(rows, v.rows);
  std::vector<float> x(static_cast<size_t>(cols), 0.01f), y(static_cast<size_t>(rows));
  std::vector<double> t;
  static volatile uint64_t sink = 0;
  for (int r = 0; r < reps; ++r) {
    sink = sink + evict(flush);
    const double t0 = now_seconds();
    for (const auto& v : k.views) kernels::matmul(x.data(), 1, cols, v, y.data(), rows, pool);
    t.push_back(now_seconds() - t0);
  }
  return median(t);
}

// Mean seconds of one ThreadPool::run of an empty job: the fixed cost every pooled kernel call
// pays (wake the workers, wait for all of them to finish).
double time_dispatch(ThreadPool* pool) {
  const int n = 2000;
  const double t0 = now_seconds();
  for (int i = 0; i < n; ++i) pool->run([](int, int) {});
  return (now_seconds() - t0) / n;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> dtypes = {"f32", "bf16", "q8_0"};
  std::vector<int> threads = {1, 2};
  int decode_tokens = 10, prefill_tokens = 128;
  bool profile = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--dtypes") dtypes = split(next());
    else if (a == "--threads") {
      threads.clear();
      for (auto& s : split(next())) threads.push_back(std::atoi(s.c_str()));
    } else if (a == "--decode-tokens") decode_tokens = std::atoi(next().c_str());
    else if (a == "--prefill-tokens") prefill_tokens = std::atoi(next().c_str());
    else if (a == "--no-profile") profile = false;
    else {
      std::fprintf(stderr, "usage: bench_model [--dtypes f32,bf16,q8_0] [--threads 1,2] [--decode-tokens N] "
                           "[--prefill-tokens T] [--no-profile]\n");
      return 2;
    }
  }
  try {
    print_load("start");
    std::printf("kernel path %s, LLC %.0f MiB, models in %s\n", kernels::kernel_path(),
                double(kernels::last_level_cache_bytes()) / (1 << 20), bench_dir().c_str());
    // Memory-copy bandwidth varies run to run on this (virtual) machine (38-45 GB/s at 2 threads
    // in one hour), so it is sampled before and after every decode measurement and each row is
    // divided by the highest value seen in the whole run: the conservative roofline.
    const int max_threads = *std::max_element(threads.begin(), threads.end());
    kernels::Roofline roof(max_threads);
    std::vector<double> bw(threads.size(), 0.0), bw_low(threads.size(), 1e30), peak;
    auto sample_bw = [&](size_t ti) {
      const double b = roof.memcpy_bandwidth(threads[ti], 3);
      bw[ti] = std::max(bw[ti], b);
      bw_low[ti] = std::min(bw_low[ti], b);
    };
    for (size_t ti = 0; ti < threads.size(); ++ti) {
      sample_bw(ti);
      peak.push_back(roof.peak_flops(threads[ti], 3));
    }
    if (threads.size() > 1 && threads.back() > threads.front()) {
      const double ratio = peak.back() / peak.front();
      std::printf("%dT/%dT peak FLOP/s: %.2f%s\n", threads.back(), threads.front(), ratio,
                  ratio < 0.75 * threads.back() / threads.front()
                      ? "  (cores busy with other work: multi-thread rows are pessimistic)"
                      : "");
    }
    struct Row {
      std::string dtype;
      size_t ti;
      double token_s, median_s, weight_bytes, prefill_s, flops;
      double plain_token_s;  // decode with the layer weights as plain mapped rows (same run)
    };
    std::vector<Row> rows;
    struct Profile {
      std::string dtype;
      size_t ti;
      double token_s;
      std::vector<std::pair<MatrixKind, double>> kinds;
      double dispatch_us = 0;
    };
    std::vector<Profile> profiles;
    std::vector<std::string> notes;
    for (const std::string& dname : dtypes) {
      const DType dt = parse_dtype(dname);
      const std::string path = ensure_model("llama-3.2-1b", dt);
      std::shared_ptr<const Model> model = load_model(path);
      const ModelConfig& c = model->config;
      const auto kinds = matrix_kinds(*model, shard_views(*model, full_shards(*model)));
      int64_t weight_bytes = 0, layer_params = 0;
      for (const auto& k : kinds) {
        weight_bytes += k.bytes();
        if (std::strcmp(k.name, "output") != 0) layer_params += k.params();
      }
      const double T = prefill_tokens;
      const double flops = 2.0 * double(layer_params) * T + 2.0 * double(c.vocab_size) * c.d_model +
                           4.0 * c.n_layers * c.n_heads * c.head_dim * T * (T + 1) / 2;
      for (size_t ti = 0; ti < threads.size(); ++ti) {
        std::printf("measuring %s at %d thread(s)\n", dname.c_str(), threads[ti]);
        std::fflush(stdout);
        ThreadPool pool(threads[ti]);
        const int64_t kv_tokens = std::max<int64_t>(prefill_tokens, 16 + 2 + decode_tokens + 1);
        SingleRankModel tf(model, &pool, kv_tokens);
        sample_bw(ti);
        const DecodeTime dec = time_decode(tf, decode_tokens);
        sample_bw(ti);
        const double pf_s = time_prefill(tf, prefill_tokens, 2);
        double plain_s = 0;
        {  // the same decode on the memory-mapped rows: what the row-tile layout gains
          SingleRankModel plain(model, &pool, kv_tokens, kDefaultKvBlockSize, Plan::parse("tp=1,weights=full"));
          plain_s = time_decode(plain, decode_tokens).best;
        }
        sample_bw(ti);
        rows.push_back({dname, ti, dec.best, dec.median, double(weight_bytes), pf_s, flops, plain_s});
        if (profile) {
          Profile p{dname, ti, dec.best, {}};
          p.dispatch_us = time_dispatch(&pool) * 1e6;
          // 2x the last-level cache, at least 512 MiB: reading it evicts everything cached.
          const size_t llc = kernels::last_level_cache_bytes();
          std::vector<uint8_t> flush(std::max<size_t>(2 * llc, size_t(512) << 20), 1);
          const ShardWeightSet decode_weights = decode_shard(shard_views(*model, full_shards(*model)));
          for (const auto& k : matrix_kinds(*model, decode_weights.layers))
            p.kinds.emplace_back(k, time_kind(k, &pool, 5, flush));
          profiles.push_back(std::move(p));
        }
      }
      notes.push_back(cat("  ", dname, ": weight bytes per token ", double(weight_bytes) / 1e9, " GB, layer params ",
                          double(layer_params) / 1e9, " G, prefill ", flops / 1e9, " GFLOP"));
    }
    std::printf("\n");
    for (size_t ti = 0; ti < threads.size(); ++ti)
      std::printf("roofline %d thread(s): memcpy %.2f GB/s (highest of %d samples; lowest %.2f), peak %.1f GFLOP/s\n",
                  threads[ti], bw[ti] / 1e9, 1 + 3 * int(dtypes.size()), bw_low[ti] / 1e9, peak[ti] / 1e9);
    std::printf("decode: best of %d tokens (median alongside); prefill: best of 2 passes of %d tokens\n",
                decode_tokens, prefill_tokens);
    std::printf("%-6s %3s | %10s %9s %9s %6s %7s | %10s %9s %9s %6s | %s\n", "dtype", "thr", "decode t/s", "ms/tok",
                "roof ms", "frac", "med ms", "prefill t/s", "s", "roof s", "frac", "plain rows: ms/tok frac");
    for (const Row& r : rows) {
      const double roof_tok = r.weight_bytes / bw[r.ti], roof_pf = r.flops / peak[r.ti];
      std::printf("%-6s %3d | %10.2f %9.1f %9.1f %5.0f%% %7.1f | %11.1f %9.3f %9.3f %5.0f%% | %9.1f %5.0f%%\n",
                  r.dtype.c_str(), threads[r.ti], 1.0 / r.token_s, r.token_s * 1e3, roof_tok * 1e3,
                  100.0 * roof_tok / r.token_s, r.median_s * 1e3, double(prefill_tokens) / r.prefill_s, r.prefill_s,
                  roof_pf, 100.0 * roof_pf / r.prefill_s, r.plain_token_s * 1e3, 100.0 * roof_tok / r.plain_token_s);
    }
    for (const std::string& n : notes) std::printf("%s\n", n.c_str());
    for (const Profile& p : profiles) {
      const double pbw = bw[p.ti];
      std::printf("\nper-kernel decode profile: %s, %d thread(s), memcpy %.2f GB/s, measured %.1f ms/token\n",
                  p.dtype.c_str(), threads[p.ti], pbw / 1e9, p.token_s * 1e3);
      std::printf("  %-9s %9s %9s %9s %7s %6s\n", "kernel", "MB/tok", "ms/tok", "roof ms", "GB/s", "frac");
      double sum = 0;
      for (const auto& [k, s] : p.kinds) {
        const double mb = double(k.bytes());
        sum += s;
        std::printf("  %-9s %9.1f %9.2f %9.2f %7.2f %5.0f%%\n", k.name, mb / 1e6, s * 1e3, mb / pbw * 1e3,
                    mb / s / 1e9, 100.0 * (mb / pbw) / s);
      }
      std::printf("  %-9s %9s %9.2f   (%.0f%% of the token)\n", "gemv sum", "", sum * 1e3, 100.0 * sum / p.token_s);
      std::printf("  %-9s %9s %9.2f   (attention, norms, RoPE, argmax, dispatch)\n", "other", "",
                  (p.token_s - sum) * 1e3);
      std::printf("  pool dispatch: %.1f us per empty run() (a decode token makes ~%d: 8 per layer + classifier)\n",
                  p.dispatch_us, 8 * 16 + 1);
    }
    print_load("end");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
