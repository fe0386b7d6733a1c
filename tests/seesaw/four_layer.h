// The synthetic model the Seesaw tests share (the thread tests and the MPI program): 4 layers,
// 8 query heads, 2 KV heads, f32, seed 13, so that pp=2, pp=4 and tp=2,pp=2 split it evenly.
// tests/seesaw/tests.cmake writes the same model with `loom synth` for the CLI runs.
#pragma once

#include <string>

#include "model/synth.h"

namespace loom::test {

inline void write_four_layer_model(const std::string& path) {
  SynthOptions o;
  o.shape = parse_synth_dims("d=64,layers=4,heads=8,kv_heads=2,head_dim=8,ffn=128,vocab=512,ctx=1024");
  o.dtype = DType::F32;
  o.seed = 13;
  o.threads = 1;
  write_synth_model(o, path);
}

}  // namespace loom::test
