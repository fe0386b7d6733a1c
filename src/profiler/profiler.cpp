// The profiler behind `loom profile` (profiler.h says what it measures and writes).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <barrier>
#include <functional>
#include <mutex>
#include <map>
#include <numeric>
#include <memory>
#include <sstream>
#include <thread>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "profiler/profiler.h"

#include "comm/world.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/parse_number.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "core/weight_tiles.h"
#include "engine/metrics.h"
#include "engine/scheduler.h"
#include "kernels/kernels.h"
#include "kernels/roofline.h"
#include "kv/kv_store.h"
#include "model/synth.h"
#include "parallel/plan.h"
#include "sim/hardware.h"
#include "sim/model_catalog.h"

namespace loom::profiler {

namespace {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// A comma list of integers in [lo, hi] (lists in one string: the CLI's numeric ranges do not
// check them).
std::vector<int> int_list(const std::string& flag, const std::string& s, int lo, int hi) {
  std::vector<int> out;
  for (const auto& x : split_list(s)) out.push_back(int(parse_int(x, cat(flag, " entry"), lo, hi)));
  if (out.empty()) fail(flag, " is empty");
  if (out.size() > 4096) fail(flag, " lists ", out.size(), " values; at most 4096");
  return out;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// --clock cpu: the layer operators and attention timed with the rank thread's CPU clock (what the
// operator costs a core of its own, whatever else the machine runs; a rank of one thread computes
// on its own thread), for a profile on a shared machine. Collectives and the step overhead keep
// the steady clock (a collective's time is mostly waiting).
bool g_cpu_clock = false;
double op_now_s() {
  if (!g_cpu_clock) return now_s();
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

std::string ms(double s) {
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", s * 1e3);
  return b;
}

// A CSV written row by row, with a header of `cols`.
class CsvOut {
 public:
  CsvOut(const std::string& path, std::vector<std::string> cols) : path_(path), f_(path), cols_(std::move(cols)) {
    if (!f_) fail("cannot write ", path);
    for (size_t i = 0; i < cols_.size(); ++i) f_ << (i ? "," : "") << cols_[i];
    f_ << "\n";
  }
  void row(const std::map<std::string, std::string>& v) {
    for (size_t i = 0; i < cols_.size(); ++i) {
      auto it = v.find(cols_[i]);
      f_ << (i ? "," : "") << (it == v.end() ? "" : it->second);
    }
    f_ << "\n";
    if (!f_) fail("cannot write ", path_);
  }

 private:
  std::string path_;
  std::ofstream f_;
  std::vector<std::string> cols_;
};

// A weight matrix [rows, cols] of random values in `dtype`, in the engines' decode layout when it
// can be tiled (as engine/shard_weights.h copies shards), else plain rows.
struct Matrix {
  AlignedBuffer<uint8_t> plain, tiled;
  WeightView view;
};

std::unique_ptr<Matrix> random_matrix(int64_t rows, int64_t cols, DType dtype, Rng& rng, ThreadPool* pool) {
  auto m = std::make_unique<Matrix>();
  const int64_t row_bytes = dtype_row_bytes(dtype, cols);
  m->plain.resize(size_t(rows * row_bytes));
  std::vector<float> row(static_cast<size_t>(cols));
  const float a = std::sqrt(3.0f / float(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& x : row) x = (2 * rng.uniform() - 1) * a;
    quantize_row(dtype, row.data(), m->plain.data() + r * row_bytes, cols);
  }
  m->view = WeightView{m->plain.data(), dtype, rows, cols, row_bytes};
  if (weight_tiles_enabled() && can_tile(m->view)) {
    m->tiled.resize(size_t(tiled_bytes(m->view)));
    m->view = tile_weights(m->view, m->tiled.data(), pool);
  }
  return m;
}

std::vector<float> random_floats(size_t n, Rng& rng) {
  std::vector<float> v(n);
  for (auto& x : v) x = 2 * rng.uniform() - 1;
  return v;
}

struct Shape {
  std::string name;  // for file names
  ModelConfig config;
};

std::string file_safe(std::string s) {
  for (auto& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') c = '-';
  return s;
}

// ---- ranks measured together ----

// Runs `body(rank, pool)` on `ranks` threads at once (each rank with its own pool of
// threads_per_rank threads, as the engine's ranks), so that operators are timed while every rank
// of a plan computes: the ranks share the machine's cores, caches and memory bandwidth. Inside,
// Sync::time(fn) times fn on every rank from a common start and keeps, per call, the slowest
// rank's time (a step waits for its slowest rank); medians over reps come from Sync::median.
class ConcurrentRanks {
 public:
  ConcurrentRanks(int ranks, int threads_per_rank) : ranks_(ranks), threads_(threads_per_rank), sync_(ranks) {}

  // Times fn (after one warm-up) `reps` times on every rank; returns the median over reps of the
  // slowest rank's time, divided by `per` (operations per call). Every rank must call it.
  double time(int rank, int reps, int per, const std::function<void()>& fn) {
    sync_.arrive_and_wait();
    fn();
    std::vector<double> t(static_cast<size_t>(reps));
    for (int i = 0; i < reps; ++i) {
      sync_.arrive_and_wait();
      const double t0 = op_now_s();
      fn();
      t[size_t(i)] = (op_now_s() - t0) / per;
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (slowest_.size() < size_t(reps)) slowest_.assign(size_t(reps), 0.0);
      for (int i = 0; i < reps; ++i) slowest_[size_t(i)] = std::max(slowest_[size_t(i)], t[size_t(i)]);
    }
    sync_.arrive_and_wait();
    const double med = percentile(slowest_, 50);
    sync_.arrive_and_wait();
    if (rank == 0) slowest_.clear();
    sync_.arrive_and_wait();
    return med;
  }

  // Times several operators run in one pass (`fn(acc)` adds each operator's seconds of the pass
  // into acc[op], which starts at zero), after one warm-up pass, `reps` times on every rank;
  // returns per operator the median over reps of the slowest rank's time, divided by `per`. The
  // last `fastest_slots` slots keep the fastest rank's (the smallest) value instead, and their
  // mean over reps (a rare stall of one rank is part of what they measure, which a median drops).
  // Every rank must call it.
  std::vector<double> time_each(int rank, int reps, int per, int n_ops,
                                const std::function<void(std::vector<double>&)>& fn, int fastest_slots = 0) {
    std::vector<double> acc(size_t(n_ops), 0.0);
    sync_.arrive_and_wait();
    fn(acc);
    std::vector<std::vector<double>> t(static_cast<size_t>(reps));
    for (int i = 0; i < reps; ++i) {
      sync_.arrive_and_wait();
      acc.assign(size_t(n_ops), 0.0);
      fn(acc);
      t[size_t(i)] = acc;
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      const bool first = slowest_each_.size() < size_t(reps);
      if (first) slowest_each_.assign(size_t(reps), std::vector<double>(size_t(n_ops), 0.0));
      for (int i = 0; i < reps; ++i)
        for (int o = 0; o < n_ops; ++o) {
          double& kept = slowest_each_[size_t(i)][size_t(o)];
          const double x = t[size_t(i)][size_t(o)] / per;
          kept = o < n_ops - fastest_slots ? std::max(kept, x) : first ? x : std::min(kept, x);
        }
    }
    sync_.arrive_and_wait();
    std::vector<double> med(static_cast<size_t>(n_ops));
    for (int o = 0; o < n_ops; ++o) {
      std::vector<double> v;
      for (int i = 0; i < reps; ++i) v.push_back(slowest_each_[size_t(i)][size_t(o)]);
      med[size_t(o)] = o < n_ops - fastest_slots ? percentile(v, 50) : std::accumulate(v.begin(), v.end(), 0.0) / reps;
    }
    sync_.arrive_and_wait();
    if (rank == 0) slowest_each_.clear();
    sync_.arrive_and_wait();
    return med;
  }

  // The TP layer's sync point (engine/rank_forward.cpp: the all-reduce after W_O and after W_down):
  // every rank waits here for the slowest, spinning (as the local backend's collectives first
  // do), and gets back the seconds it waited. A TP step lasts, segment by segment, as long as its
  // slowest rank (an unlucky core, an interrupt), which the slowest rank's total over a whole pass
  // understates: per segment the maxima add up, not the totals. Wall clock only.
  double segment_sync() {
    const double t0 = now_s();
    const uint64_t gen = seg_gen_.load(std::memory_order_acquire);
    if (seg_arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == ranks_) {
      seg_arrived_.store(0, std::memory_order_relaxed);
      seg_gen_.store(gen + 1, std::memory_order_release);
    } else {
      for (int i = 0; seg_gen_.load(std::memory_order_acquire) == gen; ++i)
        if (i > 64) std::this_thread::yield();
    }
    return now_s() - t0;
  }
  int ranks() const { return ranks_; }

  void run(const std::function<void(int rank, ThreadPool* pool)>& body) {
    std::vector<std::thread> th;
    for (int r = 0; r < ranks_; ++r)
      th.emplace_back([&, r] {
        try {
          // As the engine's local ranks run (engine/dist_engine.cpp): each on cores of its own.
          if (ranks_ > 1) bind_to_own_cores(r, ranks_, threads_);
          ThreadPool pool(threads_);
          body(r, &pool);
        } catch (const std::exception& e) {
          // The other ranks would wait at the barrier forever: end the process with the cause.
          std::fprintf(stderr, "loom profile: rank %d failed: %s\n", r, e.what());
          std::abort();
        }
      });
    for (auto& t : th) t.join();
  }

 private:
  int ranks_, threads_;
  std::barrier<> sync_;
  std::atomic<int> seg_arrived_{0};
  std::atomic<uint64_t> seg_gen_{0};
  std::mutex mu_;
  std::vector<double> slowest_;
  std::vector<std::vector<double>> slowest_each_;
};

// ---- layer operators ----

// One layer's shard of the seven matrices.
struct LayerShard {
  std::unique_ptr<Matrix> wq, wk, wv, wo, wg, wu, wd;
  int64_t bytes() const {
    int64_t b = 0;
    for (const auto* m : {&wq, &wk, &wv, &wo, &wg, &wu, &wd}) b += (*m)->view.bytes();
    return b;
  }
};

// Copies of a layer's shard a rank cycles through: one per model layer, as a step reads every
// layer's weights once (so the operands come back from where the model's weights live, not from a
// cache that one repeated matrix fits in), up to `budget` bytes for all ranks.
int layer_copies(const ModelConfig& c, int64_t shard_bytes, int ranks, int64_t budget) {
  return int(std::clamp<int64_t>(budget / std::max<int64_t>(1, shard_bytes * ranks), 1, c.n_layers));
}

struct ProfileSetup {
  std::vector<int> tokens, tps;
  int reps = 5, threads = 1;
  int sweeps = 1;  // --sweeps
  bool isolated = false;  // --op-order isolated
  int64_t budget = int64_t(1) << 30;  // bytes of weight copies, all ranks together
  std::string dir;
};

std::string rank_suffix(int ranks) { return ranks > 1 ? cat("_r", ranks) : std::string(); }

void profile_mlp(const Shape& sh, DType dtype, int ranks, const ProfileSetup& ps) {
  const ModelConfig& c = sh.config;
  const int wb = dtype_block_elems(dtype);
  const ModelShape shape = ModelShape::from(c, wb);
  if (c.d_model % wb != 0) {
    std::fprintf(stderr, "[profile] %s: d_model %d is not a multiple of the %s block, skipped\n", sh.name.c_str(),
                 c.d_model, std::string(dtype_name(dtype)).c_str());
    return;
  }
  const std::string path = cat(ps.dir, "/mlp_", sh.name, "_", dtype_name(dtype), rank_suffix(ranks), ".csv");
  static const char* kOps[] = {"emb",        "input_layernorm", "attn_pre_proj", "attn_rope",     "attn_post_proj",
                               "post_attention_layernorm",      "mlp_up_proj",   "mlp_act",       "mlp_down_proj",
                               "add"};
  std::vector<std::string> cols;
  for (const char* op : kOps) cols.push_back(cat("time_stats.", op, ".median"));
  cols.push_back("time_stats.ulysses_wait.median");  // tp=1 rows of concurrent ranks (below)
  for (const char* k : {"n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp",
                        "num_tokens", "num_tensor_parallel_workers", "weight_dtype", "weight_bytes", "act_bytes",
                        "kv_bytes", "kernels", "concurrent_ranks", "working_set_bytes"})
    cols.push_back(k);
  CsvOut csv(path, cols);
  const int64_t d = c.d_model, dh = c.head_dim;
  const int max_m = *std::max_element(ps.tokens.begin(), ps.tokens.end());
  const std::vector<float> norm_w(static_cast<size_t>(d), 1.0f);
  const kernels::RopeParams rope{int(dh), c.rope_theta, true};
  for (int t : ps.tps) {
    if (c.n_heads % t != 0 || (c.n_kv_heads % t != 0 && t % c.n_kv_heads != 0)) continue;
    RankLayout lay;
    try {
      lay = rank_layout(Plan::make_tp(t), shape, 0);
    } catch (const Error& e) {
      std::fprintf(stderr, "[profile] %s %s tp=%d skipped: %s\n", sh.name.c_str(),
                   std::string(dtype_name(dtype)).c_str(), t, e.what());
      continue;
    }
    const int hq = int(lay.proj_q_heads.size()), hk = int(lay.proj_kv_heads.size());
    const int64_t qd = hq * dh, kvd = hk * dh, ffn = lay.ffn.size();
    if (qd % wb != 0 || ffn % wb != 0) continue;
    const int64_t shard_bytes = dtype_row_bytes(dtype, d) * (qd + 2 * kvd + 2 * ffn) + d * (dtype_row_bytes(dtype, qd) +
                                                                                          dtype_row_bytes(dtype, ffn));
    const int copies = layer_copies(c, shard_bytes, ranks, ps.budget);
    // rows[m][op] = median seconds (rank 0 writes)
    // rows[m][op] = the medians of the sweeps (rank 0 writes); the row is their median.
    std::vector<std::map<std::string, std::vector<double>>> rows(ps.tokens.size());
    ConcurrentRanks cr(ranks, ps.threads);
    cr.run([&](int rank, ThreadPool* pool) {
      Rng rng(0x70726f66696c65ull ^ uint64_t(c.d_model) ^ (uint64_t(rank) << 32));
      std::vector<LayerShard> layers(static_cast<size_t>(copies));
      for (auto& L : layers) {
        L.wq = random_matrix(qd, d, dtype, rng, pool), L.wk = random_matrix(kvd, d, dtype, rng, pool);
        L.wv = random_matrix(kvd, d, dtype, rng, pool), L.wo = random_matrix(d, qd, dtype, rng, pool);
        L.wg = random_matrix(ffn, d, dtype, rng, pool), L.wu = random_matrix(ffn, d, dtype, rng, pool);
        L.wd = random_matrix(d, ffn, dtype, rng, pool);
      }
      auto emb = random_matrix(std::min<int64_t>(c.vocab_size, 4096), d, dtype, rng, nullptr);
      std::vector<float> x = random_floats(size_t(max_m * d), rng), xn(size_t(max_m * d)), q(size_t(max_m * qd)),
                         k(size_t(max_m * kvd)), v(size_t(max_m * kvd)), att = random_floats(size_t(max_m * qd), rng),
                         proj(size_t(max_m * d)), gate(size_t(max_m * ffn)), up(size_t(max_m * ffn)),
                         act(size_t(max_m * ffn)), hidden = random_floats(size_t(max_m * ffn), rng);
      std::vector<int32_t> pos(static_cast<size_t>(max_m));
      for (int i = 0; i < max_m; ++i) pos[size_t(i)] = i;
      // --sweeps N: the token counts measured N times over, one after another, so that a point's
      // measurements spread over the whole profile: on a shared machine whose speed drifts
      // within seconds, a slow moment then moves every row a little instead of a few rows a lot
      // (which bends the per-token-count curve the cost model interpolates).
      for (int sweep = 0; sweep < ps.sweeps; ++sweep)
      for (size_t mi = 0; mi < ps.tokens.size(); ++mi) {
        const int m = ps.tokens[mi];
        // Each timed call runs the operator once per layer copy, as a step does.
        auto each = [&](const std::function<void(const LayerShard&)>& op) {
          return [&, op] {
            for (const LayerShard& L : layers) op(L);
          };
        };
        // --op-order engine (the default): one timed pass runs the layer's operators in the
        // engine's order over every layer copy (engine/rank_forward.cpp: norm, Wq/Wk/Wv, RoPE,
        // W_O, add, norm, W_gate/W_up, SwiGLU, W_down, add), each operator's time its own, so that
        // every matmul finds the caches as a step leaves them: the other operators' weights in
        // between, the whole model streamed per step. --op-order isolated times each operator
        // over the layer copies on its own (its matrices alone cycle through the caches: a
        // working set of one operator, which the last-level cache may hold, unlike a step's).
        std::vector<std::pair<const char*, std::function<void(const LayerShard&)>>> seq;
        auto put = [&](const char* name, const std::function<void(const LayerShard&)>& op) {
          if (!ps.isolated && std::string(name) != "emb") {
            seq.emplace_back(name, op);
            return;
          }
          const double sec = cr.time(rank, ps.reps, copies, each(op));
          if (rank == 0) rows[mi][name].push_back(sec);
        };
        put("emb", [&](const LayerShard&) {
          for (int i = 0; i < m; ++i)
            dequantize_row(dtype, emb->plain.data() + (i % emb->view.rows) * dtype_row_bytes(dtype, d), x.data() + i * d,
                           d);
        });
        put("input_layernorm",
            [&](const LayerShard&) { kernels::rmsnorm(xn.data(), x.data(), norm_w.data(), m, d, 1e-5f); });
        put("attn_pre_proj", [&](const LayerShard& L) {
          kernels::matmul(xn.data(), m, d, L.wq->view, q.data(), qd, pool);
          kernels::matmul(xn.data(), m, d, L.wk->view, k.data(), kvd, pool);
          kernels::matmul(xn.data(), m, d, L.wv->view, v.data(), kvd, pool);
        });
        put("attn_rope", [&](const LayerShard&) {
          kernels::rope(q.data(), m, qd, hq, pos.data(), rope);
          kernels::rope(k.data(), m, kvd, hk, pos.data(), rope);
        });
        put("attn_post_proj",
            [&](const LayerShard& L) { kernels::matmul(att.data(), m, qd, L.wo->view, proj.data(), d, pool); });
        put("post_attention_layernorm",
            [&](const LayerShard&) { kernels::rmsnorm(xn.data(), x.data(), norm_w.data(), m, d, 1e-5f); });
        put("mlp_up_proj", [&](const LayerShard& L) {
          kernels::matmul(xn.data(), m, d, L.wg->view, gate.data(), ffn, pool);
          kernels::matmul(xn.data(), m, d, L.wu->view, up.data(), ffn, pool);
        });
        // Out of place and on fresh inputs: repeated in place, SwiGLU would shrink its values into
        // denormals, which no engine step sees and which slow every later FMA by tens of times.
        put("mlp_act", [&](const LayerShard&) { kernels::swiglu(act.data(), gate.data(), up.data(), m * ffn); });
        put("mlp_down_proj",
            [&](const LayerShard& L) { kernels::matmul(hidden.data(), m, ffn, L.wd->view, proj.data(), d, pool); });
        put("add", [&](const LayerShard&) {
          float* xp = x.data();
          const float* pp = proj.data();
          for (int64_t i = 0; i < m * d; ++i) xp[i] += pp[i] * 1e-3f;
        });
        if (!seq.empty()) {
          // The engine's order within a layer; the add after W_O and after W_down.
          static const char* kOrder[] = {"input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "add",
                                         "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add"};
          std::vector<int> order;
          for (const char* name : kOrder)
            for (size_t o = 0; o < seq.size(); ++o)
              if (std::string(seq[o].first) == name) order.push_back(int(o));
          const int n_ops = int(seq.size());
          std::vector<int> runs(size_t(n_ops), 0);  // calls of each operator per layer
          for (int o : order) ++runs[size_t(o)];
          // TP shards computed by concurrent ranks (t > 1) meet at the layer's two all-reduces,
          // after W_O and after W_down (each followed by its residual add): there every rank waits
          // for the slowest, and what it waited is charged to the segment's operators in
          // proportion to their times (the step of a TP plan is the sum of the segments' slowest
          // ranks; the all-reduce itself is priced from the collective measurements). Not under
          // --clock cpu (waiting costs no CPU) nor for tp=1 rows (DP replicas and SP's all-to-all
          // ranks read them; those meet elsewhere).
          const bool tp_sync = t > 1 && cr.ranks() > 1 && !g_cpu_clock;
          std::vector<double> seg(size_t(n_ops), 0.0);
          const std::vector<double> sec = cr.time_each(rank, ps.reps, copies, n_ops, [&](std::vector<double>& acc) {
            for (const LayerShard& L : layers)
              for (int o : order) {
                const double t0 = op_now_s();
                seq[size_t(o)].second(L);
                const double dt = op_now_s() - t0;
                acc[size_t(o)] += dt;
                if (!tp_sync) continue;
                seg[size_t(o)] += dt;
                if (std::string(seq[size_t(o)].first) != "add") continue;
                const double waited = cr.segment_sync();
                double busy = 0;
                for (double x : seg) busy += x;
                for (int q = 0; q < n_ops; ++q)
                  if (busy > 0) acc[size_t(q)] += waited * seg[size_t(q)] / busy;
                seg.assign(size_t(n_ops), 0.0);
              }
          });
          if (rank == 0)
            for (int o = 0; o < n_ops; ++o) rows[mi][seq[size_t(o)].first].push_back(sec[size_t(o)] / runs[size_t(o)]);
          // Ulysses (Shift 3.2.1, Algorithm 1 lines 4 and 6): SP ranks hold whole layers (the tp=1
          // rows) and meet at the all-to-alls around attention, once per layer in this pass (which
          // has no attention: after RoPE). A second pass with that meeting point gives each rank's
          // wait for the other; the fastest rank's total wait is what the meetings add to the
          // slowest rank's total (sum over layers of the slowest rank's time, minus the largest
          // rank total, which the operator columns above price). Column ulysses_wait: seconds
          // per layer; the cost model adds it to SP steps only (DP replicas never meet).
          if (t == 1 && cr.ranks() > 1 && !g_cpu_clock) {
            const std::vector<double> w = cr.time_each(
                rank, ps.reps, copies, 1,
                [&](std::vector<double>& acc) {
                  for (const LayerShard& L : layers)
                    for (int o : order) {
                      seq[size_t(o)].second(L);
                      if (std::string(seq[size_t(o)].first) == "attn_rope") acc[0] += cr.segment_sync();
                    }
                },
                /*fastest_slots=*/1);
            if (rank == 0) rows[mi]["ulysses_wait"].push_back(w[0]);
          }
        }
      }
    });
    for (size_t mi = 0; mi < ps.tokens.size(); ++mi) {
      std::map<std::string, std::string> r;
      for (const auto& [op, secs] : rows[mi])
        r[cat("time_stats.", op, ".median")] =
            ms(op == "ulysses_wait" ? std::accumulate(secs.begin(), secs.end(), 0.0) / double(secs.size())
                                    : percentile(secs, 50));
      r["n_head"] = cat(c.n_heads);
      r["n_kv_head"] = cat(c.n_kv_heads);
      r["n_embd"] = cat(c.d_model);
      r["n_expanded_embd"] = cat(c.ffn_dim);
      r["vocab_size"] = cat(c.vocab_size);
      r["use_gated_mlp"] = "True";
      r["num_tokens"] = cat(ps.tokens[mi]);
      r["num_tensor_parallel_workers"] = cat(t);
      r["weight_dtype"] = std::string(dtype_name(dtype));
      r["weight_bytes"] = cat(double(dtype_row_bytes(dtype, wb)) / wb);
      r["act_bytes"] = "4";
      r["kv_bytes"] = "4";
      r["kernels"] = "loom_cpu";
      r["concurrent_ranks"] = cat(ranks);
      r["working_set_bytes"] = cat(shard_bytes * copies);
      csv.row(r);
    }
  }
  std::fprintf(stderr, "[profile] wrote %s\n", path.c_str());
}

// ---- attention ----

void profile_attention(const Shape& sh, int ranks, bool quick, const ProfileSetup& ps) {
  const ModelConfig& c = sh.config;
  const std::string path = cat(ps.dir, "/attention_", sh.name, rank_suffix(ranks), ".csv");
  CsvOut csv(path, {"time_stats.attn_prefill.median", "time_stats.attn_decode.median", "n_q_head", "n_kv_head", "n_embd",
                    "num_tensor_parallel_workers", "batch_size", "prefill_chunk_size", "kv_cache_size", "is_prefill",
                    "kv_bytes", "act_bytes", "concurrent_ranks"});
  const int dh = c.head_dim, block = kDefaultKvBlockSize;
  const int max_ctx = std::min(c.max_seq_len, quick ? 512 : 2048);
  struct Case {
    int batch, chunk, before;
    bool prefill;
  };
  std::vector<Case> cases;
  for (int b : quick ? std::vector<int>{1, 8} : std::vector<int>{1, 4, 16, 64})
    for (int ctx : {16, 64, 256, 1024, 2048})
      if (ctx < max_ctx) cases.push_back({b, 1, ctx, false});
  for (int chunk : quick ? std::vector<int>{16, 128} : std::vector<int>{16, 64, 256, 1024})
    for (int before : {0, 256})
      if (chunk + before <= max_ctx) cases.push_back({1, chunk, before, true});
  for (int t : ps.tps) {
    if (c.n_heads % t != 0 || (c.n_kv_heads % t != 0 && t % c.n_kv_heads != 0)) continue;
    const int hq = c.n_heads / t, hk = std::max(1, c.n_kv_heads / t);
    std::vector<double> secs(cases.size());
    ConcurrentRanks cr(ranks, ps.threads);
    cr.run([&](int rank, ThreadPool* pool) {
      Rng rng(0x6174746eull ^ (uint64_t(rank) << 32));
      for (size_t ci = 0; ci < cases.size(); ++ci) {
        const Case& cs = cases[ci];
        const int ctx = cs.before + cs.chunk, n_tok = cs.batch * cs.chunk;
        const int blocks_per_seq = (ctx + block - 1) / block;
        // The engine's paged store (kv/kv_store.h): one page per (sequence, layer, KV head,
        // block), for one layer per model layer as the budget allows (a step reads each layer's
        // KV once).
        const int64_t pages_per_layer = int64_t(hk) * blocks_per_seq * cs.batch;
        const int64_t page_bytes = 2 * int64_t(block) * dh * int64_t(sizeof(float));
        const int copies =
            int(std::clamp<int64_t>(ps.budget / std::max<int64_t>(1, pages_per_layer * page_bytes * ranks), 1,
                                    c.n_layers));
        KvStore store(copies, hk, dh, block, pages_per_layer * copies);
        // Pages handed out in a scattered order, as a running engine's are.
        for (int b = blocks_per_seq - 1; b >= 0; --b)
          for (int cp = 0; cp < copies; ++cp)
            for (int s = 0; s < cs.batch; ++s)
              for (int h = 0; h < hk; ++h) {
                const int32_t page = store.ensure_page(s, cp, h, b);
                std::vector<float> fill = random_floats(size_t(block) * dh, rng);
                std::memcpy(store.k(page), fill.data(), fill.size() * sizeof(float));
                std::memcpy(store.v(page), fill.data(), fill.size() * sizeof(float));
              }
        std::vector<float> q = random_floats(size_t(n_tok) * hq * dh, rng),
                           k = random_floats(size_t(n_tok) * hk * dh, rng), v = k, out(size_t(n_tok) * hq * dh);
        std::vector<int32_t> pos(static_cast<size_t>(n_tok));
        for (int s = 0; s < cs.batch; ++s)
          for (int i = 0; i < cs.chunk; ++i) pos[size_t(s * cs.chunk + i)] = cs.before + i;
        const float scale = 1.0f / std::sqrt(float(dh));
        const int64_t ldq = int64_t(hq) * dh, ldkv = int64_t(hk) * dh;
        const int group = hq / hk;
        const double sec = cr.time(rank, ps.reps, copies, [&] {
          for (int cp = 0; cp < copies; ++cp) {
            // engine/stage_attention.cpp: scatter the new K/V rows into their pages, then one
            // kernel call per (sequence, KV head) over its page table.
            for (int s = 0; s < cs.batch; ++s)
              for (int i = 0; i < cs.chunk; ++i) {
                const int64_t tk = s * cs.chunk + i, p = cs.before + i;
                for (int h = 0; h < hk; ++h) {
                  const int32_t page = store.page(s, cp, h, p / block);
                  std::memcpy(store.k(page) + (p % block) * dh, k.data() + tk * ldkv + h * dh, size_t(dh) * sizeof(float));
                  std::memcpy(store.v(page) + (p % block) * dh, v.data() + tk * ldkv + h * dh, size_t(dh) * sizeof(float));
                }
              }
            for (int s = 0; s < cs.batch; ++s)
              for (int h = 0; h < hk; ++h) {
                const std::span<const int32_t> table = store.table(s, cp, h);
                kernels::KvView view;
                view.k = store.k_pages();
                view.v = store.v_pages();
                view.block_table = table.data();
                view.block_size = block;
                view.block_stride = store.page_floats();
                view.head_stride = 0;
                view.pos_stride = dh;
                const int64_t t0 = int64_t(s) * cs.chunk;
                kernels::attention(q.data() + t0 * ldq + int64_t(h) * group * dh, cs.chunk, ldq, pos.data() + t0, view,
                                   0, ctx, kernels::AttentionShape{group, 1, dh, scale},
                                   out.data() + t0 * ldq + int64_t(h) * group * dh, ldq, nullptr, pool);
              }
          }
        });
        if (rank == 0) secs[ci] = sec;
      }
    });
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const Case& cs = cases[ci];
      std::map<std::string, std::string> r = {{"n_q_head", cat(c.n_heads)},
                                              {"n_kv_head", cat(c.n_kv_heads)},
                                              {"n_embd", cat(c.d_model)},
                                              {"num_tensor_parallel_workers", cat(t)},
                                              {"batch_size", cat(cs.batch)},
                                              {"prefill_chunk_size", cat(cs.chunk)},
                                              {"kv_cache_size", cat(cs.before)},
                                              {"is_prefill", cs.prefill ? "True" : "False"},
                                              {"kv_bytes", "4"},
                                              {"act_bytes", "4"},
                                              {"concurrent_ranks", cat(ranks)}};
      r[cs.prefill ? "time_stats.attn_prefill.median" : "time_stats.attn_decode.median"] = ms(secs[ci]);
      csv.row(r);
    }
  }
  std::fprintf(stderr, "[profile] wrote %s\n", path.c_str());
}

// ---- the engine's work per step outside the forward pass ----

void profile_overhead(int vocab, bool quick, int reps, const std::string& dir) {
  const std::string path = dir + "/step_overhead_cpu.csv";
  CsvOut csv(path, {"time_stats.step_overhead.median", "num_seqs", "num_tokens", "vocab_size"});
  Rng rng(0x6f766864ull);
  const std::vector<float> logits = random_floats(static_cast<size_t>(vocab), rng);
  // One step as EngineLoop::step runs it around the executor: schedule, sample every sampled row
  // (greedy: argmax over the vocabulary), apply the tokens, record metrics.
  auto step = [&](Scheduler& sched, Metrics& metrics, double t) {
    StepBatch b = sched.schedule();
    StepResult res;
    for (const ScheduledSeq& s : b.seqs)
      if (s.sample) res.sampled.push_back({s.seq_id, TokenId(kernels::argmax(logits.data(), vocab))});
    StepMetrics sm;
    sm.num_tokens = b.num_tokens;
    metrics.on_step(sm);
    const StepOutcome o = sched.on_step_done(b, res);
    for (const TokenEvent& ev : o.tokens) metrics.on_token(ev.seq_id, t);
    for (const Sequence& s : sched.drain_finished()) metrics.on_finish(s, t);
    return b;
  };
  auto config = [](int seqs, int budget) {
    SchedulerConfig sc;
    sc.max_num_seqs = seqs;
    sc.max_tokens_per_step = budget;
    sc.num_blocks = 1 << 16;
    sc.max_model_len = 1 << 15;
    return sc;
  };
  auto request = [](RequestId id, int prompt, int out) {
    Request r;
    r.id = id;
    r.synthetic_prompt_len = prompt;
    r.max_tokens = out;
    r.stop.ignore_eos = true;
    return r;
  };
  // Decode steps of b sequences (after their one-token prefills).
  for (int b : quick ? std::vector<int>{1, 8, 32} : std::vector<int>{1, 2, 4, 8, 16, 32, 64, 128}) {
    std::vector<double> t;
    for (int rep = 0; rep < reps; ++rep) {
      Scheduler sched(config(b, 8192));
      Metrics metrics;
      for (int i = 0; i < b; ++i) {
        Request r = request(i, 1, 64);
        metrics.on_arrival(r, 0);
        sched.add_request(std::move(r));
      }
      step(sched, metrics, 0);
      const int n = 16;
      const double t0 = now_s();
      for (int i = 0; i < n; ++i) step(sched, metrics, 0);
      t.push_back((now_s() - t0) / n);
    }
    csv.row({{"time_stats.step_overhead.median", ms(percentile(t, 50))},
             {"num_seqs", cat(b)},
             {"num_tokens", cat(b)},
             {"vocab_size", cat(vocab)}});
  }
  // A prefill step of one sequence of n tokens.
  for (int n : quick ? std::vector<int>{64, 512} : std::vector<int>{16, 64, 256, 1024, 4096}) {
    std::vector<double> t;
    for (int rep = 0; rep < std::max(reps, 5); ++rep) {
      Scheduler sched(config(4, 8192));
      Metrics metrics;
      Request r = request(0, n, 4);
      metrics.on_arrival(r, 0);
      sched.add_request(std::move(r));
      const double t0 = now_s();
      step(sched, metrics, 0);
      t.push_back(now_s() - t0);
    }
    csv.row({{"time_stats.step_overhead.median", ms(percentile(t, 50))},
             {"num_seqs", "1"},
             {"num_tokens", cat(n)},
             {"vocab_size", cat(vocab)}});
  }
  std::fprintf(stderr, "[profile] wrote %s\n", path.c_str());
}

// ---- collectives ----

struct CollectiveRow {
  std::string collective;
  int ranks = 0;
  int64_t bytes = 0;
  double seconds = 0;
};

// Times every collective on the group `c` (all its ranks call this); rank 0 appends rows.
void time_collectives(Communicator& c, const std::vector<int64_t>& sizes, int reps, std::vector<CollectiveRow>* rows) {
  const int n = c.size();
  const int64_t biggest = sizes.back();
  std::vector<uint8_t> send(size_t(biggest) * 2 + 64, 1), recv(size_t(biggest) * 2 + 64);
  // SiDP's weight fetch (engine/stage_ffn_owner.cpp): rank 1 reads rank 0's registered buffer
  // with a one-sided get while rank 0 computes on; the time is the reader's.
  constexpr int kGetBuffer = 0x70f11e;
  if (n == 2) c.register_buffer(kGetBuffer, send.data(), c.rank() == 0 ? send.size() : 0);
  auto record = [&](const char* name, int64_t bytes, const std::function<void()>& op) {
    c.barrier();
    op();  // warm-up
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
      c.barrier();
      const double t0 = now_s();
      op();
      t.push_back(now_s() - t0);
    }
    // The slowest rank's time (a collective ends when its last rank does): max over ranks of each
    // rank's median.
    double med = percentile(t, 50);
    std::vector<double> all(static_cast<size_t>(n));
    c.all_gather_bytes(&med, all.data(), sizeof med);
    if (c.rank() == 0) rows->push_back({name, n, bytes, *std::max_element(all.begin(), all.end())});
  };
  for (int64_t bytes : sizes) {
    const int64_t floats = std::max<int64_t>(1, bytes / 4);
    record("all_reduce", floats * 4, [&] { c.all_reduce_sum(reinterpret_cast<float*>(send.data()), size_t(floats)); });
    const int64_t per = std::max<int64_t>(1, bytes / n);
    record("all_gather", per * n, [&] { c.all_gather_bytes(send.data(), recv.data(), size_t(per)); });
    record("all_to_all", per * n, [&] { c.all_to_all_bytes(send.data(), recv.data(), size_t(per)); });
    record("broadcast", bytes, [&] { c.broadcast(send.data(), size_t(bytes), 0); });
    if (n == 2)
      record("send_recv", bytes, [&] {
        if (c.rank() == 0) c.send(1, 7, send.data(), size_t(bytes));
        else c.recv(0, 7, recv.data(), size_t(bytes));
      });
    if (n == 2)
      record("get", bytes, [&] {
        if (c.rank() == 1) c.get(0, kGetBuffer, 0, recv.data(), size_t(bytes));
      });
  }
  if (n == 2) {
    c.barrier();
    c.deregister_buffer(kGetBuffer);
  }
}

void write_collectives(const std::vector<CollectiveRow>& rows, const std::string& backend, const std::string& dir) {
  for (const char* coll : {"all_reduce", "all_gather", "all_to_all", "send_recv", "broadcast", "get"}) {
    const std::string path = cat(dir, "/", coll, "_cpu_", backend, ".csv");
    int written = 0;
    {
      CsvOut csv(path, {"", cat("time_stats.", coll, ".median"), "rank", "num_workers", "size", "collective",
                        "devices_per_node", "max_devices_per_node"});
      for (const auto& r : rows) {
        if (r.collective != coll) continue;
        csv.row({{"", cat(written)},
                 {cat("time_stats.", coll, ".median"), ms(r.seconds)},
                 {"rank", "0"},
                 {"num_workers", cat(r.ranks)},
                 {"size", cat(r.bytes)},
                 {"collective", coll},
                 {"devices_per_node", cat(r.ranks)},
                 {"max_devices_per_node", cat(r.ranks)}});
        ++written;
      }
    }
    if (written == 0) std::filesystem::remove(path);
    else std::fprintf(stderr, "[profile] wrote %s\n", path.c_str());
  }
}

std::vector<int64_t> collective_sizes(bool quick) {
  std::vector<int64_t> s;
  for (int64_t b = 64; b <= (quick ? (int64_t(1) << 18) : (int64_t(1) << 24)); b *= quick ? 8 : 4) s.push_back(b);
  return s;
}

// ---- the machine ----

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      const auto c = line.find(':');
      return c == std::string::npos ? line : line.substr(c + 2);
    }
  return "unknown CPU";
}

double mem_total_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemTotal:") return kb * 1024;
  return 8e9;
}

