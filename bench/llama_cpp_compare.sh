#!/usr/bin/env bash
# loom against llama.cpp on the same GGUF files, side by side, in alternating runs (issues 16, 35).
# Nothing of llama.cpp is in this repository: point LLAMA_CPP_DIR at a llama.cpp build (its
# llama-bench in $LLAMA_CPP_DIR/build/bin, $LLAMA_CPP_DIR/bin or $LLAMA_CPP_DIR).
#
#   LLAMA_CPP_DIR=~/llama.cpp/build bench/llama_cpp_compare.sh [--threads 2] [--rounds 3] \
#       [--numerics "fast exact"] MODEL.gguf [MODEL.gguf ...]
#
# Per model and round, one after the other: llama-bench -p 512 -n 64 -r 1 (prompt and generation
# tok/s), then per loom numerics mode a 512-token prefill (`loom generate`, prompt of 512 tokens, no
# BOS, 1 generated) and a 64-token decode from a 1-token prompt (what llama-bench's tg64 does).
# Each round prints its figures and the load average beside them; the summary gives, per measure,
# the median over rounds of the round's loom / llama.cpp ratio, and best / best. The machine may be
# shared: compare rounds run at a low load.
set -euo pipefail
cd "$(dirname "$0")/.."
LOOM=${LOOM:-build/loom}
T=2
ROUNDS=3
NUMERICS="fast exact"
MODELS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) T=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --numerics) NUMERICS=$2; shift 2 ;;
    *) MODELS+=("$1"); shift ;;
  esac
done
[ -n "${LLAMA_CPP_DIR:-}" ] || { echo "set LLAMA_CPP_DIR to a llama.cpp build"; exit 2; }
LB=""
for c in "$LLAMA_CPP_DIR/build/bin/llama-bench" "$LLAMA_CPP_DIR/bin/llama-bench" "$LLAMA_CPP_DIR/llama-bench"; do
  [ -x "$c" ] && LB=$c && break
done
[ -n "$LB" ] || { echo "no llama-bench under $LLAMA_CPP_DIR (build/bin, bin, .)"; exit 2; }
[ ${#MODELS[@]} -gt 0 ] || { echo "usage: LLAMA_CPP_DIR=... $0 [--threads T] [--rounds R] MODEL.gguf ..."; exit 2; }
[ -x "$LOOM" ] || { echo "build $LOOM first"; exit 2; }
load() { cut -d' ' -f1 /proc/loadavg; }
echo "threads $T, rounds $ROUNDS, $(nproc) cores, llama-bench $LB"
RESULTS=$(mktemp)
trap 'rm -f "$RESULTS"' EXIT
for m in "${MODELS[@]}"; do
  # 512 prompt tokens: the prompt is grown until loom's tokenizer gives 512 ids (no BOS).
  words=128
  while :; do
    P=$(python3 -c "print(' '.join(['a'] * $words))")
    n=$("$LOOM" tokenize --model "$m" --text "$P" --no-bos | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
    if [ "$n" -ge 512 ] || [ "$words" -ge 4096 ]; then break; fi
    words=$((words * 512 / (n > 0 ? n : 1) + 1))
  done
  echo "== $m (prompt $n tokens)"
  for r in $(seq 1 "$ROUNDS"); do
    l0=$(load)
    lj=$("$LB" -m "$m" -p 512 -n 64 -r 1 -t "$T" -o json 2>/dev/null)
    read -r lpp ltg < <(python3 -c '
import json, sys
rows = json.loads(sys.stdin.read())
pp = [r["avg_ts"] for r in rows if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0]
tg = [r["avg_ts"] for r in rows if r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0]
print(pp[0] if pp else 0, tg[0] if tg else 0)' <<<"$lj")
    echo "  round $r (load $l0): llama.cpp prefill ${lpp} tok/s, decode ${ltg} tok/s"
    for num in $NUMERICS; do
      out=$("$LOOM" generate --model "$m" --prompt "$P" --no-bos -n 1 --threads "$T" --numerics "$num" 2>&1 >/dev/null | tail -1)
      pre=$(echo "$out" | sed -nE 's/.*\[([0-9]+) prompt tokens at ([0-9.]+) tok\/s.*/\2/p')
      ntok=$(echo "$out" | sed -nE 's/.*\[([0-9]+) prompt tokens.*/\1/p')
      out=$("$LOOM" generate --model "$m" --prompt "a" -n 64 --threads "$T" --numerics "$num" 2>&1 >/dev/null | tail -1)
      dec=$(echo "$out" | sed -nE 's/.*generated at ([0-9.]+) tok\/s.*/\1/p')
      echo "  round $r (load $(load)): loom $num prefill(${ntok:-?}) ${pre:-0} tok/s = $(python3 -c "print(f'{${pre:-0} / $lpp:.2f}x' if $lpp else '?')"), decode ${dec:-0} tok/s = $(python3 -c "print(f'{${dec:-0} / $ltg:.2f}x' if $ltg else '?')")"
      echo "$m $num $r ${pre:-0} ${dec:-0} $lpp $ltg" >>"$RESULTS"
    done
  done
done
echo "== summary: median over rounds of loom / llama.cpp (best / best)"
python3 - "$RESULTS" <<'EOF'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
keys = []
for m, num, *_ in rows:
    if (m, num) not in keys: keys.append((m, num))
for m, num in keys:
    rs = [list(map(float, r[3:])) for r in rows if r[0] == m and r[1] == num]
    pre = statistics.median(p / lp for p, d, lp, ld in rs if lp)
    dec = statistics.median(d / ld for p, d, lp, ld in rs if ld)
    bp = max(r[0] for r in rs) / max(r[2] for r in rs)
    bd = max(r[1] for r in rs) / max(r[3] for r in rs)
    print(f"{m} loom {num}: prefill {pre:.2f}x ({bp:.2f}x), decode {dec:.2f}x ({bd:.2f}x); "
          f"llama.cpp best {max(r[2] for r in rs):.1f} / {max(r[3] for r in rs):.2f} tok/s, "
          f"loom best {max(r[0] for r in rs):.1f} / {max(r[1] for r in rs):.2f} tok/s")
EOF
