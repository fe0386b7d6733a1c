#!/bin/sh
# Distributed `loom generate` streams its output (issue 19, defect 14): under mpirun with two
# ranks, text reaches stdout while the job runs. The check: as soon as generated text is on
# stdout, rank 1 is killed (SIGKILL). The job must then fail (it was still running, so the text
# was not printed at the end), and what was printed before the kill must be there: the first
# prompt followed by generated text. (Before the fix nothing was printed until every prompt had
# finished, so the kill came after the run and the job exited 0.)
# Usage: mpi_generate_streams.sh LOOM MODEL MPIRUN [MPIRUN ARGS...]
set -u
loom=$1 model=$2
shift 2
if [ ! -e "$model" ]; then echo "skip: $model is missing (../shared not beside the checkout)"; exit 77; fi
tmp=$(mktemp -d)
. "$(dirname "$0")/../mpi_rank_pid.sh"
trap 'rm -rf "$tmp"' EXIT
"$@" -x LOOM_TEST_TAG -np 2 "$loom" generate -m "$model" -n 480 --comm mpi --plan tp=2 \
  -p "Once upon a time" -p "Tom" -p "The sun was hot" -p "Lily and Ben" >"$tmp/out" 2>"$tmp/err" &
job=$!
victim=""
for _ in $(seq 1 1200); do
  # More than the first prompt's text: a generated token is out.
  if [ "$(wc -c < "$tmp/out")" -gt 20 ]; then
    victim=$(rank_pid "generate -m $model" 1)  # rank 1 of this job
    break
  fi
  kill -0 $job 2>/dev/null || break
  sleep 0.05
done
if [ -z "$victim" ]; then
  wait $job
  echo "FAIL: no generated text on stdout while the job ran (output is not streamed), or rank 1 not found"
  cat "$tmp/out" "$tmp/err"
  exit 1
fi
printed=$(wc -c < "$tmp/out")
lines=$(wc -l < "$tmp/out")
kill -9 "$victim"
if [ "$lines" -ge 4 ]; then
  echo "FAIL: all 4 prompts' text was on stdout before the first check: printed at the end, not streamed"
  exit 1
fi
wait $job
rc=$?
if [ $rc -eq 0 ]; then echo "FAIL: the job exited 0 although rank 1 was killed after $printed bytes"; exit 1; fi
if ! head -c 16 "$tmp/out" | grep -q "Once upon a time"; then
  echo "FAIL: stdout does not start with the first prompt:"; head -c 200 "$tmp/out"; exit 1
fi
echo "OK: $printed bytes of text were on stdout while the job ran; after rank 1 was killed the job failed ($rc) and kept them"
