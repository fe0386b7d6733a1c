#!/bin/sh
# `loom bench offline --comm mpi` under mpirun: the report comes from world rank 0 only and
# counts the same requests and tokens as the one-rank run.
#   mpi_bench_offline.sh LOOM MODEL NP PLAN POLICY WORK MPIRUN...
set -eu
loom=$1; model=$2; np=$3; plan=$4; policy=$5; work=$6
shift 6
mkdir -p "$work"
w="--synthetic batch -n 6 --prompt-len 11 --output-len 5 --seed 2 -q"
# shellcheck disable=SC2086
"$loom" bench offline -m "$model" $w --output-json "$work/one.json"
# shellcheck disable=SC2086
"$@" -np "$np" "$loom" bench offline -m "$model" $w --plan "$plan" --policy "$policy" --comm mpi --ranks 0 --output-json "$work/mpi.json" \
  > "$work/mpi.out" 2>&1 || { cat "$work/mpi.out"; echo "FAIL: mpirun exited non-zero"; exit 1; }
field() { sed -n "s/.*\"$2\": *\([0-9]*\).*/\1/p" "$1" | head -n 1; }
for f in num_completed num_output_tokens num_prompt_tokens; do
  a=$(field "$work/one.json" "$f"); b=$(field "$work/mpi.json" "$f")
  [ -n "$a" ] && [ "$a" = "$b" ] || { echo "FAIL: $f one rank $a, mpi $b"; exit 1; }
done
grep -q "\"comm\": \"mpi\"" "$work/mpi.json" || { echo "FAIL: the report does not say comm mpi"; exit 1; }
echo "mpi bench offline $plan ($policy): same counts as one rank"
