#!/bin/sh
# loom synth writes GGUF files of several shapes and dtypes; Hugging Face's GGUF parser must
# open each and find the expected metadata and tensors.
#   run.sh LOOM_BIN NODE_DIR WORK_DIR
set -eu
loom=$1
export LOOM_NODE_DIR=$2
work=$3
here=$(dirname "$0")
[ -f "$LOOM_NODE_DIR/node_modules/@huggingface/gguf/package.json" ] || { echo "SKIP: @huggingface/gguf not installed"; exit 77; }
mkdir -p "$work"
check() {  # shape dtype arch d L H K F V ctx tied bias
  shape=$1; dt=$2; shift 2
  f="$work/$shape-$dt.gguf"
  "$loom" synth --shape "$shape" --dtype "$dt" --format gguf --seed 3 -o "$f" >/dev/null
  node "$here/gguf_check.mjs" "$f" "$@" "$(echo "$dt" | tr a-z A-Z)"
}
check tiny f32 llama 64 2 4 2 192 512 256 0 0
check tiny q8_0 llama 64 2 4 2 192 512 256 0 0
check tiny bf16 llama 64 2 4 2 192 512 256 0 0
check gqa-24x6 f16 llama 192 2 24 6 320 512 256 1 0
check small q8_0 llama 512 8 8 4 1536 4096 2048 1 0
# Qwen2 (QKV biases, byte-level BPE vocabulary), given by --dims.
f="$work/qwen2-f16.gguf"
"$loom" synth --dims d=128,layers=2,heads=4,kv_heads=2,ffn=256,vocab=1024,ctx=512,arch=qwen2,tok=qwen2,tied=0 \
  --dtype f16 --format gguf --seed 3 -o "$f" >/dev/null
node "$here/gguf_check.mjs" "$f" qwen2 128 2 4 2 256 1024 512 0 1 F16
