// A model of any shape with seeded pseudo-random weights built in memory (no file): the GPU
// benchmark's llama-3.1-8b in bf16 (16 GB written in seconds by the host threads) and the tests'
// synthetic GQA models. Matrices uniform in [-1/sqrt(cols), 1/sqrt(cols)) (embedding [-1, 1)),
// norm weights 1, Qwen2 biases (when the config has them) small; f32, f16 or bf16 plain rows.
// Same (config, dtype, seed) -> the same bits, whatever the thread count.
#pragma once

#include <cstdint>
#include <memory>

#include "core/thread_pool.h"
#include "model/weights.h"

namespace loom {

std::shared_ptr<Model> random_model(const ModelConfig& config, DType dtype, uint64_t seed, ThreadPool* pool = nullptr);

}  // namespace loom
