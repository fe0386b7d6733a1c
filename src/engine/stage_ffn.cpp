// FFN stages (stage.h): tensor-parallel SwiGLU (Megatron column then row split; a group of one is
// the local FFN), and the factory.
#include "core/error.h"
#include "core/op_timing.h"
#include "engine/stage.h"
#include "engine/stage_ffn_owner.h"

namespace loom {

namespace {

class TensorParallelFfn final : public FfnStage {
 public:
  explicit TensorParallelFfn(const StageContext& c) : c_(c), reduce_(c.groups->get("ffn-tp")) {
    LOOM_CHECK(reduce_.size() == c_.layout.ffn_degree && reduce_.rank() == c_.layout.ffn_index,
               "FFN group of shard ", c_.layout.ffn_index, "/", c_.layout.ffn_degree);
    gate_.bind(*c_.dev);
    up_.bind(*c_.dev);
  }
  const char* name() const override { return reduce_.size() > 1 ? "tensor-parallel" : "local"; }

  void forward(int layer, int64_t m, const float* xn, float* out) override {
    const DeviceLayerWeights& W = c_.layer(layer);
    Device& dev = *c_.dev;
    const int64_t d = c_.model->config.d_model, f = c_.layout.ffn.size();
    gate_.resize(size_t(m * f));
    up_.resize(size_t(m * f));
    {
      optime::Scope timed(optime::Op::Matmul);
      dev.matmul(xn, m, d, W.w_gate, gate_.data(), f, false, c_.numerics);
      dev.matmul(xn, m, d, W.w_up, up_.data(), f, false, c_.numerics);
    }
    {
      optime::Scope timed(optime::Op::Elementwise);
      dev.swiglu(gate_.data(), gate_.data(), up_.data(), m * f);
    }
    {
      optime::Scope timed(optime::Op::Matmul);
      dev.matmul(gate_.data(), m, f, W.w_down, out, d, false, c_.numerics);
    }
    optime::Scope timed(optime::Op::Collective);
    if (reduce_.size() > 1) reduce_.all_reduce_sum(out, size_t(m * d));
  }

 private:
  StageContext c_;
  Communicator& reduce_;
  DeviceArray<float> gate_, up_;
};

}  // namespace

std::unique_ptr<FfnStage> make_ffn_stage(const StageContext& c) {
  if (c.layout.weights == WeightSource::FetchFromOwner) return make_owner_ffn_stage(c);
  return std::make_unique<TensorParallelFfn>(c);
}

}  // namespace loom
