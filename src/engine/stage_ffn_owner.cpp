// SiDP owner FFN stages: weight-as-a-service and compute-as-a-service (stage_ffn_owner.h).
#include "engine/stage_ffn_owner.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "core/error.h"
#include "engine/sidp.h"

namespace loom {

namespace {

constexpr int kOwnerBufferId = 14;  // the owner's FFN buffer on the WaS fetch communicator
constexpr int kTagRowsIn = 141;     // CaS: a replica's FFN input rows to the owner
constexpr int kTagRowsOut = 142;    // CaS: their FFN output back
constexpr size_t kFetchLog = 4096;

// The SwiGLU FFN of m rows (the tensor-parallel stage's arithmetic with a group of one), on the
// rank's device; the matrices are views of device memory (the owner's buffer, or a fetched slot).
void run_ffn(Device& dev, const WeightView& g, const WeightView& u, const WeightView& dn, const float* xn, int64_t m,
             int64_t d, float* out, DeviceArray<float>& gate, DeviceArray<float>& up) {
  const int64_t f = g.rows;
  gate.resize(size_t(m * f));
  up.resize(size_t(m * f));
  const kernels::Numerics exact = kernels::Numerics::exact;
  dev.matmul(xn, m, d, dev.wrap(g), gate.data(), f, false, exact);
  dev.matmul(xn, m, d, dev.wrap(u), up.data(), f, false, exact);
  dev.swiglu(gate.data(), gate.data(), up.data(), m * f);
  dev.matmul(gate.data(), m, f, dev.wrap(dn), out, d, false, exact);
}

class OwnerBase : public OwnerFfnStage {
 public:
  explicit OwnerBase(const StageContext& c) : c_(c), dp_(c.groups->get("dp")) {
    D_ = dp_.size();
    me_ = dp_.rank();
    L_ = c.model->config.n_layers;
    LOOM_CHECK(D_ == c.plan.dp && me_ == c.layout.dp && c.layout.layers.begin == 0 && c.layout.layers.end == L_,
               "SiDP over dp group ", me_, "/", D_);
    own_ = sidp::OwnerWeights::shared(*c.model, &c.groups->world(), D_, me_, c.pool, c.dev);
    stats_.fetched.assign(size_t(L_), 0);
    stats_.used.assign(size_t(L_), 0);
    gate_.bind(*c.dev);
    up_.bind(*c.dev);
  }
  Stats stats() const override {
    std::lock_guard<std::mutex> lk(mu_);
    return stats_;
  }

 protected:
  StageContext c_;
  Communicator& dp_;
  int D_ = 1, me_ = 0, L_ = 0;
  std::shared_ptr<sidp::OwnerWeights> own_;
  DeviceArray<float> gate_, up_;
  mutable std::mutex mu_;
  Stats stats_;
};

// ---- weight-as-a-service ----

class WasFfn final : public OwnerBase {
 public:
  explicit WasFfn(const StageContext& c) : OwnerBase(c) {
    // The prefetch thread's own communicator: one-sided gets never interleave with the rank's
    // collectives on a shared one (collective: every rank builds its stages in the same order).
    fetch_ = dp_.split(0, me_);
    fetch_->register_buffer(kOwnerBufferId, own_->data(), own_->bytes());
    order_ = sidp::fetch_order(me_, D_, L_, sidp::peak_shifting(c.plan));
    lookahead_ = c.plan.sidp_lookahead();
    int64_t slot = 0;
    for (int l : order_) slot = std::max(slot, own_->layouts()[size_t(l)].bytes);
    if (!order_.empty()) {
      slots_.resize(size_t(c.plan.sidp_slots()));
      for (Slot& s : slots_) {
        s.buf.bind(*c.dev);
        s.buf.resize(size_t(slot));
      }
      slot_bytes_ = slot * int64_t(slots_.size());
      thread_ = std::thread([this] { fetch_loop(); });
    }
  }
  ~WasFfn() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    if (std::uncaught_exceptions() > 0) {
      // This rank is failing (its error is on its way to the world, which fails its peers). It
      // cannot wait for them here: that would hold the error back until the communicator's
      // timeout. Its owner buffer and fetch communicator are left allocated, so a peer's
      // one-sided read in flight stays valid (and no collective window free runs) until the job
      // ends.
      static std::mutex kept_mu;
      static auto* kept = new std::vector<std::pair<std::shared_ptr<sidp::OwnerWeights>, Communicator*>>;
      std::lock_guard<std::mutex> lk(kept_mu);
      kept->emplace_back(own_, fetch_.release());  // reachable, never freed
      return;
    }
    // No rank frees its owner buffer while another's prefetch thread may still read it.
    try {
      fetch_->barrier();
    } catch (const std::exception&) {
    }
  }
  const char* name() const override { return "sidp-was"; }
  bool cas() const override { return false; }
  int64_t slot_bytes() const override { return slot_bytes_; }

