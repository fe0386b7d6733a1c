// CPU kernels: the public entry points. Each optimised kernel dispatches once, at run time, on
// what the CPU has (AVX-512, AVX2+FMA, scalar) and has a naive reference beside it (`*_ref`)
// that tests compare against. Kernels take raw pointers, shapes and strides only: no model,
// rank or plan types.
//
// Shapes are written [rows, cols]; activations are f32 and row-major unless stated.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "core/weight_view.h"

namespace loom::kernels {

// ---------------------------------------------------------------- matmul (gemm / gemv)
// y[n, w.rows] = x[n, w.cols] . W^T   (y row i at y + i*ldy, x row i at x + i*ldx)
// W may be f32, f16, bf16, q8_0 or one of ggml's block types q4_0, q4_1, q5_0, q4_k, q5_k, q6_k
// (core/dtype.h), plain rows (possibly a strided row_block / col_block view; a K-quant col_block may
// start inside a super-block, WeightView::col_offset) or row tiles (core/weight_tiles.h, the
// engines' decode layout; same results bit for bit for n == 1 and for the packed gemm, n > 24).
// n == 1 is the decode gemv (memory-bound: streams W once); n > 1 is the prefill gemm
// (W tiles reused across rows of x). Work is split over output rows across the pool.
// accumulate: y += x . W^T instead of y = x . W^T.
// Numerics: every path uses exactly the reference's weights (f16/bf16 widen exactly, q8_0 is
// d*q, exact in f32) and f32 activations (no activation quantization), so results differ from
// matmul_ref, between paths, and between n == 1 and n > 1, only by the f32 summation order:
// |y - y_ref| <= (cols + 8) * 2^-24 * sum_k |x_k w_k| (tests/kernels/test_matmul.cpp).
//
// The block types q4_0 .. q6_k in exact mode: each row dequantized to f32 (exactly dequantize_row's
// values, which are ggml's), then the f32 kernel of the path: the same bits as matmul of the f32
// matrix of those values (kernels_quant_impl.h), so the same bound.
//
// Numerics modes (`numerics`): Numerics::exact is the above. Numerics::fast changes what the
// activations are for the quantized dtypes and bf16 (f32 and f16 weights compute exactly as in
// exact mode):
//  - q8_0: each token's x is quantized per 32-value block (the weight's blocks, so a block never
//    straddles a shard boundary: col_block of q8_0 starts on a block) to int8, as
//    quantize_activations_q8 states: amax = max|x_i|, d = amax / 127 (f32), q_i = round-to-even
//    (x_i * (127 / amax)) in [-127, 127] (q = 0, d = 0 for an all-zero block). Then, per output
//    (token t, row r), blocks in order:  s_b = sum_i q_w[i] * q_x[i] (exact, int32),
//    p_b = f32(d_w) * d_x (f32 product), acc = fmaf(float(s_b), p_b, acc)  (acc from 0; y = acc,
//    or y = y + acc when accumulating). Every path (scalar, AVX2, AVX-512 VNNI), n == 1 and n > 1,
//    plain rows and row tiles perform exactly these operations: the same bits.
//    Error against the exact product (matmul_ref), per output:
//      |y - y_ref| <= sum_b 0.5001 * d_x,b * sum_{i in b} |w_i|                (quantization of x:
//                       |x_i - d q_i| <= d/2, plus 127 * 2^-22 * d for the product x * (127/amax))
//                   + (nb + 2) * 2^-24 * sum_b |p_b * s_b|                       (f32 rounding)
//    and against matmul_fast_ref (the same quantization, summed in double) the second term alone.
//  - q4_0, q4_1, q5_0, q4_k, q5_k, q6_k: the same int8 activation blocks (xm = d_x * qsum per block
//    besides), then per output, per 32-weight sub-block b of the weights (its levels q, integer
//    sub-scales k, zero point, f32 scale a_b and min mn_b, kernels_quant_impl.h):
//    s_b = sum_i k_i (q_i - zero) q_x,i exact in int32, acc = fmaf(float(s_b), a_b * d_x, acc), and
//    for q4_1 / q4_k / q5_k accm = fmaf(mn_b, xm_b, accm); y = acc + accm. Every path (scalar, AVX2;
//    the AVX-512 path runs the AVX2 kernel), n == 1 and n > 1, plain rows, row tiles and views give
//    the same bits. Error against matmul_ref as for q8_0, with the f32 rounding term over the two
//    accumulations, (nb + 4) * 2^-24 * sum_b sum_i (|a_b k_i (q_i - zero)| + |mn_b|) (|x_i| + d_b)
//    (tests/kernels/test_matmul_quant.cpp).
//  - bf16: each x value is rounded to bf16 (round to nearest even; quantize_activations_bf16) and
//    multiplied with the bf16 weights as AVX512-BF16's vdpbf16ps does (products exact in f32):
//    per output 16 lane sums over 32-column chunks c, lane j taking, in this order,
//    fmaf(w[32c + j + 16], xb[32c + j + 16], a_j) then fmaf(w[32c + j], xb[32c + j], a_j), then
//    the tree ((a_j + a_{j+8}) pairs, then +4, +2, +1). Needs cols % 32 == 0 (else the call runs
//    in exact mode). Error against matmul_ref, per output:
//      |y - y_ref| <= (2^-9 + (cols + 8) * 2^-24 * (1 + 2^-9)) * sum_k |x_k w_k|  (rounding x:
//                       |x - bf16(x)| <= 2^-9 |x|; then the f32 sums of exact products)
//                   + 2^-126 * cols * max|w|   (vdpbf16ps flushes subnormal inputs and results)
//    and against matmul_fast_ref the f32-sum term alone. The scalar and AVX2 paths give the same
//    bits as each other (AVX2 from 2 tokens on runs batched kernels, kernels_avx2.cpp: q8_0 on 8-row
//    int8 panels with lane = row, 4 tokens per weight load; bf16 on 2-row x 4-token strips over
//    L1-sized column blocks; both perform the per-output operations above, in the same order); the AVX512-BF16 path gives them too unless an input or partial sum is
//    subnormal (the instruction flushes it; the others keep it). (The VNNI and AVX512-BF16 kernels
//    were compiled but not run where they were written: that machine had AVX2 only; the kernel
//    tests compare every path's bits with the scalar path's where they run.)
enum class Numerics { exact, fast };
void matmul(const float* x, int64_t n, int64_t ldx, const WeightView& w, float* y, int64_t ldy,
            ThreadPool* pool, bool accumulate = false, Numerics numerics = Numerics::exact);
void matmul_ref(const float* x, int64_t n, int64_t ldx, const WeightView& w, float* y, int64_t ldy,
                bool accumulate = false);
// The fast mode's reference: x quantized as stated above (q8_0 weights: int8 blocks, bf16
// weights: bf16 values; other dtypes: x unchanged), then the product summed in double.
void matmul_fast_ref(const float* x, int64_t n, int64_t ldx, const WeightView& w, float* y, int64_t ldy,
                     bool accumulate = false);
// Whether `numerics` changes what matmul computes for weights of `dtype` (fast: the quantized types
// and bf16).
bool numerics_applies(Numerics numerics, DType dtype);
// The activation quantization of the fast mode, one token row of `cols` values (cols % 32 == 0):
// q[cols], d[cols/32] (block scales), qsum[cols/32] (sum of each block's q).
void quantize_activations_q8(const float* x, int64_t cols, int8_t* q, float* d, int32_t* qsum);
// bf16 rounding of one value (round to nearest even; NaN stays NaN), and of a row.
uint16_t round_to_bf16(float x);
// "exact" or "fast".
const char* numerics_name(Numerics n);
// Parses "exact" / "fast"; throws loom::Error naming `what` and the value otherwise.
Numerics parse_numerics(const char* name, const char* what);
// The process default: LOOM_NUMERICS (exact|fast) if set, else fast; set_default_numerics (the
// CLI's --numerics) overrides it. Engines take it unless their options name a mode.
Numerics default_numerics();
void set_default_numerics(Numerics n);

// ---------------------------------------------------------------- elementwise
// out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * weight[:]   (out may alias x)
void rmsnorm(float* out, const float* x, const float* weight, int64_t n_tokens, int64_t dim, float eps);
void rmsnorm_ref(float* out, const float* x, const float* weight, int64_t n_tokens, int64_t dim, float eps);

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g))   (out may alias gate or up)
void swiglu(float* out, const float* gate, const float* up, int64_t n);
void swiglu_ref(float* out, const float* gate, const float* up, int64_t n);

