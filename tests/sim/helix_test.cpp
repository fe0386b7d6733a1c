// Tests of the simulator's Helix part (../shared/papers/003): the Appendix A roofline formulas
// against the test vectors of PAPERS-NOTES.md (computed by hand from the formulas, not by this
// code), the HOP-B pipeline against Figure 3, Helix plans priced by the cost model, the MLA / MoE
// catalog entries and the helix-fig* experiments.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <tuple>

#include "core/error.h"
#include "sim/cost_model.h"
#include "sim/experiments.h"
#include "sim/helix.h"
#include "sim/model_catalog.h"
#include "paper_bands.h"

namespace loom::sim {
namespace {

// PAPERS-NOTES.md, Helix H12 test vectors: Figure 1's dense model (B=8, Q=128, K=8, Hsz=128,
// F=65536), FP4, MemBW = 8e12 B/s, S = 1e6; microseconds per layer.
TEST(HelixRoofline, AppendixATestVectors) {
  struct V {
    int tpa, tpf, kvp;
    double t_kv_us, t_w_us;
  };
  const V vectors[] = {{1, 1, 1, 1024.0, 236.978}, {2, 2, 1, 512.0, 118.489},   {4, 4, 1, 256.0, 59.245},
                       {8, 8, 1, 128.0, 29.622},   {16, 16, 1, 128.0, 14.942},  {32, 32, 1, 128.0, 7.602},
                       {64, 64, 1, 128.0, 3.932},  {8, 16, 2, 64.0, 17.039},    {8, 32, 4, 32.0, 10.748},
                       {8, 64, 8, 16.0, 7.602}};
  for (const V& v : vectors) {
    HelixRoofline r;  // defaults: Figure 1's parameters
    r.tpa = v.tpa;
    r.tpf = v.tpf;
    r.kvp = v.kvp;
    // The vectors are printed to 3 decimals: half a unit of the last digit.
    EXPECT_NEAR(helix_t_kv(r) * 1e6, v.t_kv_us, 5e-4) << v.tpa << "/" << v.tpf << "/" << v.kvp;
    EXPECT_NEAR(helix_t_w(r) * 1e6, v.t_w_us, 5e-4) << v.tpa << "/" << v.tpf << "/" << v.kvp;
  }
  // T_KV is linear in S: 12.8 us at S = 1e5 and 512 us at S = 4e6 (TP = 8, KVP = 1).
  HelixRoofline r;
  r.tpa = r.tpf = 8;
  r.seq_len = 1e5;
  EXPECT_NEAR(helix_t_kv(r) * 1e6, 12.8, 5e-4);
  r.seq_len = 4e6;
  EXPECT_NEAR(helix_t_kv(r) * 1e6, 512.0, 5e-4);
  r.tpa = 0;
  EXPECT_THROW(helix_t_kv(r), Error);
}

// 2.2's W_O by N instead of TPA: equal to the verbatim formula at KVP = 1, lower beyond it by
// exactly the W_O bytes no longer read: H x Hsz x (Q/TPA - Q/N) x bytes / MemBW.
TEST(HelixRoofline, AsDescribedVariant) {
  HelixRoofline r;
  for (int t : {1, 8, 64}) {
    r.tpa = r.tpf = t;
    EXPECT_DOUBLE_EQ(helix_t_w_as_described(r), helix_t_w(r));
  }
  r.tpa = 8, r.kvp = 8, r.tpf = 64;
  const double saved = 16384.0 * 128 * (128.0 / 8 - 128.0 / 64) * 0.5 / 8e12;
  EXPECT_NEAR(helix_t_w(r) - helix_t_w_as_described(r), saved, 1e-15);
}

// Figure 3: 8 requests, 2 units of attention and 1.2 units of all-to-all each: 25.6 units
// without HOP-B, 17 (17.2 exactly) with it.
TEST(HelixHopB, Figure3) {
  const std::vector<double> attn(8, 2.0), comm(8, 1.2);
  EXPECT_NEAR(hopb_span(attn, comm, false), 25.6, 1e-12);
  EXPECT_NEAR(hopb_span(attn, comm, true), 17.2, 1e-12);
  EXPECT_NEAR(hopb_exposed(attn, comm, true), 1.2, 1e-12);  // only the last chunk's all-to-all
  // Communication longer than the attention it hides behind: the link is the bottleneck, and
  // the span is the first attention plus every all-to-all.
  const std::vector<double> slow(8, 3.0);
  EXPECT_NEAR(hopb_span(attn, slow, true), 2.0 + 8 * 3.0, 1e-12);
  // One chunk: nothing to overlap with.
  EXPECT_NEAR(hopb_span({5.0}, {1.0}, true), hopb_span({5.0}, {1.0}, false), 1e-12);
  EXPECT_THROW(hopb_span({1.0}, {}, true), Error);
}

CostModel gb200(const std::string& model, int gpus = 72) {
  CostModelOptions o;
  o.weight_dtype = SimDType::FP4;
  o.kv_bytes = 0.5;
  CostModel cm(find_model(model), parse_node(cat("gb200x", gpus)), o);
  cm.set_arch(find_model_arch(model));
  return cm;
}

std::vector<SeqWork> decode_batch(int b, int context) { return std::vector<SeqWork>(size_t(b), SeqWork{1, context, true}); }

// The Figure 5-7 pricing (helix_paper_calibration) is the roofline at the datasheet figures plus
// the A100 fit's fixed cost per kernel (hardware.cpp default_calibration: 6 us a GEMM, 8 us an
// attention kernel): a GEMM is max(FLOPs / FP4 peak, bytes / MemBW) + 6 us, a collective its
// latency plus its bytes on the link, and a decode step's KV read is Appendix A's T_KV (Figure 1's
// Q = 128, K = 8, Hsz = 128 are Llama-405B's) plus one attention kernel's 8 us, under TP and under
// Helix.
TEST(HelixPaperPricing, IsTheRoofline) {
  CostModelOptions o;
  o.weight_dtype = SimDType::FP4;
  o.kv_bytes = 0.5;
  const double lat = 6.3e-6;
  const CostModel cm(find_model("llama-3-405b"), parse_node("gb200x72"), o, helix_paper_calibration(lat));
  // GB200 datasheet: 10 PF dense FP4, 8 TB/s, NVLink 900 GB/s each way.
  const double flops = 10e15, bw = 8e12, link = 900e9;
  // Memory-bound (one token) and compute-bound (8192 tokens) GEMMs of a 16384 x 16384 FP4 weight.
  for (double m : {1.0, 8192.0}) {
    const double bytes = 16384.0 * 16384 * 0.5 + 2 * m * 16384 * 2;
    EXPECT_NEAR(cm.gemm_s(m, 16384, 16384, SimDType::FP4, 0.5, 2),
                std::max(2 * m * 16384 * 16384 / flops, bytes / bw) + 6e-6, 1e-15)
        << m;
  }
  EXPECT_NEAR(cm.collective_s(Collective::AllToAll, 1e6, 8, 8), lat + 7.0 / 8 * 1e6 / link, 1e-15);
  EXPECT_NEAR(cm.collective_s(Collective::AllReduce, 1e6, 64, 64), lat + 2 * 63.0 / 64 * 1e6 / link, 1e-15);
  // The KV read of 8 sequences at S = 1M, per layer: T_KV plus the few activation bytes (the query,
  // the new K and V, the output) and block rounding (under 0.1%), plus one attention kernel's 8 us
  // (Helix: the cheapest HOP-B count is one chunk here, HelixPricing.PerKernelFixedCostsByHand).
  for (const auto& [plan, tpa, kvp] : {std::tuple{"tp=8", 8, 1}, std::tuple{"kvp=8,tpa=8", 8, 8}}) {
    HelixRoofline h;
    h.batch = 8, h.tpa = tpa, h.kvp = kvp;
    const double t_kv = helix_t_kv(h);
    const PricedPlan pl = cm.prepare(Plan::parse(plan));
    // Helix: 62,500 blocks of 16 tokens over 8 KVP ranks, the busiest holding 7,813 (+0.006%).
    const double attn = cm.price(pl, decode_batch(8, 1000000)).attention_s / 126 - 8e-6;
    EXPECT_GT(attn, t_kv) << plan;
    EXPECT_LT(attn, t_kv * 1.001) << plan;
  }
  EXPECT_THROW(helix_paper_calibration(-1), Error);
}

// Helix plans go through the engine's validate() and rank_layout(): QKV for the TPA heads on
// every KVP rank (redundant), attention for those heads over 1/KVP of the context, W_O and the
// FFN as TP(N).
TEST(HelixCostModel, PlanSizes) {
  CostModelOptions o;
  o.weight_dtype = SimDType::FP8;
  const CostModel cm(find_model("llama-3-70b"), parse_node("h200x8"), o);  // H = 64, K = 8
  const PricedPlan h = cm.prepare(Plan::parse("kvp=2,tpa=2"));
  EXPECT_EQ(h.kvp, 2);
  EXPECT_EQ(h.kv_block, 16);
  EXPECT_TRUE(h.hopb);
  EXPECT_EQ(h.tp_group, 4);        // TP(N = 4) for W_O and the FFN
  EXPECT_EQ(h.proj_q_heads, 32);   // H / TPA, on both KVP ranks
  EXPECT_EQ(h.proj_kv_heads, 4);   // K / TPA
  EXPECT_EQ(h.q_heads, 32);
  EXPECT_EQ(h.kv_heads, 4);
  EXPECT_EQ(h.out_heads, 16);      // H / N
  EXPECT_EQ(h.ffn, 28672 / 4);
  EXPECT_FALSE(cm.prepare(Plan::parse("kvp=2,tpa=2,hopb=off")).hopb);
  // Its weights: more than TP(4) (W_Q, W_K, W_V by 2, not 4) and fewer than TP(2).
  EXPECT_GT(h.weight_bytes, cm.prepare(Plan::make_tp(4)).weight_bytes);
  EXPECT_LT(h.weight_bytes, cm.prepare(Plan::make_tp(2)).weight_bytes);
  // KV per token per GPU: half of TP(2)'s (the same heads, half the blocks).
  const MemoryPlan mh = cm.memory({h}), m2 = cm.memory({cm.prepare(Plan::make_tp(2))});
  EXPECT_DOUBLE_EQ(mh.kv_bytes_per_token_per_gpu * 2, m2.kv_bytes_per_token_per_gpu);
}

// Decode at a long context is KV-read bound: a KVP rank reads 1/KVP of each context for its
// heads; the all-to-all volume does not depend on the context (Helix 2.1.2).
TEST(HelixCostModel, KvReadsAndCommunication) {
  CostModelOptions o;
  o.weight_dtype = SimDType::FP8;
  const CostModel cm(find_model("llama-3-70b"), parse_node("h200x8"), o);
  const auto batch = decode_batch(4, 1 << 20);
  const double tp2 = cm.price(Plan::make_tp(2), batch).attention_s;
  const double h22 = cm.price(Plan::parse("kvp=2,tpa=2"), batch).attention_s;
  const double h42 = cm.price(Plan::parse("kvp=4,tpa=2"), batch).attention_s;
  EXPECT_NEAR(h22 / tp2, 0.5, 0.01);
  EXPECT_NEAR(h42 / tp2, 0.25, 0.01);
  // TP up to K = 8 shards the KV heads too: TP(8) reads one head per rank, 1/4 of TP(2).
  EXPECT_NEAR(cm.price(Plan::make_tp(8), batch).attention_s / tp2, 0.25, 0.01);
  // Communication of a Helix step is independent of the context length (hopb=off: all exposed).
  const PricedPlan off = cm.prepare(Plan::parse("kvp=2,tpa=2,hopb=off"));
  EXPECT_NEAR(cm.price(off, decode_batch(4, 100000)).comm_s, cm.price(off, decode_batch(4, 1 << 20)).comm_s,
              1e-12 * cm.price(off, decode_batch(4, 100000)).comm_s);
  // It grows with the batch (B x H/N partials plus LSE).
  EXPECT_LT(cm.price(off, decode_batch(4, 100000)).comm_s, cm.price(off, decode_batch(64, 100000)).comm_s);
}

// HOP-B changes only the schedule: off runs the same chunks (attention, all-to-all and merge each)
// one after another, so it is never faster than on, and prices the same GEMMs and attention; with
// one sequence there is one chunk and nothing to overlap. When the all-to-all carries real bytes
// (a PCIe node, a large batch) the cheapest schedule cuts the batch into several chunks and
// hides all but the last one's exchange (each chunk's fixed costs are the price of the cut).
TEST(HelixCostModel, HopBOverlap) {
  const CostModel cm = gb200("llama-3-405b");
  const PricedPlan on = cm.prepare(Plan::parse("kvp=8,tpa=8")), off = cm.prepare(Plan::parse("kvp=8,tpa=8,hopb=off"));
  for (int b : {1, 2, 8, 32}) {
    const StepCost a = cm.price(on, decode_batch(b, 1 << 20)), z = cm.price(off, decode_batch(b, 1 << 20));
    EXPECT_LE(a.total_s, z.total_s * (1 + 1e-12)) << b;
    EXPECT_DOUBLE_EQ(a.gemm_s, z.gemm_s) << b;
    EXPECT_DOUBLE_EQ(a.attention_s, z.attention_s) << b;
    if (b == 1) {
      EXPECT_DOUBLE_EQ(a.total_s, z.total_s);  // nothing to overlap with
    }
  }
  CostModelOptions o;
  o.weight_dtype = SimDType::BF16;
  const CostModel pcie(find_model("llama-3-70b"), parse_node("l4x8"), o);
  const PricedPlan pon = pcie.prepare(Plan::parse("kvp=4,tpa=2")), poff = pcie.prepare(Plan::parse("kvp=4,tpa=2,hopb=off"));
  const auto batch = decode_batch(64, 100000);
  const StepCost s_on = pcie.price(pon, batch), s_off = pcie.price(poff, batch);
  EXPECT_LT(s_on.comm_s, s_off.comm_s);
  EXPECT_DOUBLE_EQ(s_on.attention_s, s_off.attention_s);
  // Several chunks: more than one attention kernel's fixed cost per layer (the A100 fit's 8 us).
  const double one_chunk_attention = pcie.price(pcie.prepare(Plan::parse("kvp=4,tpa=2,hopb=off")), decode_batch(1, 100000)).attention_s;
  EXPECT_GE(s_on.attention_s, (64 * (one_chunk_attention - 80 * 8e-6) + 2 * 80 * 8e-6) * (1 - 1e-12));
  // What on hides is at most every exchange but one: off - on < (c - 1) whole exchanges of c chunks,
  // i.e. less than the batch's one exchange plus (c - 1) latencies; at least the bytes of one.
  const double a2a_all = pcie.collective_s(Collective::AllToAll, 64 * 32 * (128 * 2.0 + 4), 4, 4);
  EXPECT_GT((s_off.total_s - s_on.total_s) / 80, 0.0);
  EXPECT_LT((s_off.total_s - s_on.total_s) / 80, a2a_all + 64 * 54e-6);
}

// The catalog's MLA / MoE model and its pricing.
TEST(HelixCatalog, DeepSeekR1) {
  const ModelConfig c = find_model("deepseek-r1");
  const ModelArch a = find_model_arch("DeepSeek-R1");
  ASSERT_TRUE(a.mla && a.moe);
  EXPECT_EQ(c.n_layers, 61);
  EXPECT_EQ(c.n_heads, 128);
  EXPECT_EQ(a.mla->cached_per_token(), 512 + 64);
  EXPECT_EQ(a.moe->n_routed, 256);
  EXPECT_EQ(a.moe->n_shared, 1);
  EXPECT_EQ(a.moe->n_active, 8);
  EXPECT_EQ(a.moe->first_dense, 3);
  // DeepSeek-V3 / R1 report 671B parameters (without the 14B multi-token-prediction module).
  EXPECT_NEAR(double(arch_param_count(c, a)) / 671e9, 1.0, 0.01);
  EXPECT_TRUE(find_model_arch("llama-3-405b").plain());
  EXPECT_EQ(arch_param_count(find_model("llama-3-405b"), {}), find_model("llama-3-405b").param_count());
  // A model config that cannot carry the latent is refused by set_arch.
  CostModel bad(find_model("llama-3-70b"), parse_node("gb200x72"));
  EXPECT_THROW(bad.set_arch(a), Error);
}

TEST(HelixCostModel, MlaKvAndMoeReads) {
  const CostModel cm = gb200("deepseek-r1");
  // KV per token: one latent of 576 values per layer in FP4, whole on every TP rank (K = 1), a
  // 1/KVP share under Helix.
  const double latent = 61 * 576 * 0.5;
  const PricedPlan tp8 = cm.prepare(Plan::make_tp(8)), h8 = cm.prepare(Plan::parse("kvp=8,tpa=1"));
  EXPECT_DOUBLE_EQ(cm.memory({tp8}).kv_bytes_per_token_per_gpu, latent);
  EXPECT_DOUBLE_EQ(cm.memory({h8}).kv_bytes_per_token_per_gpu, latent / 8);
  // Weights per GPU: the 671B model in FP4 over 8 GPUs, plus the attention's replicated parts.
  const double total = double(arch_param_count(find_model("deepseek-r1"), cm.arch())) * 0.5;
  EXPECT_GT(cm.memory({tp8}).weight_bytes_per_gpu, total / 8 * 0.99);
  EXPECT_LT(cm.memory({tp8}).weight_bytes_per_gpu, total / 8 * 1.1);
  // A decode step reads only the experts its tokens pick: one token (8 of 256 routed experts)
  // saves at least half the read time of the other 248 experts' shards against a model whose
  // tokens pick every expert; more tokens touch more experts.
  const double one = cm.price(tp8, decode_batch(1, 4096)).gemm_s, many = cm.price(tp8, decode_batch(256, 4096)).gemm_s;
  CostModel every = gb200("deepseek-r1");
  ModelArch all = every.arch();
  all.moe->n_active = all.moe->n_routed;
  every.set_arch(all);
  const double one_all = every.price(every.prepare(Plan::make_tp(8)), decode_batch(1, 4096)).gemm_s;
  const double skipped = 58.0 * 248 * 3 * 7168 * 2048 * 0.5 / 8;  // bytes of the unpicked experts' shards
  EXPECT_GT(one_all - one, 0.5 * skipped / cm.node().gpu.hbm_bw);
  EXPECT_GT(many, one);
  // The EP baseline (data-parallel attention, experts over 8 ranks) is priced too.
  const PricedPlan ep = cm.prepare(Plan::make_dp(8), PlanVariant::DpAttentionEp);
  EXPECT_EQ(ep.ep, 8);
  EXPECT_GT(cm.price(ep, decode_batch(4, 4096)).comm_s, 0);
  EXPECT_THROW(cm.prepare(Plan::make_tp(8), PlanVariant::DpAttentionEp), Error);
  EXPECT_THROW(cm.prepare(Plan::make_tp(8), PlanVariant::MedhaKvp), Error);
}

// A switch to or from a Helix plan of an MLA model moves the latent, not K and V per head: one
// token of DeepSeek-R1 stores 512 + 64 values per layer (config.json: kv_lora_rank,
// qk_rope_head_dim) for all 128 heads, in FP4 here. From kvp=8 (each block on one rank) to tp=8
// (every rank holds every token: the one latent is replicated) each rank receives the 7/8 of the
// blocks it lacks.
TEST(HelixCostModel, SwitchMovesTheMlaLatent) {
  const CostModel cm = gb200("deepseek-r1");
  const double per_token = 61 * (512 + 64) * 0.5;  // bytes of one token's KV, every layer
  EXPECT_DOUBLE_EQ(cm.kv_bytes_per_token(), per_token);
  const PricedPlan helix = cm.prepare(Plan::parse("kvp=8,tpa=1")), tp = cm.prepare(Plan::make_tp(8));
  const std::vector<SeqExtent> seqs = {{0, 128 * 10}, {1, 128 * 3}};  // whole rounds of 8 blocks of 16
  int64_t bytes = 0;
  const double t = cm.switch_s(helix, tp, seqs, 16, &bytes);
  EXPECT_EQ(bytes, int64_t(std::llround(8 * (7.0 / 8) * (128 * 13) * per_token)));
  EXPECT_GT(t, 0);
  // Back: every rank already holds its blocks; nothing moves.
  EXPECT_EQ(cm.switch_s(tp, helix, seqs, 16, &bytes), 0.0);
  EXPECT_EQ(bytes, 0);
  // A dense GQA model still moves K and V of head_dim per KV head: Llama-3-70B, 80 layers x 8
  // heads x 2 x 128 values, in FP4.
  const CostModel llama = gb200("llama-3-70b");
  EXPECT_DOUBLE_EQ(llama.kv_bytes_per_token(), 80 * 8 * 2 * 128 * 0.5);
}

// Medha-style KVP (the baseline of Helix 1 / 3.1): the same attention, but W_O and the FFN on one
// TP(TPA) group with every communication exposed: never faster than Helix on the same ranks.
TEST(HelixCostModel, MedhaVariant) {
  const CostModel cm = gb200("llama-3-405b");
  const PricedPlan medha = cm.prepare(Plan::parse("kvp=4,tpa=8"), PlanVariant::MedhaKvp);
  const PricedPlan helix = cm.prepare(Plan::parse("kvp=4,tpa=8"));
  EXPECT_EQ(medha.tp_group, 8);
  EXPECT_EQ(medha.out_heads, 128 / 8);
  EXPECT_EQ(medha.ffn, 53248 / 8);
  EXPECT_EQ(helix.tp_group, 32);
  EXPECT_NE(medha.name, helix.name);
  for (int b : {1, 8, 32}) {
    const auto batch = decode_batch(b, 1 << 20);
    EXPECT_GT(cm.price(medha, batch).total_s, cm.price(helix, batch).total_s) << b;
    EXPECT_DOUBLE_EQ(cm.price(medha, batch).attention_s, cm.price(helix, batch).attention_s) << b;
  }
}

// `loom plan --context`: decode priced at a context; a context no sequence fits is one clear error.
TEST(HelixPlanner, DecodeAtContext) {
  const DecodeAtContext d = measure_decode("llama-3-405b", "gb200x64", "fp4", "kvp=8,tpa=8", 1000000);
  EXPECT_EQ(d.gpus, 64);
  EXPECT_GE(d.max_batch, 1);
  EXPECT_GE(d.ttl_max_ms, d.ttl_b1_ms);
  EXPECT_NEAR(d.tok_s_max, d.max_batch / (d.ttl_max_ms / 1e3), 1e-6 * d.tok_s_max);
  try {
    measure_decode("llama-3-405b", "gb200x8", "fp4", "tp=8", 100000000);
    ADD_FAILURE() << "a 100M-token context fits on 8 GPUs?";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("100000000 tokens"), std::string::npos) << e.what();
  }
  EXPECT_THROW(measure_decode("llama-3-405b", "gb200x8", "fp4", "tp=8", 0), Error);
}

const ExperimentRow& row(const ExperimentResult& r, const std::string& metric, const std::string& config) {
  for (const auto& x : r.rows)
    if (x.metric == metric && x.config == config) return x;
  throw Error(cat("no row ", metric, " / ", config, " in ", r.name));
}

// The experiments are deterministic: each runs once for all the tests that read it.
const ExperimentResult& cached_experiment(const std::string& name) {
  static std::map<std::string, ExperimentResult> done;
  auto it = done.find(name);
  if (it == done.end()) it = done.emplace(name, find_experiment(name).run()).first;
  return it->second;
}

// helix-fig1 prints the formulas next to the hand-computed vectors, and its two plots.
TEST(HelixExperiments, Fig1) {
  const ExperimentResult r = find_experiment("helix-fig1").run();
  int with_paper = 0;
  for (const auto& x : r.rows)
    if (x.paper) {
      ++with_paper;
      EXPECT_NEAR(x.simulated, *x.paper, 5e-4) << x.metric << " " << x.config;
    }
  EXPECT_EQ(with_paper, 22);
  // The Figure 1 plateau: T_KV stops falling beyond TP = K, KVP keeps cutting it.
  EXPECT_EQ(row(r, "t_kv_us", "tp=64").simulated, row(r, "t_kv_us", "tp=8").simulated);
  EXPECT_LT(row(r, "t_kv_us", "kvp=8,tpa=8,tpf=64").simulated, row(r, "t_kv_us", "tp=64").simulated);
  ASSERT_EQ(r.files.size(), 2u);
  for (const auto& [name, svg] : r.files) EXPECT_EQ(svg.rfind("<svg", 0), 0u) << name;
  const auto j = to_json(r);
  EXPECT_EQ(j["experiment"], "helix-fig1");
  EXPECT_TRUE(j["rows"][0].contains("paper") && j["rows"][0].contains("basis"));
}

// Figures 5 and 6: the shape the paper claims (3.2): Helix reaches a higher interactivity than
// the best baseline, and more tokens/s/GPU at the baseline's interactivity. Not the paper's
// factors: our cost model is not its simulator (the rows print both).
TEST(HelixExperiments, Fig5And6Shape) {
  for (const char* name : {"helix-fig5", "helix-fig6"}) {
    const ExperimentResult& r = cached_experiment(name);
    const auto& gain = row(r, "interactivity_gain", "helix/baseline");
    EXPECT_GT(gain.simulated, 1.0) << name;
    ASSERT_TRUE(gain.paper.has_value());
    EXPECT_GT(row(r, "tok_s_gpu_gain_same_interactivity", "helix/baseline").simulated, 1.0) << name;
    // Helix beats every baseline family's most interactive point.
    for (const auto& x : r.rows) {
      if (x.metric == "max_tok_s_user" && x.config != "helix") {
        EXPECT_GT(row(r, "max_tok_s_user", "helix").simulated, x.simulated) << name << " " << x.config;
      }
    }
    ASSERT_EQ(r.files.count(std::string(name) + ".svg"), 1u);
    EXPECT_NE(r.files.at(std::string(name) + ".svg").find("<polyline"), std::string::npos);
    EXPECT_EQ(r.files.at(std::string(name) + ".svg").find("<="), std::string::npos);  // "<" escaped in text
  }
}

// The reproduced factors against the paper's printed numbers (external facts, typed here from
// the paper, not read from the code under test). The bands were fixed before the final model's
// numbers were looked at (first commit of this test): the factors are read from the paper's
// text about its plots, so a ratio passes within +-15% of the printed factor, and only with
// Helix ahead (> 1) where the paper says it wins; Figure 7 (HOP-B off) passes on direction and
// order of magnitude: Llama-405B loses 10-15% tokens/s/user, DeepSeek-R1 0-3%, Llama more.
// A factor outside its band carries its KnownMiss (paper_bands.h): the value measured with
// `loom sim experiment helix-figN` and the cause, from the model's own breakdown (the
// experiments' notes; `helix-latency` for the latency dependence).
struct PaperFactor {
  const char* experiment;
  const char* metric;
  const char* config;
  double paper;  // as printed
  paper::PaperBand band;
};
const PaperFactor kPaperFactors[] = {
    {"helix-fig5", "interactivity_gain", "helix/baseline", 1.5,
     {"helix-fig5 DeepSeek-R1 interactivity gain", 1.5 * 0.85, 1.5 * 1.15,
      "3.2: DeepSeek-R1 \"improves user interactivity by up to 1.5x\"",
      paper::KnownMiss{1.2209, "with every kernel's fixed cost priced (the A100 fit's, counted per launch) both best "
                               "TTLs are mostly fixed costs at B=1: the baseline's (tp=64, 7.98 ms) is 46% GEMMs and 34% "
                               "the read of the whole 1M-token latent on every GPU; Helix's (kvp=64, 6.54 ms) drops the "
                               "latent read to 8% but keeps the GEMMs (60%) and adds an all-to-all and a merge per "
                               "layer (comm 18%): 1.22x (2.04x with no fixed costs, paper 1.5x)"}}},
    {"helix-fig5", "tok_s_gpu_gain_same_interactivity", "helix/baseline", 32.0,
     {"helix-fig5 DeepSeek-R1 tokens/s/GPU at equal interactivity", 32.0 * 0.85, 32.0 * 1.15,
      "3.2: DeepSeek-R1 \"up to 32x more concurrent users (i.e., achieves 32x higher Tokens/s/GPU)\"",
      paper::KnownMiss{24.395, "at the baseline's best interactivity (tp=64, B=1, 7.98 ms) Helix's best point is "
                               "kvp=16 B=6 (7.85 ms, 47.8 tokens/s/GPU against 1.96): the per-kernel fixed costs, equal on "
                               "both sides, leave less TTL for the latent reads each added request brings"}}},
    {"helix-fig6", "interactivity_gain", "helix/baseline", 1.13,
     {"helix-fig6 Llama-405B interactivity gain", 1.0, 1.13 * 1.15,
      "3.2: Llama-405B \"1.13x improvement in maximum achievable interactivity\" (band: > 1, +15%)"}},
    {"helix-fig6", "tok_s_gpu_gain_same_interactivity", "helix/baseline", 4.0,
     {"helix-fig6 Llama-405B tokens/s/GPU at equal interactivity", 4.0 * 0.85, 4.0 * 1.15,
      "3.2: Llama-405B \"4x higher throughput and batch capacity compared to TP\"",
      paper::KnownMiss{2.0465, "at TP's best TTL (tp=64, B=1, 9.13 ms) Helix kvp=8,tpa=8 fits 2 sequences (8.92 ms); the "
                               "3rd needs 9.2 ms (each adds a 0.28 ms read of its 2 GB KV share): the per-kernel fixed "
                               "costs (HelixPricing.PerKernelFixedCostsByHand: 8.65 ms at B=1 against TP's 9.13) leave "
                               "0.49 ms of room"}}},
    // Issue 31: the "4x" and "32x" as batch counts, the sequences Helix decodes within the
    // baseline's best TTL over the baseline's batch there (1), banded as the factors above.
    {"helix-fig5", "batch_gain_at_baseline_best_ttl", "helix/baseline", 32.0,
     {"helix-fig5 DeepSeek-R1 batch within the baseline's best TTL", 32.0 * 0.85, 32.0 * 1.15,
      "abstract: DeepSeek-R1 \"up to 32x larger batches under the same latency budget\"",
      paper::KnownMiss{24.0, "the baseline's best TTL (tp=64, B=1) is 7.98 ms; Helix kvp=64 decodes 24 sequences within "
                             "it from a 6.54 ms start, each adding a 1/64 share of its 1M-token latent read and its "
                             "exchange bytes"}}},
    {"helix-fig6", "batch_gain_at_baseline_best_ttl", "helix/baseline", 4.0,
     {"helix-fig6 Llama-405B batch within TP's best TTL", 4.0 * 0.85, 4.0 * 1.15,
      "3.2: Llama-405B \"4x higher throughput and batch capacity compared to TP\"",
      paper::KnownMiss{2.0, "at TP's best TTL (tp=64, B=1, 9.13 ms) Helix kvp=8,tpa=8 fits 2 sequences (8.92 ms); the "
                            "3rd needs 9.2 ms"}}},
    {"helix-fig7", "tok_s_user_loss_pct", "llama-3-405b", 12.0,
     {"helix-fig7 Llama-405B HOP-B-off loss (%)", 10.0, 15.0,
      "3.3: HOP-B off \"reduce[s] Tokens/s/User by up to 12%\" (Llama-405B)",
      paper::KnownMiss{0.0, "each HOP-B chunk launches an attention kernel (8 us fixed), an all-to-all (6.3 us + bytes) "
                            "and a merge (2 us) while a request's attention is 2 us of KV read, so the cheapest schedule "
                            "is one chunk at every frontier point and off runs it alike; per request as Figure 3 draws "
                            "it the loss is 22.7% (row tok_s_user_loss_pct_per_request; HelixPricing."
                            "PerKernelFixedCostsByHand: off - on = one exchange and one merge per request)"}}},
    {"helix-fig7", "tok_s_user_loss_pct", "deepseek-r1", 1.0,
     {"helix-fig7 DeepSeek-R1 HOP-B-off loss (%)", 0.0, 3.0, "3.3: DeepSeek-R1 \"only ~1% degradation\""}},
};

void check_factor(const PaperFactor& f) {
  const ExperimentRow& x = row(cached_experiment(f.experiment), f.metric, f.config);
  ASSERT_TRUE(x.paper.has_value()) << f.experiment << " " << f.metric;
  EXPECT_DOUBLE_EQ(*x.paper, f.paper) << f.experiment << " " << f.metric << " prints another paper value";
  paper::expect_band(f.band, x.simulated);
}

// One test per experiment (ctest runs each test in its own process, and each runs its experiment).
TEST(HelixPaperFactors, Fig5DeepSeek) {
  check_factor(kPaperFactors[0]);
  check_factor(kPaperFactors[1]);
  check_factor(kPaperFactors[4]);
}
TEST(HelixPaperFactors, Fig6Llama) {
  check_factor(kPaperFactors[2]);
  check_factor(kPaperFactors[3]);
  check_factor(kPaperFactors[5]);
}
// Figure 7: with each chunk's fixed costs priced the cheapest HOP-B schedule is one chunk, which
// off runs alike (HelixPricing.PerKernelFixedCostsByHand works it at B = 2); the direction of
// Figure 7: communication is a larger share of Llama-405B's TTL, so HOP-B matters more there
// (3.3): Llama's loss minus DeepSeek's, in points, >= 0.
TEST(HelixPaperFactors, Fig7HopB) {
  check_factor(kPaperFactors[6]);
  check_factor(kPaperFactors[7]);
  const ExperimentResult& r = cached_experiment("helix-fig7");
  paper::expect_band({"helix-fig7 Llama-405B loss - DeepSeek-R1 loss (points)", 0.0, paper::kInf,
                      "3.3: HOP-B matters more for Llama-405B (~12%) than DeepSeek-R1 (~1%)"},
                     row(r, "tok_s_user_loss_pct", "llama-3-405b").simulated -
                         row(r, "tok_s_user_loss_pct", "deepseek-r1").simulated);
}

// Operating points worked by hand (issue 31: per-kernel fixed costs counted from what the stage
// launches, HOP-B on and off as Figure 3 draws them). Llama-405B (126 layers, d 16384, 128 query /
// 8 KV heads of 128, FFN 53248, vocabulary 128256) decoding one sequence at S = 1M on GB200 in FP4
// (KV 0.5 B a value, activations BF16), the paper pricing at 6.3 us a collective: 8e12 B/s DRAM,
// 10 PF FP4, 900e9 B/s NVLink, and the A100 fit's fixed costs (hardware.cpp default_calibration):
// 6 us a GEMM, 8 us an attention kernel, 2.5 us a norm, 2 us an activation (the Helix merge is priced
// as one), 1.25 us RoPE, 0.62 us the embedding, 0 an add. Per layer, in us:
//   tp=64 (per rank 2 query heads, 1 KV head, 832 FFN columns):
//     QKV [1,16384]x[16384,512]: (4,194,304 + 32,768 + 1,024) B / 8e12 = 0.52851 + 6
//     W_O [1,256]x[256,16384]: (2,097,152 + 512 + 32,768) B = 0.26630 + 6
//     gate+up [1,16384]x[16384,1664]: (13,631,488 + 32,768 + 3,328) B = 1.70845 + 6
//     down [1,832]x[832,16384]: (6,815,744 + 1,664 + 32,768) B = 0.85627 + 6
//     attention: 1e6 x 2 x 128 x 0.5 + (2 x 2 + 2) x 128 x 2 = 128,001,536 B = 16.00019 + 8
//     two all-reduces of 32,768 B over 64: 2 x (6.3 + 2 x 63/64 x 32,768 / 900e9) = 2 x 6.37168
//     RoPE 1.25 + 1,536 B, two norms 2 x (2.5 + 65,536 B), two adds 2 x 98,304 B, SwiGLU 2 + 4,992 B
//   = 72.39 a layer; the step adds the embedding (0.62 + 65,536 B), the final norm (2.5 + 65,536 B)
//     and the vocabulary-parallel classifier [1,16384]x[16384,2004] (16,416,768 + 32,768 + 4,008 B:
//     2.05671 + 6): 9.133 ms.
//   kvp=8,tpa=8 (per rank 16 query heads and 1 KV head projected and attended, 2 W_O heads, 832
//   FFN columns; one HOP-B chunk for one sequence):
//     QKV [1,16384]x[16384,2304]: (18,874,368 + 32,768 + 4,608) B = 2.36397 + 6; W_O, gate+up, down
//     as tp=64;
//     attention over its 7,813 of the 62,500 16-token blocks (125,008 keys): 125,008 x 256 x 0.5 +
//     (16 x 256 + 256) x 2 = 16,009,728 B = 2.00122 + 8
//     all-to-all over 8 of 16 heads x (128 x 2 B + 4 B LSE) = 4,160 B: 6.3 + 7/8 x 4,160 / 900e9
//     merge of 2 heads x (8 x 260 + 256) B = 4,672 B: 2 + 0.00058
//     two all-reduces as tp=64; RoPE over 2,176 columns (8,704 B); norms, adds, SwiGLU as tp=64
//   = 68.54 a layer, 8.647 ms the step.
// HOP-B at B = 2 (kvp=8,tpa=8): a chunk of one sequence costs a = 10.00122 (attention), c = 6.30404
// (all-to-all), m = 2.00058 (merge). One chunk of both: 2 x 2.00122 + 8 = 12.00244, 6.3 + 2 x
// 0.00404 = 6.30809, 2 + 2 x 0.00058 = 2.00117: 20.31170, under the two-chunk schedule's 28.30706
// (below), so on and off price the one chunk alike. Per request (Figure 3 taken literally): on runs
// a0; a1 while c0 (c0 ends at 16.30526); m0 at 20.00244 -> 22.00302; c1 from 20.00244 to 26.30648;
// m1 -> 28.30706; off runs a0, a1, c0, c1, m0, m1 = 36.61169: off - on = c + m = 8.30463 a layer.
TEST(HelixPricing, PerKernelFixedCostsByHand) {
  const double S = 1e6, bw = 8e12, lat = 6.3e-6;
  const double us = 1e-6;
  auto bytes = [&](double b) { return b / bw; };
  const double ar = 6.3 * us + 2 * 63.0 / 64 * 32768 / 900e9;
  const double gemms_common = 3 * 6 * us + bytes(2097152 + 512 + 32768) + bytes(13631488 + 32768 + 3328) +
                              bytes(6815744 + 1664 + 32768);
  const double elem_common = 2 * (2.5 * us + bytes(65536)) + 2 * bytes(98304) + (2 * us + bytes(4992));
  const double ends = 0.62 * us + bytes(65536) + 2.5 * us + bytes(65536) + 6 * us + bytes(16416768 + 32768 + 4008);
  const double tp_layer = gemms_common + 6 * us + bytes(4194304 + 32768 + 1024) + 8 * us + bytes(128001536) +
                          2 * ar + elem_common + 1.25 * us + bytes(1536);
  const double a1 = 8 * us + bytes(16009728), c1 = lat + 7.0 / 8 * 4160 / 900e9, m1 = 2 * us + bytes(4672);
  const double helix_rest = gemms_common + 6 * us + bytes(18874368 + 32768 + 4608) + 2 * ar + elem_common + 1.25 * us +
                            bytes(8704);
  CostModelOptions o;
  o.weight_dtype = SimDType::FP4;
  o.kv_bytes = 0.5;
  o.hopb_max_chunks = 1 << 20;
  const CostModel cm(find_model("llama-3-405b"), parse_node("gb200x72"), o, helix_paper_calibration(lat));
  const StepCost tp = cm.price(cm.prepare(Plan::parse("tp=64")), decode_batch(1, int(S)));
  EXPECT_NEAR(tp.total_s, 126 * tp_layer + ends, 1e-4 * tp.total_s);
  EXPECT_NEAR(tp.total_s * 1e3, 9.133, 0.001);
  const StepCost hx = cm.price(cm.prepare(Plan::parse("kvp=8,tpa=8")), decode_batch(1, int(S)));
  EXPECT_NEAR(hx.total_s, 126 * (helix_rest + a1 + c1 + m1) + ends, 1e-4 * hx.total_s);
  EXPECT_NEAR(hx.total_s * 1e3, 8.647, 0.001);
  EXPECT_NEAR(hx.attention_s / 126, a1, 1e-4 * a1);
  // B = 2: one chunk (the cheapest), on and off alike.
  const double a2 = 8 * us + 2 * bytes(16009728), c2 = lat + 2 * 7.0 / 8 * 4160 / 900e9, m2 = 2 * us + 2 * bytes(4672);
  const StepCost on2 = cm.price(cm.prepare(Plan::parse("kvp=8,tpa=8")), decode_batch(2, int(S)));
  const StepCost off2 = cm.price(cm.prepare(Plan::parse("kvp=8,tpa=8,hopb=off")), decode_batch(2, int(S)));
  EXPECT_NEAR(on2.attention_s / 126, a2, 1e-4 * a2);
  EXPECT_DOUBLE_EQ(on2.total_s, off2.total_s);
  EXPECT_LT(a2 + c2 + m2, 28.30706 * us);
  // Per request: on hides the first chunk's all-to-all and merge, off exposes them.
  o.hopb_per_request = true;
  const CostModel per(find_model("llama-3-405b"), parse_node("gb200x72"), o, helix_paper_calibration(lat));
  const StepCost pon = per.price(per.prepare(Plan::parse("kvp=8,tpa=8")), decode_batch(2, int(S)));
  const StepCost poff = per.price(per.prepare(Plan::parse("kvp=8,tpa=8,hopb=off")), decode_batch(2, int(S)));
  EXPECT_NEAR(((poff.total_s - pon.total_s) / 126) / us, 8.30463, 1e-4);
  EXPECT_NEAR(pon.attention_s / 126, 2 * a1, 1e-4 * a1);  // one attention kernel per request
}

// Figure 7: turning HOP-B off never helps (it only changes the schedule).
TEST(HelixExperiments, Fig7HopBOffNeverHelps) {
  const ExperimentResult& r = cached_experiment("helix-fig7");
  for (const char* model : {"deepseek-r1", "llama-3-405b"}) {
    const auto& loss = row(r, "tok_s_user_loss_pct", model);
    EXPECT_GE(loss.simulated, 0.0) << model;
    EXPECT_LT(loss.simulated, 100.0) << model;
  }
}

}  // namespace
}  // namespace loom::sim
