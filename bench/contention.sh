#!/usr/bin/env bash
# loom's threads on a shared machine (issue 34): decode tokens/s with one core kept busy by another
# process, for the default thread count and for 1..N threads, in alternating rounds; prints each
# count's median and the default's ratio to the best (target: >= 1/1.5). Not run by CI.
#   bench/contention.sh [LOOM] [ROUNDS]     (needs ../shared/models/stories260K)
set -euo pipefail
loom=${1:-build/loom}
rounds=${2:-3}
m=../shared/models/stories260K
[ -f "$m/stories260K.bin" ] || { echo "contention: no $m (../shared)"; exit 0; }
cores=$(nproc)
busy_core=$((cores - 1))
# The other process: a busy loop on the last core.
taskset -c "$busy_core" sh -c 'while :; do :; done' &
busy=$!
trap 'kill $busy 2>/dev/null' EXIT
rate() {  # tokens/s of one generate run with the given --threads (empty: the default)
  "$loom" generate --model "$m/stories260K.bin" --tokenizer "$m/tok512.bin" --prompt "Once upon a time" -n 256 \
    ${1:+--threads $1} 2>&1 >/dev/null | sed -n 's/.*generated at \([0-9.]*\) tok\/s.*/\1/p'
}
declare -A all
for r in $(seq 1 "$rounds"); do
  for t in default $(seq 1 "$cores"); do
    v=$(rate "$([ "$t" = default ] || echo "$t")")
    all[$t]="${all[$t]:-} $v"
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
echo "one core of $cores kept busy by another process; load $(cut -d' ' -f1 /proc/loadavg); $rounds alternating rounds"
best=0
for t in $(seq 1 "$cores"); do
  v=$(echo "${all[$t]}" | median)
  echo "  --threads $t: $v tok/s"
  best=$(awk -v a="$best" -v b="$v" 'BEGIN{print (b > a) ? b : a}')
done
d=$(echo "${all[default]}" | median)
echo "  default (the cores this process may use: $cores): $d tok/s"
awk -v d="$d" -v b="$best" 'BEGIN{printf "default / best = %.2f (target >= %.2f, i.e. within 1.5x)\n", d / b, 1 / 1.5}'
