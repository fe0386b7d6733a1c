#!/usr/bin/env bash
# CPU speed of loom's engine (issue 16), both numerics modes, for the synthetic llama-3.2-1b (written
# by `loom synth` on first use into models/) and any GGUF given on the command line:
#   decode tok/s (64 tokens)       and weight bytes per token over time as a fraction of the
#                                  machine's memcpy bandwidth (bench_kernels' roofline line);
#   prefill tok/s (512 tokens)     and 2 * params * tokens / time as a fraction of the measured
#                                  peak f32 FMA FLOP/s (no AMX on machines without it);
#   batched decode output tok/s    at 1, 8, 32, 128 sequences (`loom bench offline`), and the
#                                  ratio to batch 1.
# Prints ratios measured in one run (the machine may be shared: say the load beside them).
#
#   bench/cpu_speed.sh [--threads T] [--dtypes "q8_0 bf16 f16"] [MODEL.gguf ...]
#   LLAMA_CPP_DIR=... bench/llama_cpp_compare.sh MODEL.gguf   (llama.cpp side by side)
set -euo pipefail
cd "$(dirname "$0")/.."
LOOM=${LOOM:-build/loom}
BENCH_KERNELS=${BENCH_KERNELS:-build/bench/bench_kernels}
T=2
DTYPES="q8_0 bf16 f16"
MODELS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) T=$2; shift 2 ;;
    --dtypes) DTYPES=$2; shift 2 ;;
    *) MODELS+=("$1"); shift ;;
  esac
done
[ -x "$LOOM" ] || { echo "build $LOOM first (make, or cmake --build build --target loom)"; exit 2; }
if [ ${#MODELS[@]} -eq 0 ]; then
  mkdir -p models
  for dt in $DTYPES; do
    f=models/synth-llama-3.2-1b-$dt.gguf
    [ -f "$f" ] || "$LOOM" synth --shape llama-3.2-1b --dtype "$dt" --format gguf -o "$f" >/dev/null
    MODELS+=("$f")
  done
fi
echo "load: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores; threads $T"
MEMCPY=0; PEAK=0
if [ -x "$BENCH_KERNELS" ]; then
  line=$("$BENCH_KERNELS" --rows 256 --cols 1024 --tokens 8 --stream-mib 64 --rounds 1 --dtypes f32 | grep '^roofline now')
  MEMCPY=$(echo "$line" | sed -E 's/.*2T ([0-9.]+) GB\/s.*/\1/')
  PEAK=$(echo "$line" | sed -E 's/.*, 2T ([0-9.]+) GFLOP\/s.*/\1/')
  echo "roofline: memcpy ${MEMCPY} GB/s, peak f32 FMA ${PEAK} GFLOP/s (2 threads)"
fi
PROMPT512=$(python3 -c 'print(" ".join(["the quick brown fox jumps over the lazy dog"] * 60))')
for m in "${MODELS[@]}"; do
  info=$("$LOOM" info "$m")
  bytes=$(echo "$info" | sed -nE 's/^weights: +([0-9]+) bytes.*/\1/p')
  params=$(echo "$info" | sed -nE 's/^parameters: +([0-9]+).*/\1/p')
  echo "== $m (${bytes:-?} weight bytes, ${params:-?} parameters)"
  for num in exact fast; do
    out=$("$LOOM" generate --model "$m" --prompt "Once upon a time" -n 64 --threads "$T" --numerics $num 2>&1 >/dev/null | tail -1)
    dec=$(echo "$out" | sed -nE 's/.*generated at ([0-9.]+) tok\/s.*/\1/p')
    out=$("$LOOM" generate --model "$m" --prompt "$PROMPT512" -n 1 --threads "$T" --numerics $num 2>&1 >/dev/null | tail -1)
    pre=$(echo "$out" | sed -nE 's/.*\[([0-9]+) prompt tokens at ([0-9.]+) tok\/s.*/\2/p')
    batched=""
    b1=""
    for b in 1 8 32 128; do
      tp=$("$LOOM" bench offline --model "$m" --synthetic batch --num-requests $b --prompt-len 16 --output-len 32 \
             --max-num-seqs $b --threads "$T" --numerics $num 2>&1 | sed -nE 's/.*\(([0-9.]+) input, ([0-9.]+) output\).*/\2/p')
      [ -z "$b1" ] && b1=$tp
      batched="$batched b$b=${tp} ($(python3 -c "print(f'{float(\"$tp\")/float(\"$b1\"):.2f}x')" 2>/dev/null || echo ?))"
    done
    python3 - "$num" "$dec" "$pre" "${bytes:-0}" "${params:-0}" "$MEMCPY" "$PEAK" "$batched" <<'PY'
import sys
num, dec, pre, nbytes, params, memcpy, peak, batched = sys.argv[1:]
f = lambda s: float(s) if s else 0.0
dec, pre, nbytes, params, memcpy, peak = map(f, (dec, pre, nbytes, params, memcpy, peak))
bw = dec * nbytes / 1e9
fl = pre * 2 * params / 1e9
print(f"  {num:5s} decode {dec:7.2f} tok/s ({bw:.1f} GB/s of weights" + (f", {bw / memcpy:.2f} of memcpy)" if memcpy else ")")
      + f"  prefill {pre:7.1f} tok/s ({fl:.1f} GFLOP/s" + (f", {fl / peak:.2f} of FMA peak)" if peak else ")"))
print(f"        batched output tok/s:{batched}")
PY
  done
done
