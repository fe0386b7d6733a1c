#!/usr/bin/env bash
# loom against llama.cpp on the same GGUF files, side by side in one run (issue 16). Nothing of
# llama.cpp is in this repository: point LLAMA_CPP_DIR at a llama.cpp build (its llama-bench in
# $LLAMA_CPP_DIR/build/bin or $LLAMA_CPP_DIR/bin).
#
#   LLAMA_CPP_DIR=~/llama.cpp bench/llama_cpp_compare.sh [--threads 2] MODEL.gguf [MODEL.gguf ...]
#
# Per model: llama-bench -p 512 -n 64 -t T (prompt and generation tok/s) against loom generate
# (512-token prompt, then 64 generated tokens) in each numerics mode; prints loom / llama.cpp.
set -euo pipefail
cd "$(dirname "$0")/.."
LOOM=${LOOM:-build/loom}
T=2
MODELS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) T=$2; shift 2 ;;
    *) MODELS+=("$1"); shift ;;
  esac
done
[ -n "${LLAMA_CPP_DIR:-}" ] || { echo "set LLAMA_CPP_DIR to a llama.cpp build"; exit 2; }
LB=""
for c in "$LLAMA_CPP_DIR/build/bin/llama-bench" "$LLAMA_CPP_DIR/bin/llama-bench" "$LLAMA_CPP_DIR/llama-bench"; do
  [ -x "$c" ] && LB=$c && break
done
[ -n "$LB" ] || { echo "no llama-bench under $LLAMA_CPP_DIR (build/bin, bin)"; exit 2; }
[ ${#MODELS[@]} -gt 0 ] || { echo "usage: LLAMA_CPP_DIR=... $0 [--threads T] MODEL.gguf ..."; exit 2; }
PROMPT512=$(python3 -c 'print(" ".join(["the quick brown fox jumps over the lazy dog"] * 60))')
echo "load: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores; threads $T"
for m in "${MODELS[@]}"; do
  lj=$("$LB" -m "$m" -p 512 -n 64 -t "$T" -o json)
  read -r lpp ltg < <(python3 -c '
import json, sys
rows = json.loads(sys.stdin.read())
pp = [r["avg_ts"] for r in rows if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0]
tg = [r["avg_ts"] for r in rows if r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0]
print(pp[0] if pp else 0, tg[0] if tg else 0)' <<<"$lj")
  echo "== $m: llama.cpp prefill(512) ${lpp} tok/s, decode(64) ${ltg} tok/s"
  for num in exact fast; do
    out=$("$LOOM" generate --model "$m" --prompt "$PROMPT512" -n 64 --threads "$T" --numerics $num 2>&1 >/dev/null | tail -1)
    pre=$(echo "$out" | sed -nE 's/.*\[([0-9]+) prompt tokens at ([0-9.]+) tok\/s.*/\2/p')
    dec=$(echo "$out" | sed -nE 's/.*generated at ([0-9.]+) tok\/s.*/\1/p')
    python3 -c "
num, pre, dec, lpp, ltg = '$num', float('${pre:-0}'), float('${dec:-0}'), float('$lpp'), float('$ltg')
r = lambda a, b: f'{a / b:.2f}x' if b else '?'
print(f'  loom {num:5s}: prefill {pre:8.1f} tok/s = {r(pre, lpp)} llama.cpp, decode {dec:7.2f} tok/s = {r(dec, ltg)} llama.cpp')"
  done
done