// Adds bias[cols] to every row of x[n, cols] (row stride ldx).
void add_bias(float* x, int64_t n, int64_t ldx, const float* bias, int64_t cols);

// ---------------------------------------------------------------- RoPE
// Rotation frequencies of one head: inv_freq[i] = theta^(-2i/head_dim) for i < head_dim/2,
// with Llama-3 scaling applied when `llama3` is set (HF's "rope_type": "llama3").
struct RopeParams {
  int head_dim = 0;
  float theta = 10000.0f;
  bool interleaved = true;  // pairs (2i, 2i+1) (llama2.c, GGUF llama) vs (i, i + head_dim/2) (HF)
  bool llama3 = false;
  float factor = 1.0f, low_freq_factor = 1.0f, high_freq_factor = 4.0f;
  int original_max_position = 8192;
  // Per-frequency divisors as GGUF stores Llama-3 scaling (rope_freqs.weight, [head_dim/2]):
  // inv_freq[i] = theta^(-2i/head_dim) / freq_factors[i]. nullptr: none. Not combined with llama3.
  const float* freq_factors = nullptr;
};
// Fills inv_freq[head_dim/2].
void rope_inv_freq(const RopeParams& p, float* inv_freq);
// Rotates x[n_tokens, n_heads, head_dim] in place; token t is at position pos[t]; rows of x are
// ld floats apart (ld >= n_heads*head_dim). The angle pos * inv_freq is formed in double (it
// reaches 1e5 rad at long contexts), cos/sin rounded to f32.
void rope(float* x, int64_t n_tokens, int64_t ld, int n_heads, const int32_t* pos, const RopeParams& p);
void rope_ref(float* x, int64_t n_tokens, int64_t ld, int n_heads, const int32_t* pos, const RopeParams& p);