  void forward(int layer, int64_t m, const float* xn, float* out) override {
    const int64_t d = c_.model->config.d_model;
    WeightView g, u, dn;
    if (sidp::owner_of(layer, D_) == me_) {
      own_->views(layer, &g, &u, &dn);
      run_ffn(*c_.dev, g, u, dn, xn, m, d, out, gate_, up_);
    } else {
      const int64_t item = iter_ * L_ + layer;
      int s = -1;
      {
        std::unique_lock<std::mutex> lk(mu_);
        const auto t0 = std::chrono::steady_clock::now();
        // S6 d: compute waits on the slot's completion flag just before launching the layer.
        cv_.wait(lk, [&] {
          if (failed_) return true;
          s = find(item);
          return s >= 0 && slots_[size_t(s)].ready;
        });
        if (failed_) fail("SiDP weight fetch failed on rank ", me_, ": ", error_);
        stats_.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
      sidp::ffn_views(own_->layouts()[size_t(layer)], slots_[size_t(s)].buf.data(), &g, &u, &dn);
      run_ffn(*c_.dev, g, u, dn, xn, m, d, out, gate_, up_);
      {
        // S6 e-f: the compute that used the slot is done: it is free for the next prefetch.
        std::lock_guard<std::mutex> lk(mu_);
        slots_[size_t(s)].item = -1;
        slots_[size_t(s)].ready = false;
        --outstanding_;
        ++stats_.used[size_t(layer)];
      }
      cv_.notify_all();
    }
    if (layer == L_ - 1) ++iter_;
  }

 private:
  struct Slot {
    DeviceArray<uint8_t> buf;  // device memory: the fetched layer's bytes
    int64_t item = -1;  // iteration * L + layer it holds (or is being filled with); -1: free
    bool ready = false;
  };

  int find(int64_t item) const {
    for (size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i].item == item) return int(i);
    return -1;
  }

  // The housekeeper (S6): the rank's fetch order, one forward pass after another, at most
  // `lookahead` fetched layers ahead of compute, each into a free slot.
  void fetch_loop() {
    try {
      for (int64_t iter = 0;; ++iter) {
        for (int l : order_) {
          const int64_t item = iter * L_ + l;
          int s = -1;
          {
            std::unique_lock<std::mutex> lk(mu_);
            cv_.wait(lk, [&] { return stop_ || (outstanding_ < lookahead_ && (s = find(-1)) >= 0); });
            if (stop_) return;
            slots_[size_t(s)].item = item;
            slots_[size_t(s)].ready = false;
            ++outstanding_;
          }
          const sidp::FfnLayerLayout& lay = own_->layouts()[size_t(l)];
          // S4: a one-sided read of the owner's buffer (MPI_Get under MPI); the owner does nothing.
          fetch_->get(sidp::owner_of(l, D_), kOwnerBufferId, size_t(lay.offset), slots_[size_t(s)].buf.data(),
                      size_t(lay.bytes));
          {
            std::lock_guard<std::mutex> lk(mu_);
            slots_[size_t(s)].ready = true;
            ++stats_.fetched[size_t(l)];
            stats_.fetch_bytes += lay.bytes;
            if (stats_.fetch_log.size() < kFetchLog) stats_.fetch_log.push_back(l);
          }
          cv_.notify_all();
        }
      }
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lk(mu_);
      failed_ = true;
      error_ = e.what();
      cv_.notify_all();
    }
  }

  std::unique_ptr<Communicator> fetch_;
  std::vector<int> order_;
  int lookahead_ = 1;
  std::vector<Slot> slots_;
  int64_t slot_bytes_ = 0;
  int64_t iter_ = 0;         // compute: forward passes done
  int outstanding_ = 0;      // fetched or being fetched, not yet used
  bool stop_ = false, failed_ = false;
  std::string error_;
  std::condition_variable cv_;
  std::thread thread_;
};

// ---- compute-as-a-service ----

class CasFfn final : public OwnerBase {
 public:
  explicit CasFfn(const StageContext& c) : OwnerBase(c), rows_of_(size_t(D_), 0) {}
  const char* name() const override { return "sidp-cas"; }
  bool cas() const override { return true; }
  int64_t slot_bytes() const override { return 0; }