std::string today() {
  const std::time_t t = std::time(nullptr);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%d", std::gmtime(&t));
  return b;
}

}  // namespace

void run_profile(const ProfileOptions& a) {
  if (a.out.empty()) fail("give the profile folder: -o DIR");
  if (a.threads < 1) fail("--threads must be >= 1, got ", a.threads);
  if (a.reps < 0) fail("--reps must be >= 1, got ", a.reps);
  const int reps = a.reps > 0 ? a.reps : a.quick ? 5 : 9;
  std::filesystem::create_directories(a.out);

  if (a.comm == "mpi") {
    // Under mpirun: the collectives over MPI, for groups of 2, 4, ... and all ranks.
    std::unique_ptr<World> world = make_world("mpi", 0);
    world->run([&](Communicator& w) {
      std::vector<CollectiveRow> rows;
      std::vector<int> groups;
      for (int n = 2; n < w.size(); n *= 2) groups.push_back(n);
      if (w.size() >= 2) groups.push_back(w.size());
      if (groups.empty()) fail("loom profile --comm mpi needs at least 2 ranks (mpirun -np 2 ...)");
      for (int n : groups) {
        std::unique_ptr<Communicator> g = w.split(w.rank() < n ? 0 : -1, w.rank());
        if (g) time_collectives(*g, collective_sizes(a.quick), reps, &rows);
        w.barrier();
      }
      if (w.rank() == 0) write_collectives(rows, "mpi", a.out);
    });
    return;
  }
  if (a.comm != "local") fail("unknown --comm '", a.comm, "' (local, mpi)");

  // Shapes: the --model files' and the built-in synthetic ones.
  std::vector<Shape> shapes;
  for (const auto& m : a.models)
    shapes.push_back({file_safe(std::filesystem::path(m).stem().string()), sim::find_model(m)});
  for (const auto& s : split_list(a.shapes)) shapes.push_back({file_safe(s), synth_shape(s).config});
  if (shapes.empty()) fail("nothing to profile: give --model PATH or --shapes NAME,...");
  std::vector<DType> dtypes;
  for (const auto& d : split_list(a.dtypes)) dtypes.push_back(parse_dtype(d));
  const std::vector<int> tokens =
      int_list("--tokens", !a.tokens.empty() ? a.tokens : a.quick ? "1,4,16,64" : "1,2,4,8,16,32,64,128,256,512", 1,
               1 << 16);
  const std::vector<int> tps = int_list("--tp", a.tp, 1, 1024);
  const std::vector<int> ranks = int_list("--ranks", !a.ranks.empty() ? a.ranks : a.quick ? "2" : "2,4", 1, a.max_ranks);
  const double t_start = now_s();

  // Roofline of one rank.
  // Buffers beyond the caches (default: twice the last-level cache, at least 256 MiB).
  kernels::Roofline roof(a.threads, a.quick ? size_t(256) << 20 : 0);
  const double bw = roof.memcpy_bandwidth(a.threads, 5), flops = roof.peak_flops(a.threads, 3);
  std::fprintf(stderr, "[profile] one rank = %d thread(s), %s kernels: memcpy %.1f GB/s, FMA peak %.1f GFLOP/s\n",
               a.threads, kernels::kernel_path(), bw / 1e9, flops / 1e9);

  ProfileSetup ps;
  ps.tokens = tokens;
  ps.tps = tps;
  ps.reps = reps;
  if (a.sweeps < 1) fail("--sweeps must be >= 1, got ", a.sweeps);
  ps.sweeps = a.sweeps;
  ps.threads = a.threads;
  if (a.op_order != "engine" && a.op_order != "isolated")
    fail("--op-order must be engine or isolated, got '", a.op_order, "'");
  ps.isolated = a.op_order == "isolated";
  if (a.clock != "wall" && a.clock != "cpu") fail("--clock must be wall or cpu, got '", a.clock, "'");
  g_cpu_clock = a.clock == "cpu";
  ps.budget = int64_t(a.budget_mib) << 20;
  ps.dir = a.out;
  const std::vector<int> concurrency = int_list("--concurrent", !a.concurrent.empty() ? a.concurrent : "1,2", 1, a.max_ranks);
  for (int r : concurrency)
    for (const Shape& sh : shapes) {
      for (DType dt : dtypes) profile_mlp(sh, dt, r, ps);
      profile_attention(sh, r, a.quick, ps);
    }
  profile_overhead(shapes.front().config.vocab_size, a.quick, reps, a.out);

  // Collectives on the local backend (ranks as threads of this process).
  std::vector<CollectiveRow> rows;
  for (int n : ranks) {
    if (n < 2) continue;
    std::unique_ptr<World> world = make_world("local", n);
    std::vector<CollectiveRow> mine;
    world->run([&](Communicator& c) { time_collectives(c, collective_sizes(a.quick), reps, &mine); });
    rows.insert(rows.end(), mine.begin(), mine.end());
  }
  write_collectives(rows, "local", a.out);
  // Point-to-point bandwidth between two ranks (the largest send/recv): the entry's link.
  double link_bw = bw;
  for (const auto& r : rows)
    if (r.collective == "send_recv" && r.ranks == 2 && r.bytes == collective_sizes(a.quick).back())
      link_bw = double(r.bytes) / r.seconds;

  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  sim::GpuSpec g;
  g.name = "cpu";
  g.description = cat(cpu_model_name(), ", one rank = ", a.threads, " thread(s)");
  g.hbm_bytes = mem_total_bytes() / std::max(1, cores / a.threads);  // a rank's share of the memory
  g.hbm_bw = bw;
  g.flops_bf16 = flops;
  g.flops_fp8 = flops;
  g.link_bw = link_bw;
  g.nvlink = false;
  g.default_gpus_per_node = std::max(1, cores / a.threads);
  // The last-level cache the ranks share (the part of it that serves them is fitted).
  g.cache_bytes = double(kernels::last_level_cache_bytes());
  g.source = cat("loom profile, ", today(), " (memcpy and FMA peak of ", a.threads, " thread(s), send/recv of ",
                 collective_sizes(a.quick).back(), " bytes between 2 local ranks)");
  nlohmann::json j = sim::hardware_entry_json(g);
  nlohmann::json shape_names = nlohmann::json::array();
  for (const auto& s : shapes) shape_names.push_back(s.name);
  j["profile"] = {{"threads_per_rank", a.threads},
                  {"kernel_path", kernels::kernel_path()},
                  {"cores", cores},
                  {"shapes", shape_names},
                  {"dtypes", split_list(a.dtypes)},
                  {"reps", reps},
                  {"sweeps", a.sweeps},
                  {"quick", a.quick},
                  {"op_order", a.op_order},
                  {"clock", a.clock},
                  {"seconds", now_s() - t_start}};
  std::ofstream f(a.out + "/hardware.json");
  f << j.dump(2) << "\n";
  if (!f) fail("cannot write ", a.out, "/hardware.json");
  std::fprintf(stderr, "[profile] wrote %s/hardware.json (%.0f s in all)\n", a.out.c_str(), now_s() - t_start);
}

}  // namespace loom::profiler