// ---------------------------------------------------------------- attention
// The K/V of one sequence, possibly paged. Element (pos, kv_head h, d) of K lives at
//   k[block_table[pos / block_size] * block_stride + h * head_stride + (pos % block_size) * head_dim + d]
// (head-major inside a block). A contiguous cache [n_ctx, n_kv_heads, head_dim] is the case
// block_table == nullptr, block_size = n_ctx, block index 0, head_stride = head_dim,
// and position stride n_kv_heads*head_dim: use KvView::contiguous().
struct KvView {
  const float* k = nullptr;
  const float* v = nullptr;
  const int32_t* block_table = nullptr;  // nullptr: one block
  int block_size = 0;                    // tokens per block
  int64_t block_stride = 0;              // floats between blocks
  int64_t head_stride = 0;               // floats between kv heads inside a block
  int64_t pos_stride = 0;                // floats between consecutive positions inside a block

  const float* k_at(int64_t pos, int h) const { return k + offset(pos, h); }
  const float* v_at(int64_t pos, int h) const { return v + offset(pos, h); }
  int64_t offset(int64_t pos, int h) const {
    const int64_t b = pos / block_size, o = pos % block_size;
    return (block_table ? int64_t(block_table[b]) : b) * block_stride + h * head_stride + o * pos_stride;
  }
  // K/V laid out [n_ctx, n_kv_heads, head_dim].
  static KvView contiguous(const float* k, const float* v, int n_kv_heads, int head_dim, int64_t n_ctx) {
    KvView kv;
    kv.k = k;
    kv.v = v;
    kv.block_size = int(n_ctx > 0 ? n_ctx : 1);
    kv.block_stride = 0;
    kv.head_stride = head_dim;
    kv.pos_stride = int64_t(n_kv_heads) * head_dim;
    return kv;
  }
};

struct AttentionShape {
  int n_heads = 0;     // query heads handled by this call
  int n_kv_heads = 0;  // KV heads in the view; query head q uses kv head q / (n_heads / n_kv_heads)
  int head_dim = 0;    // at most 512 (the optimised kernel keeps accumulators on the stack)
  float scale = 0.0f;  // usually 1/sqrt(head_dim)
};

