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

// The Figure 5-7 pricing (helix_paper_calibration) is the roofline at the datasheet figures: a
// GEMM is max(FLOPs / FP4 peak, bytes / MemBW), a collective its latency plus its bytes on the
// link, and a decode step's KV read is Appendix A's T_KV (Figure 1's Q = 128, K = 8, Hsz = 128 are
// Llama-405B's), under TP and under Helix.
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
    EXPECT_NEAR(cm.gemm_s(m, 16384, 16384, SimDType::FP4, 0.5, 2), std::max(2 * m * 16384 * 16384 / flops, bytes / bw),
                1e-15) << m;
  }
  EXPECT_NEAR(cm.collective_s(Collective::AllToAll, 1e6, 8, 8), lat + 7.0 / 8 * 1e6 / link, 1e-15);
  EXPECT_NEAR(cm.collective_s(Collective::AllReduce, 1e6, 64, 64), lat + 2 * 63.0 / 64 * 1e6 / link, 1e-15);
  // The KV read of 8 sequences at S = 1M, per layer: T_KV plus the few activation bytes (the query,
  // the new K and V, the output) and block rounding: under 0.1%.
  for (const auto& [plan, tpa, kvp] : {std::tuple{"tp=8", 8, 1}, std::tuple{"kvp=8,tpa=8", 8, 8}}) {
    HelixRoofline h;
    h.batch = 8, h.tpa = tpa, h.kvp = kvp;
    const double t_kv = helix_t_kv(h);
    const PricedPlan pl = cm.prepare(Plan::parse(plan));
    // Helix: 62,500 blocks of 16 tokens over 8 KVP ranks, the busiest holding 7,813 (+0.006%).
    const double attn = cm.price(pl, decode_batch(8, 1000000)).attention_s / 126;
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
  EXPECT_DOUBLE_EQ(cm.price(off, decode_batch(4, 100000)).comm_s, cm.price(off, decode_batch(4, 1 << 20)).comm_s);
  // It grows with the batch (B x H/N partials plus LSE).
  EXPECT_LT(cm.price(off, decode_batch(4, 100000)).comm_s, cm.price(off, decode_batch(64, 100000)).comm_s);
}

