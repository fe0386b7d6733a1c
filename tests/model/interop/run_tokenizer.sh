#!/bin/sh
# loom synth --format safetensors writes tokenizer.json for byte-level BPE (Llama-3, Qwen2) and
# SentencePiece (Llama-2 layout) vocabularies; Hugging Face's tokenizers must load each and
# encode a fixed list of texts to the ids `loom tokenize` prints.
#   run_tokenizer.sh LOOM_BIN NODE_DIR WORK_DIR
set -eu
loom=$1
export LOOM_NODE_DIR=$2
work=$3
here=$(dirname "$0")
[ -f "$LOOM_NODE_DIR/node_modules/tokenizers/package.json" ] || { echo "SKIP: tokenizers not installed"; exit 77; }
# The binding is a prebuilt native module; a platform without one cannot run the check.
(cd "$LOOM_NODE_DIR" && node -e 'require("tokenizers")') >/dev/null 2>&1 || { echo "SKIP: tokenizers native module does not load here"; exit 77; }
mkdir -p "$work"
check() {  # name synth-args...
  name=$1; shift
  rm -rf "$work/$name"
  "$loom" synth "$@" --format safetensors --dtype f16 --seed 5 -o "$work/$name" >/dev/null
  node "$here/tokenizer_check.mjs" "$work/$name" "$loom"
}
check spm-tiny --shape tiny
check spm-gqa --shape gqa-24x6
check spm-2048 --dims d=64,layers=1,heads=4,kv_heads=2,ffn=128,vocab=2048,ctx=256,tok=spm
check bpe-llama3 --dims d=64,layers=1,heads=4,kv_heads=2,ffn=128,vocab=2048,ctx=256,tok=llama3
check bpe-qwen2 --dims d=64,layers=1,heads=4,kv_heads=2,ffn=128,vocab=2048,ctx=256,arch=qwen2,tok=qwen2,tied=0