  void begin_step(const ForwardBatch& batch) override {
    // Every rank sees the whole step: the rows of each replica (0 = a dummy this step, S10).
    std::fill(rows_of_.begin(), rows_of_.end(), 0);
    for (const ForwardSeq& s : batch.seqs) rows_of_[size_t(replica_of(s.seq_id, D_))] += s.n_tokens;
  }

  void idle(const Range& layers) override {
    // S10: "Even if the owner carries dummy tasks, it still executes the fused computation for
    // received activations and returns outputs."
    for (int64_t l = layers.begin; l < layers.end; ++l)
      if (sidp::owner_of(int(l), D_) == me_) serve(int(l), 0, nullptr, nullptr);
  }

  void forward(int layer, int64_t m, const float* xn, float* out) override {
    LOOM_CHECK(m == rows_of_[size_t(me_)], "CaS: ", m, " rows, the step gives replica ", me_, " ",
               rows_of_[size_t(me_)]);
    const int o = sidp::owner_of(layer, D_);
    if (o == me_) {
      serve(layer, m, xn, out);
      return;
    }
    if (m == 0) return;  // a dummy non-owner: no packing, no communication (S10)
    const int64_t d = c_.model->config.d_model;
    const size_t bytes = size_t(m * d) * sizeof(float);
    // S8/S9: the rows go to the owner and come back through its fused GEMM.
    dp_.send(o, kTagRowsIn, xn, bytes);
    dp_.recv(o, kTagRowsOut, out, bytes);
    std::lock_guard<std::mutex> lk(mu_);
    stats_.bytes_sent += int64_t(bytes);
    stats_.bytes_received += int64_t(bytes);
    ++stats_.messages_sent;
  }

 private:
  // S9: the owner's staging buffer holds every replica's rows in replica order; one GEMM chain;
  // each slice goes back to its replica.
  void serve(int layer, int64_t m, const float* xn, float* out) {
    const int64_t d = c_.model->config.d_model;
    int64_t total = 0, others = 0;
    std::vector<int64_t> at(size_t(D_), 0);
    for (int r = 0; r < D_; ++r) {
      at[size_t(r)] = total;
      total += rows_of_[size_t(r)];
      if (r != me_) others += rows_of_[size_t(r)];
    }
    WeightView g, u, dn;
    own_->views(layer, &g, &u, &dn);
    if (others == 0) {  // nobody else has rows: the local FFN
      if (m > 0) run_ffn(*c_.dev, g, u, dn, xn, m, d, out, gate_, up_);
      return;
    }
    staging_.bind(*c_.dev);
    result_.bind(*c_.dev);
    staging_.resize(size_t(total * d));
    result_.resize(size_t(total * d));
    for (int r = 0; r < D_; ++r) {
      const int64_t n = rows_of_[size_t(r)];
      if (n == 0) continue;  // dummy replicas: nothing to receive
      float* dst = staging_.data() + at[size_t(r)] * d;
      if (r == me_) c_.dev->copy(dst, xn, size_t(n * d) * sizeof(float));
      else dp_.recv(r, kTagRowsIn, dst, size_t(n * d) * sizeof(float));
    }
    run_ffn(*c_.dev, g, u, dn, staging_.data(), total, d, result_.data(), gate_, up_);
    int64_t sent = 0, msgs = 0;
    for (int r = 0; r < D_; ++r) {
      const int64_t n = rows_of_[size_t(r)];
      if (n == 0) continue;
      const float* src = result_.data() + at[size_t(r)] * d;
      if (r == me_) {
        c_.dev->copy(out, src, size_t(n * d) * sizeof(float));
      } else {
        dp_.send(r, kTagRowsOut, src, size_t(n * d) * sizeof(float));
        sent += n * d * int64_t(sizeof(float));
        ++msgs;
      }
    }
    std::lock_guard<std::mutex> lk(mu_);
    stats_.bytes_sent += sent;
    stats_.bytes_received += others * d * int64_t(sizeof(float));
    stats_.messages_sent += msgs;
    ++stats_.gemms_served;
    stats_.rows_served += others;
  }

  std::vector<int64_t> rows_of_;
  DeviceArray<float> staging_, result_;
};

}  // namespace

std::unique_ptr<FfnStage> make_owner_ffn_stage(const StageContext& c) {
  if (c.plan.sidp_cas) return std::make_unique<CasFfn>(c);
  return std::make_unique<WasFfn>(c);
}

}  // namespace loom