// HOP-B hides all-to-all time behind attention: never slower (only the schedule changes), and
// when the all-to-all carries real bytes (a PCIe node, a large batch) it leaves only the last
// chunk's exposed: at most 1/8 of the bandwidth part plus one latency.
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
  const double exposed_on = pcie.price(pon, batch).comm_s, exposed_off = pcie.price(poff, batch).comm_s;
  EXPECT_LT(exposed_on, exposed_off);
  // Per layer the off schedule exposes one whole all-to-all, the on schedule one chunk's: the
  // difference is the 7/8 of the all-to-all's bandwidth term (collective latencies cancel).
  const double a2a_all = pcie.collective_s(Collective::AllToAll, 64 * 32 * (128 * 2.0 + 4), 4, 4);
  const double a2a_chunk = pcie.collective_s(Collective::AllToAll, 8 * 32 * (128 * 2.0 + 4), 4, 4);
  EXPECT_NEAR((exposed_off - exposed_on) / 80, a2a_all - a2a_chunk, 1e-9);
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
      paper::KnownMiss{2.0412, "the baseline's best TTL (tp=64, B=1, 3.07 ms) is 72% the read of the whole 1M-token "
                               "latent on every GPU; Helix's (kvp=64, B=1, 1.5 ms) is 77% collective latency (all-to-all, "
                               "W_O all-reduce, expert all-gather per layer); 1.5x would need a 12 us collective latency, "
                               "at which Llama's Figure 6 gain falls to 1.0x"}}},
    {"helix-fig5", "tok_s_gpu_gain_same_interactivity", "helix/baseline", 32.0,
     {"helix-fig5 DeepSeek-R1 tokens/s/GPU at equal interactivity", 32.0 * 0.85, 32.0 * 1.15,
      "3.2: DeepSeek-R1 \"up to 32x more concurrent users (i.e., achieves 32x higher Tokens/s/GPU)\""}},
    {"helix-fig6", "interactivity_gain", "helix/baseline", 1.13,
     {"helix-fig6 Llama-405B interactivity gain", 1.0, 1.13 * 1.15,
      "3.2: Llama-405B \"1.13x improvement in maximum achievable interactivity\" (band: > 1, +15%)"}},
    {"helix-fig6", "tok_s_gpu_gain_same_interactivity", "helix/baseline", 4.0,
     {"helix-fig6 Llama-405B tokens/s/GPU at equal interactivity", 4.0 * 0.85, 4.0 * 1.15,
      "3.2: Llama-405B \"4x higher throughput and batch capacity compared to TP\"",
      paper::KnownMiss{3.1407, "at TP's best TTL (tp=64, B=1, 4.05 ms) Helix kvp=8,tpa=8 fits 3 sequences (3.87 ms); "
                               "the 4th needs 4.15 ms (each adds a 0.25 ms read of its 2 GB KV share)"}}},
    // Issue 31: the "4x" and "32x" as batch counts, the sequences Helix decodes within the
    // baseline's best TTL over the baseline's batch there (1), banded as the factors above.
    {"helix-fig5", "batch_gain_at_baseline_best_ttl", "helix/baseline", 32.0,
     {"helix-fig5 DeepSeek-R1 batch within the baseline's best TTL", 32.0 * 0.85, 32.0 * 1.15,
      "abstract: DeepSeek-R1 \"up to 32x larger batches under the same latency budget\"",
      paper::KnownMiss{27.0, "the baseline's best TTL (tp=64, B=1) is 3.07 ms; Helix kvp=64 decodes 27 sequences within "
                             "it, each adding a 1/64 share of its 1M-token latent read and 1/64 of its exchange"}}},
    {"helix-fig6", "batch_gain_at_baseline_best_ttl", "helix/baseline", 4.0,
     {"helix-fig6 Llama-405B batch within TP's best TTL", 4.0 * 0.85, 4.0 * 1.15,
      "3.2: Llama-405B \"4x higher throughput and batch capacity compared to TP\"",
      paper::KnownMiss{3.0, "at TP's best TTL (tp=64, B=1, 4.05 ms) Helix kvp=8,tpa=8 fits 3 sequences (3.87 ms); the "
                            "4th needs 4.15 ms"}}},
    {"helix-fig7", "tok_s_user_loss_pct", "llama-3-405b", 12.0,
     {"helix-fig7 Llama-405B HOP-B-off loss (%)", 10.0, 15.0,
      "3.3: HOP-B off \"reduce[s] Tokens/s/User by up to 12%\" (Llama-405B)",
      paper::KnownMiss{0.11796, "Llama's all-to-all carries B x 16 heads x 128 values per GPU (130 KB at B = 31: 0.13 us "
                                "at 900 GB/s) behind a 6.3 us latency; off is priced as one batched exchange, so HOP-B "
                                "hides only the bytes (HelixFig7.HandWorkedOperatingPoints)"}}},
    {"helix-fig7", "tok_s_user_loss_pct", "deepseek-r1", 1.0,
     {"helix-fig7 DeepSeek-R1 HOP-B-off loss (%)", 0.0, 3.0, "3.3: DeepSeek-R1 \"only ~1% degradation\"",
      paper::KnownMiss{11.045, "the same layout and batch lose only 2.3% TTL without HOP-B (same_layout_ttl_cost_pct), "
                               "but the largest loss at a fixed tokens/s/GPU falls where the frontier is flat (KV reads "
                               "grow with the batch as fast as the tokens do): a 2% TTL gap becomes an 11% "
                               "tokens/s/user gap"}}},
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
// Figure 7, worked by hand at the largest-loss points (HelixFig7.HandWorkedOperatingPoints below):
// a request's exchange bytes (3640 B leaving, 4 ns at 900 GB/s) against its 2.0 us KV read is 0.2%
// at any batch, so no bandwidth term makes Llama's 12%; DeepSeek's "~1% of end-to-end decode
// latency" is out of reach anywhere on its frontier even at zero latency (1.2% data time at the
// slowest point, kvp=16, B=129). The direction: communication is a larger share of Llama-405B's
// TTL, so HOP-B matters more there (3.3): Llama's loss minus DeepSeek's, in points, >= 0.
TEST(HelixPaperFactors, Fig7HopB) {
  check_factor(kPaperFactors[6]);
  check_factor(kPaperFactors[7]);
  const ExperimentResult& r = cached_experiment("helix-fig7");
  paper::expect_band({"helix-fig7 Llama-405B loss - DeepSeek-R1 loss (points)", 0.0, paper::kInf,
                      "3.3: HOP-B matters more for Llama-405B (~12%) than DeepSeek-R1 (~1%)",
                      paper::KnownMiss{-10.927, "reversed, for the two causes of the losses above"}},
                     row(r, "tok_s_user_loss_pct", "llama-3-405b").simulated -
                         row(r, "tok_s_user_loss_pct", "deepseek-r1").simulated);
}

