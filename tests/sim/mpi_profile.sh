#!/bin/sh
# `loom profile` under mpirun: after a local profile, `mpirun -np 2 loom profile --comm mpi`
# adds every collective measured over MPI (<collective>_cpu_mpi.csv, groups of 2 ranks), and the
# simulator then prices a 2-rank plan with the MPI collectives (`--comm mpi`).
# Usage: mpi_profile.sh LOOM MPIRUN [MPIRUN ARGS...]
set -eu
loom=$1
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$loom" synth --shape tiny --dtype f32 -o "$tmp/tiny.gguf" > /dev/null
"$loom" profile --quick -o "$tmp/p" --model "$tmp/tiny.gguf" --shapes '' --dtypes f32 --tokens 1,16 --tp 1,2 \
  --concurrent 1,2 --reps 3 --budget-mib 32 2> "$tmp/local.log"
"$@" -np 2 "$loom" profile --quick --comm mpi -o "$tmp/p" --reps 3 2> "$tmp/mpi.log"
for c in all_reduce all_gather all_to_all send_recv broadcast; do
  f="$tmp/p/${c}_cpu_mpi.csv"
  if [ ! -s "$f" ]; then
    echo "missing $f"; cat "$tmp/mpi.log"; exit 1
  fi
  if ! grep -q ",${c},2,2$" "$f"; then
    echo "$f has no row for 2 ranks:"; cat "$f"; exit 1
  fi
done
"$loom" sim run --model "$tmp/tiny.gguf" --hardware "$tmp/p" --comm mpi --plan tp=2 --synthetic batch \
  --num-requests 4 --prompt-len 16 --output-len 4 --json --quiet > "$tmp/run.json"
if ! grep -q '"calibration": ".*mpi collectives' "$tmp/run.json"; then
  echo "the simulation did not use the MPI collectives:"; cat "$tmp/run.json"; exit 1
fi
if ! grep -q '"num_completed": 4' "$tmp/run.json"; then
  echo "the simulation did not complete the requests:"; cat "$tmp/run.json"; exit 1
fi
echo "mpi profile ok"