// Causal attention for one sequence. Query token t (q row t, ldq floats apart, heads contiguous
// inside a row) at absolute position q_pos[t] attends keys at positions [kv_begin, q_pos[t]]
// (clipped to kv_end); out[t, n_heads, head_dim] (ldo floats apart) is the softmax-weighted sum of V.
// If lse != nullptr, lse[t * n_heads + h] = log(sum_j exp(score_j)) over the keys it saw, and
// `out` is the normalised partial output for those keys (Helix merges partials with
// merge_attention); a query that sees no key gets out = 0 and lse = -inf.
// Both prefill (many queries) and decode (one query) use this entry point; the pool splits
// over (query, head) pairs.
void attention(const float* q, int64_t n_q, int64_t ldq, const int32_t* q_pos, const KvView& kv,
               int64_t kv_begin, int64_t kv_end, const AttentionShape& s, float* out, int64_t ldo,
               float* lse, ThreadPool* pool);
void attention_ref(const float* q, int64_t n_q, int64_t ldq, const int32_t* q_pos, const KvView& kv,
                   int64_t kv_begin, int64_t kv_end, const AttentionShape& s, float* out, int64_t ldo,
                   float* lse);

// Helix 3 (log-sum-exp merge): combines n_parts partial outputs of the same (token, head) rows
// into one exact result: LSE = log sum_i exp(lse_i), out = sum_i exp(lse_i - LSE) * o_i.
// parts[i] points to [n_rows, head_dim], lses[i] to [n_rows]. out_lse may be nullptr.
void merge_attention(const float* const* parts, const float* const* lses, int n_parts, int64_t n_rows,
                     int head_dim, float* out, float* out_lse);

// ---------------------------------------------------------------- sampling
struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax, lowest index on ties)
  int top_k = 0;             // 0: off
  float top_p = 1.0f;        // 1: off
};
// Index of the largest logit (lowest index on ties).
int argmax(const float* logits, int n);
// Samples a token from logits[n] (not modified) with temperature, top-k then top-p, using the
// uniform draw u in [0, 1) (the caller owns the seeded Rng, so sequences repeat exactly).
// The exact procedure (sample and sample_ref return the same token for the same inputs):
//  0. temperature <= 0 or top_k == 1: argmax (lowest index on ties).
//  1. Order tokens by logit, descending, ties by lower index (a total order).
//  2. top_k > 0: keep the first min(top_k, n) of that order.
//  3. p_i = exp(logit_i / T - max_logit / T) in double over the kept set; total = their sum
//     taken in index order.
//  4. top_p < 1: keep the shortest prefix of the order (at least one token) whose cumulative
//     p_i / total, summed in that order, is >= top_p.
//  5. mass = sum of the kept p_i in index order; walk the kept tokens in index order and return
//     the first whose running sum of p_i exceeds u * mass (the last kept one if none does).
int sample(const float* logits, int n, const SamplingParams& p, float u);
int sample_ref(const float* logits, int n, const SamplingParams& p, float u);

// ---------------------------------------------------------------- CPU features
// What the CPU and the OS support (cpuid + xgetbv: the OS must save the ymm/zmm state).
struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false, avx512f = false, avx512bw = false;
  bool avx512vl = false, avx512dq = false, avx512_bf16 = false, avx512_vnni = false;
  bool amx_tile = false, amx_int8 = false, amx_bf16 = false;
};
const CpuFeatures& cpu_features();
// The kernel path chosen for this process: "avx512", "avx2" or "scalar". LOOM_KERNELS=scalar|avx2
// forces a lower one (tests use it to cover every path). The best path the CPU runs is used
// otherwise; a LOOM_KERNELS naming a path the CPU lacks falls back to the best it has, and an
// unknown name throws loom::Error on first use.
const char* kernel_path();
// The fast mode's kernels on the current path: "vnni" / "avx2" / "scalar" for q8_0, "avx512bf16" /
// "avx2" / "scalar" for bf16 (the AVX-512 path uses VNNI and AVX512-BF16 only where the CPU has them).
const char* fast_q8_kernel();
const char* fast_bf16_kernel();
// The fast mode's kernel of q4_0 .. q6_k on the current path: "vnni" / "avx2" / "scalar".
const char* fast_quant_kernel();
// Paths this CPU can run, lowest first (always starts with "scalar").
std::vector<const char*> available_kernel_paths();
// Tests and benchmarks: makes `path` the kernel path of this process (overrides LOOM_KERNELS).
// Throws loom::Error if the path is unknown or the CPU cannot run it. Call it only while no
// kernel runs.
void set_kernel_path_for_testing(const char* path);

}  // namespace loom::kernels
