// `loom info PATH`: format, config, tensor/parameter counts and dtype mix of any model loom loads.
#include <cstdio>
#include <memory>

#include "cli/cli.h"
#include "model/info.h"

namespace loom::cli {

void register_info(CLI::App& app) {
  struct Args {
    std::string path;
    bool tensors = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("info", "Describe a model file (llama2.c, GGUF, safetensors)");
  sub->add_option("path", args->path, "Model: .gguf / .bin file, *.safetensors file or HF directory")->required();
  sub->add_flag("--tensors", args->tensors, "Also list every tensor and metadata key");
  set_action(sub, [args] {
    const ModelSummary s = summarize_model(args->path);
    std::fputs(format_model_summary(s, args->tensors).c_str(), stdout);
  });
}

}  // namespace loom::cli
