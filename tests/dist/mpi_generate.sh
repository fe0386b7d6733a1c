#!/bin/sh
# MPI exactness check of the distributed engine: the greedy ids of a batch of prompts from
# `mpirun -np N loom generate ... --plan P --comm mpi` must equal, prompt by prompt, the ids of
# the single-rank, one-prompt-at-a-time `loom generate` (no --ranks/--plan: the generator path).
# POLICY "fixed" runs the plan as it is; any other (shift, alternate, random:SEED) runs Shift
# Parallelism with --shift-threshold 8 (prefill chunks run the sp x tp base, small decode steps
# the shift config, Algorithm 2, on the same sequences), and the run must then have used both
# configs and switched without moving KV (the engine's per-plan stderr lines).
# POLICY cycle:N runs a plan set (PLAN lists its plans separated by '/', e.g. tp=4/dp=2,tp=2/dp=4):
# the run must have switched and migrated KV between placements.
# POLICY seesaw:BYTES runs Seesaw's phase plans (PLAN: the prefill plan '/' the decode plan) with a
# CPU KV tier of BYTES and --max-model-len 64: at least three phase transitions are expected.
# Usage: mpi_generate.sh LOOM MODEL NP PLAN N POLICY MPIRUN [MPIRUN ARGS...]
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
# Prompts of different lengths: with --prefill-chunk 16 the long ones are prefilled in chunks
# while the short ones already decode.
what="plan $plan"
case "$policy" in
  fixed) set -- "$@" -np "$np" "$loom" generate ;;
  cycle:*) set -- "$@" -np "$np" "$loom" generate --policy "$policy"; what="plans $plan --policy $policy" ;;
  seesaw:*) set -- "$@" -np "$np" "$loom" generate --policy seesaw --cpu-kv-bytes "${policy#seesaw:}" --max-model-len 64
            what="plans $plan --policy $policy" ;;
  *) set -- "$@" -np "$np" "$loom" generate --policy "$policy" --shift-threshold 8; what="plan $plan --policy $policy" ;;
esac
rest=$plan
while [ -n "$rest" ]; do
  one=${rest%%/*}
  set -- "$@" --plan "$one"
  [ "$one" = "$rest" ] && rest="" || rest=${rest#*/}
done
set -- "$@" -m "$model" -n "$n" --comm mpi --print-ids \
  --prefill-chunk 16 \
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
start=$(date +%s)
"$@" > "$tmp/got_all.txt" 2> "$tmp/got.err"
rc=$?
end=$(date +%s)
cat "$tmp/got.err"
if [ $rc -ne 0 ]; then
  echo "mpirun failed with status $rc"; cat "$tmp/got_all.txt"; exit 1
fi
grep '^ids:' "$tmp/got_all.txt" > "$tmp/got.txt"
if ! cmp -s "$tmp/want.txt" "$tmp/got.txt"; then
  echo "$what on $np MPI ranks differs from single-rank generation:"
  diff "$tmp/want.txt" "$tmp/got.txt"
  exit 1
fi
if [ "${policy%%:*}" = seesaw ]; then
  # Seesaw phases: prefill under the first plan, decode under the second, the tier filled and
  # drained at least twice (three transitions; the four prompts are short: the threads test forces three cycles), every swapped-out sequence swapped back in.
  line=$(grep -E '^\[seesaw seesaw: [0-9]+ phase transitions' "$tmp/got.err")
  t=$(echo "$line" | sed -E 's/.*: ([0-9]+) phase transitions, ([0-9]+) sequences swapped out, ([0-9]+) in.*/\1 \2 \3/')
  set -- $t
  if [ -z "$line" ] || [ "$1" -lt 3 ] || [ "$2" -ne "$3" ] || [ "$2" -lt 1 ]; then
    echo "expected >= 3 phase transitions and as many swap-ins as swap-outs: $line"; exit 1
  fi
elif [ "${policy%%:*}" = cycle ]; then
  # Switches between placements: some plan's switches moved KV bytes.
  if ! grep -Eq '^\[policy .*: [1-9][0-9]* switches\]' "$tmp/got.err" ||
     ! grep -Eq '^\[plan [^ ]+: .* [1-9][0-9]* KV bytes moved' "$tmp/got.err"; then
    echo "expected the plan set to switch and migrate KV"; exit 1
  fi
elif [ "$policy" != fixed ]; then
  # The per-plan lines of the engine's summary: both configs ran steps, the policy switched, and
  # no switch moved KV (the base and its shift config share one placement).
  ran=$(grep -Ec '^\[plan [^ ]+: [1-9][0-9]* steps, [0-9]+ tokens, [0-9]+ switches in, 0 KV bytes moved' "$tmp/got.err")
  if [ "$ran" -ne 2 ] || ! grep -Eq '^\[policy .*: [1-9][0-9]* switches\]' "$tmp/got.err"; then
    echo "expected both configs to run, the policy to switch, and switches to move 0 KV bytes"; exit 1
  fi
fi
echo "$what on $np MPI ranks: $(wc -l < "$tmp/got.txt") prompts, same ids as single-rank ($((end - start)) s)"
