// `loom synth`: writes a deterministic synthetic model (model/synth.h).
#include <cstdio>
#include <memory>

#include "cli/cli.h"
#include "core/error.h"
#include "model/quantize.h"
#include "model/synth.h"

namespace loom::cli {

void register_synth(CLI::App& app) {
  struct Args {
    std::string shape, dims, dtype = "f16", format = "gguf", out;
    uint64_t seed = 0;
    int threads = 0;
  };
  auto args = std::make_shared<Args>();
  std::string names;
  for (auto& n : synth_shape_names()) names += (names.empty() ? "" : ", ") + n;
  CLI::App* sub = app.add_subcommand("synth", "Write a synthetic model with deterministic random weights");
  auto* shape = sub->add_option("--shape", args->shape, "Named shape: " + names);
  auto* dims = sub->add_option("--dims", args->dims,
                               "Custom shape: d=..,layers=..,heads=..,kv_heads=..,ffn=..,vocab=..,ctx=.. "
                               "[,head_dim=..,theta=..,eps=..,arch=llama|mistral|qwen2,tied=0|1,"
                               "tok=spm|llama3|qwen2|gpt2]");
  shape->excludes(dims);
  sub->add_option("--dtype", args->dtype,
                  "Weight dtype: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q6_k, or a llama-quantize mix q4_k_m, "
                  "q5_k_m (quantized types: gguf only; q4_0 .. q6_k as llama-quantize writes them, the classifier "
                  "Q6_K)")
      ->capture_default_str();
  sub->add_option("--format", args->format, "gguf (one file) or safetensors (a directory)")->capture_default_str();
  sub->add_option("--seed", args->seed, "Random seed (same seed -> identical bytes)")->capture_default_str();
  sub->add_option("--threads", args->threads, "Threads generating weights (0: all)")->capture_default_str();
  sub->add_option("-o,--output", args->out, "Output path: the .gguf file, or the safetensors directory")->required();
  set_action(sub, [args] {
    if (args->shape.empty() && args->dims.empty()) fail("loom synth: give --shape NAME or --dims ...");
    SynthOptions o;
    o.shape = args->dims.empty() ? synth_shape(args->shape) : parse_synth_dims(args->dims);
    if (is_quant_scheme(args->dtype) && dtype_is_quantized(parse_quant_scheme(args->dtype).base) &&
        parse_quant_scheme(args->dtype).name != "q8_0") {
      o.mix = parse_quant_scheme(args->dtype).name;  // a llama-quantize mix (model/quantize.h)
      o.dtype = parse_quant_scheme(args->dtype).base;
    } else {
      o.dtype = parse_dtype(args->dtype);
    }
    o.format = args->format;
    o.seed = args->seed;
    o.threads = args->threads;
    const SynthResult r = write_synth_model(o, args->out);
    std::printf("wrote %s: %s %s %s, %lld weight bytes in %.2f s (%.2f GB/s)\n", r.model_path.c_str(),
                o.shape.name.c_str(), args->format.c_str(), o.mix.empty() ? std::string(dtype_name(o.dtype)).c_str() : o.mix.c_str(),
                static_cast<long long>(r.bytes), r.seconds, r.seconds > 0 ? double(r.bytes) / r.seconds / 1e9 : 0.0);
  });
}

}  // namespace loom::cli