// Figure 7 worked by hand at the two points the experiment's notes name (the largest-loss points of
// `loom sim experiment helix-fig7`), GB200 FP4 (KV 0.5 B/value, 8e12 B/s DRAM, 900e9 B/s NVLink,
// 6.3 us collective latency), S = 1M, per layer:
//
// Llama-405B, kvp=8,tpa=8 (N = 64), B = 31 (126 layers, Q=128, K=8, Hsz=128):
//   attention = T_KV = 31 x 2 x ceil(8/8) x 128 x 1e6/8 x 0.5 B / 8e12 = 62.0 us (2.0 us a request;
//   the query and output add 0.03 us);
//   all-to-all per GPU (2.2: B x H/N to each of the KVP-1 others, H = 128 x 128): its 16 heads x
//   (128 BF16 + one f32 LSE) = 4160 B a token, 128,960 B at B = 31, 7/8 of it leaves:
//   6.3 us + 0.125 us = 6.43 us; TTL 11.665 ms / 126 = 92.6 us, so the exchange is 6.9% of TTL
//   and its bytes 0.14%. HOP-B chunks: a one-request chunk's exchange (6.30 us) is 3x its attention
//   (2.0 us), so at most ~9 chunks fit under 62 us; the last chunk's exchange stays exposed. Hidden:
//   the bytes of all chunks but the last (27/31..1 of 0.125 us) = 0.12% of TTL (the 0.12% printed).
//   The ratio per request, bytes 3640 B / 900 GB/s = 4 ns against 2.0 us of KV read, does not depend
//   on B: no batch makes the bandwidth term of Llama's exchange 12% of TTL. The paper's Figure 3
//   draws each request's exchange at 0.6x its attention (1.2 vs 2 units) and HOP-B off as the sum
//   of the requests' exchanges (8 x 1.2 = 9.6); that is 150x this exchange's bytes per request, a
//   per-request cost the paper does not price anywhere we can read.
// DeepSeek-R1, kvp=32 (TPA = 1), B = 163 (61 layers, MLA 576 cached values, 128 heads):
//   attention = 163 x 576 x 0.5 B x 1e6/32 / 8e12 = 183.4 us, plus the absorbed BF16 query and
//   latent output, 163 x 128 x (576 + 512) x 2 B = 45.6 MB, 5.7 us: 189.1 us (1.16 us a request);
//   all-to-all: 128 heads x (128 BF16 after W_UV + f32 LSE) = 33,280 B a token, 5.42 MB, 31/32 of
//   it leaves: 6.3 us + 5.84 us = 12.1 us = 4.6% of the 264 us TTL per layer; HOP-B hides about the
//   bytes, 5.8 us = 2.2% of TTL (same_layout_ttl_cost_pct 2.28). The paper (3.3) puts the exchange
//   at ~1% of TTL with "latent projections, shared-expert computation, and multi-expert GEMMs
//   dominating"; here KV reads are 72% of TTL and GEMMs 14%. The 11% loss printed is not the
//   schedule's cost but the flat tail of the frontier (a 2% TTL gap at fixed tokens/s/GPU).
TEST(HelixFig7, HandWorkedOperatingPoints) {
  CostModelOptions o;
  o.weight_dtype = SimDType::FP4;
  o.kv_bytes = 0.5;
  o.hopb_max_chunks = 1 << 20;
  const double lat = 6.3e-6, link = 900e9, bw = 8e12, S = 1e6;
  struct Case {
    const char* model;
    const char* plan;
    int batch, layers, kvp;
    double kv_bytes_per_token_layer_rank;  // per KVP rank: (cached values) x 0.5 B
    double exchange_bytes_per_token;
    double activation_bytes_per_token;  // BF16 query and output of the rank's heads, new K/V
  };
  const Case cases[] = {
      {"llama-3-405b", "kvp=8,tpa=8", 31, 126, 8, 2 * 1 * 128 * 0.5, 16 * (128 * 2 + 4.0), (16 * 256 + 256) * 2.0},
      {"deepseek-r1", "kvp=32", 163, 61, 32, 576 * 0.5, 128 * (128 * 2 + 4.0), (128 * (576 + 512) + 576) * 2.0}};
  for (const Case& c : cases) {
    CostModel cm(find_model(c.model), parse_node("gb200x72"), o, helix_paper_calibration(lat));
    cm.set_arch(find_model_arch(c.model));
    const PricedPlan on = cm.prepare(Plan::parse(c.plan)), off = cm.prepare(Plan::parse(cat(c.plan, ",hopb=off")));
    const double bytes_s = double(c.kvp - 1) / c.kvp * c.batch * c.exchange_bytes_per_token / link;
    EXPECT_NEAR(cm.helix_exchange_s(on, c.batch), lat + bytes_s, 1e-12) << c.model;
    const StepCost s_on = cm.price(on, decode_batch(c.batch, int(S)));
    const StepCost s_off = cm.price(off, decode_batch(c.batch, int(S)));
    // Attention per layer: T_KV plus the BF16 query and output of each token's heads, plus block
    // rounding (62,500 blocks of 16 over the KVP ranks: under 0.1%).
    const double t_kv = c.batch * (c.kv_bytes_per_token_layer_rank * (S / c.kvp) + c.activation_bytes_per_token) / bw;
    EXPECT_GT(s_on.attention_s / c.layers, t_kv) << c.model;
    EXPECT_LT(s_on.attention_s / c.layers, t_kv * 1.001) << c.model;
    // HOP-B hides the bytes of every chunk but the last (8 chunks fit under the attention, the last
    // of ceil(B/8) requests) and never a latency.
    const double hidden = (s_off.total_s - s_on.total_s) / c.layers;
    EXPECT_GE(hidden, bytes_s * (1 - std::ceil(c.batch / 8.0) / c.batch) * (1 - 1e-9)) << c.model;
    EXPECT_LE(hidden, bytes_s * (1 + 1e-9)) << c.model;
  }
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
