#!/bin/sh
# MPI exactness of Shift Parallelism: the greedy ids of a batch of prompts from
# `mpirun -np NP loom generate ... --plan PLAN --policy POLICY --comm mpi` must equal, prompt by
# prompt, the single-rank `loom generate` ids; and the run must have switched configs without
# moving KV (the engine's last stderr line).
# Usage: mpi_shift.sh LOOM MODEL NP PLAN N POLICY MPIRUN [MPIRUN ARGS...]
# Exit 77 (ctest skip) when the model file is missing (../shared not beside the checkout).
set -u
loom=$1 model=$2 np=$3 plan=$4 n=$5 policy=$6
shift 6
if [ ! -e "$model" ]; then
  echo "skip: $model is missing (../shared not beside the checkout)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# --prefill-chunk 16 and --shift-threshold 8: prefill chunks run the sp x tp base, small decode
# steps the shift config (Algorithm 2), on the same sequences.
set -- "$@" -np "$np" "$loom" generate -m "$model" -n "$n" --plan "$plan" --comm mpi --print-ids \
  --prefill-chunk 16 --policy "$policy" --shift-threshold 8 \
  -p "Once upon a time" \
  -p "Lily and Ben went to the park to play with a big red ball and a little blue kite" \
  -p "Tom" \
  -p "The sun was hot and the cat was sleepy, so she lay down under the old tree"
for p in "Once upon a time" \
         "Lily and Ben went to the park to play with a big red ball and a little blue kite" \
         "Tom" \
         "The sun was hot and the cat was sleepy, so she lay down under the old tree"; do
  "$loom" generate -m "$model" -n "$n" --threads 1 --print-ids -p "$p" > "$tmp/one.txt" 2> "$tmp/one.err" || {
    echo "single-rank loom generate failed:"; cat "$tmp/one.err"; exit 1; }
  grep '^ids:' "$tmp/one.txt" >> "$tmp/want.txt"
done
"$@" > "$tmp/got_all.txt" 2> "$tmp/got.err"
rc=$?
cat "$tmp/got.err"
if [ $rc -ne 0 ]; then
  echo "mpirun failed with status $rc"; cat "$tmp/got_all.txt"; exit 1
fi
grep '^ids:' "$tmp/got_all.txt" > "$tmp/got.txt"
if ! cmp -s "$tmp/want.txt" "$tmp/got.txt"; then
  echo "plan $plan --policy $policy on $np MPI ranks differs from single-rank generation:"
  diff "$tmp/want.txt" "$tmp/got.txt"
  exit 1
fi
if ! grep -Eq '\[shift: policy .*, [1-9][0-9]* base steps, [1-9][0-9]* shift steps, [1-9][0-9]* switches, 0 KV bytes moved\]' "$tmp/got.err"; then
  echo "expected both configs to run and switches to move 0 KV bytes"; exit 1
fi
echo "plan $plan --policy $policy on $np MPI ranks: same ids as single-rank"
