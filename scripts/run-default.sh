#!/usr/bin/env bash
# The main job of `make run` on the built-in default: a synthetic model that `loom synth` writes
# on first use (random weights, so its text is gibberish by design), then generation on it.
set -euo pipefail
loom=${1:-build/loom}
models=${LOOM_MODELS_DIR:-models}
model="$models/small-q8_0.gguf"
mkdir -p "$models"
if [ ! -f "$model" ]; then
  echo "== first run: writing the built-in default model with 'loom synth' -> $model"
  "$loom" synth --shape small --dtype q8_0 --format gguf --seed 1 -o "$model"
fi
"$loom" info "$model"
echo
echo "== loom generate (random weights: the text is gibberish by design)"
"$loom" generate --model "$model" --prompt "Once upon a time" -n 64 --temperature 0.8 --seed 7
echo
echo "== Shift Parallelism under a bursty load: 2 ranks (threads), base sp=2 for big steps, shift config"
echo "   (full TP over the same ranks, same KV placement) for small ones; 'plans:' counts the steps of each"
"$loom" bench offline --model "$model" --synthetic bursty:40:0.5:1.5 -n 24 --prompt-len 16:400 --output-len 8:24 \
  --use-arrivals --ranks 2 --plan sp=2 --policy shift --threads 1 --seed 1
echo
echo "== A plan set: the same 2 ranks switch between tp=2 and two DP replicas every 4 steps; each switch"
echo "   migrates the KV cache between the placements (per-plan steps, switches and KV bytes on stderr)"
"$loom" generate --model "$model" --prompt "Once upon a time" --prompt "The robot" -n 24 --temperature 0 \
  --plan tp=2 --plan dp=2 --policy cycle:4 --threads 1 > /dev/null
echo
echo "To run a real checkpoint, point --model at it, for example:"
echo "  $loom generate --model ../shared/models/stories260K/stories260K.bin --tokenizer ../shared/models/stories260K/tok512.bin --prompt 'Once upon a time' -n 200"
echo "  (GGUF files, and HF safetensors directories with config.json and tokenizer.json, load the same way.)"
