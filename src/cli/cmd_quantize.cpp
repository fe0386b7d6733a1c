// `loom quantize IN OUT --type T`: a GGUF file in one of the type mixes llama-quantize writes
// (model/quantize.h), from an f32 / f16 / bf16 GGUF or HF safetensors model.
#include <cstdio>
#include <memory>

#include "cli/cli.h"
#include "core/error.h"
#include "model/quantize.h"

namespace loom::cli {

void register_quantize(CLI::App& app) {
  struct Args {
    std::string in, out, type;
    int threads = 0;
  };
  auto args = std::make_shared<Args>();
  std::string names;
  for (auto& n : quant_scheme_names()) names += (names.empty() ? "" : ", ") + n;
  CLI::App* sub = app.add_subcommand("quantize", "Write a GGUF model in llama-quantize's type mixes (q4_k_m, ...)");
  sub->add_option("input", args->in, "Model to read: GGUF, or HF safetensors (directory or file); f32/f16/bf16 weights")
      ->required();
  sub->add_option("output", args->out, "GGUF file to write")->required();
  sub->add_option("--type", args->type, "Type: " + names)->required();
  sub->add_option("--threads", args->threads, "Threads quantizing (0: all)")->capture_default_str();
  set_action(sub, [args] {
    const QuantScheme s = parse_quant_scheme(args->type);
    const QuantizeResult r = quantize_model(args->in, args->out, s, args->threads);
    std::string mix;
    for (const auto& [t, n] : r.tensors) mix += cat(mix.empty() ? "" : ", ", n, " ", dtype_name(t));
    std::printf("wrote %s: %s, %lld -> %lld weight bytes (%s) in %.2f s\n", args->out.c_str(), s.name.c_str(),
                static_cast<long long>(r.bytes_in), static_cast<long long>(r.bytes_out), mix.c_str(), r.seconds);
  });
}

}  // namespace loom::cli
