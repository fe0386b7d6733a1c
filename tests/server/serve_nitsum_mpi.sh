#!/bin/sh
# Nitsum's pool under mpirun (issue 15): `loom serve --comm mpi --ranks 2 --policy nitsum` on 3
# processes (the control plane and two workers), forced layouts cycled every 5 ms between a
# prefill + decode pair (every request handed off) and one TP(2) instance (regroupings move the
# K/V by heads over MPI). Greedy completions (curl, concurrent) equal a one-rank server's, and so
# do the tokens of a request for logprobs.
# Usage: serve_nitsum_mpi.sh LOOM MODEL MPIRUN [MPIRUN ARGS...]
set -u
loom=$1 model=$2
shift 2
if [ ! -e "$model" ]; then echo "skip: $model is missing (../shared not beside the checkout)"; exit 77; fi
command -v curl >/dev/null 2>&1 || { echo "skip: no curl"; exit 77; }
tmp=$(mktemp -d)
. "$(dirname "$0")/../mpi_rank_pid.sh"
one="" job=""
cleanup() {
  [ -n "$one" ] && kill "$one" 2>/dev/null
  [ -n "$job" ] && kill "$job" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
port_of() {
  for _ in $(seq 1 600); do grep -q listening "$1" && break; sleep 0.1; done
  grep -o '127.0.0.1:[0-9]*' "$1" | head -1 | cut -d: -f2
}
ask() {  # PORT TAG: 6 greedy completions at once into $tmp/TAG.N
  pids=""
  for n in 1 2 3 4 5 6; do
    curl -s -m 120 -o "$tmp/$2.$n" -H 'Content-Type: application/json' \
      -d "{\"prompt\":\"Once upon a time $n\",\"max_tokens\":$((30 + 10 * n)),\"temperature\":0,\"ignore_eos\":true}" \
      "http://127.0.0.1:$1/v1/completions" &
    pids="$pids $!"
  done
  for p in $pids; do wait "$p"; done
}
"$loom" serve -m "$model" --port 0 --threads 1 >"$tmp/one.out" 2>&1 &
one=$!
p1=$(port_of "$tmp/one.out")
[ -n "$p1" ] || { cat "$tmp/one.out"; fail "the one-rank server did not start"; }
ask "$p1" one
# Logprobs (issue 19, defect 10): in the pool they come back to the control plane with the tokens.
ask_logprobs() {  # PORT TAG
  curl -s -m 120 -o "$tmp/$2.lp" -H 'Content-Type: application/json' \
    -d '{"prompt":"Once upon a time","max_tokens":12,"temperature":0,"ignore_eos":true,"logprobs":2}' \
    "http://127.0.0.1:$1/v1/completions"
}
ask_logprobs "$p1" one
kill "$one"; wait "$one" 2>/dev/null; one=""
# (--comm first: serve_dead_follower_mpi.sh, which may run beside this test, looks for its own
# ranks by "serve -m MODEL".)
"$@" -x LOOM_TEST_TAG -np 3 "$loom" serve --comm mpi -m "$model" --ranks 2 --policy nitsum --threads 1 --port 0 \
  --pool-layout prefill:tp1,decode:tp1 --pool-layout both:tp2 --window 0.005 >"$tmp/pool.out" 2>&1 &
job=$!
p2=$(port_of "$tmp/pool.out")
[ -n "$p2" ] || { cat "$tmp/pool.out"; fail "the pool did not start"; }
ask "$p2" pool
text_of() { sed -e 's/"created":[0-9]*//' -e 's/"id":"[^"]*"//' "$1"; }
for n in 1 2 3 4 5 6; do
  grep -q '"finish_reason":"length"' "$tmp/one.$n" || fail "one-rank answer $n: $(cat "$tmp/one.$n")"
  [ "$(text_of "$tmp/one.$n")" = "$(text_of "$tmp/pool.$n")" ] ||
    fail "request $n differs: pool $(cat "$tmp/pool.$n") vs one rank $(cat "$tmp/one.$n")"
done
ask_logprobs "$p2" pool
# Same tokens and text offsets as one rank (the values may differ in the last bits under tp2), 12 of
# each, and 12 top_logprobs objects of 2 entries.
field() { grep -o "\"$1\":\[[^]]*\]" "$2"; }
for f in tokens text_offset; do
  [ -n "$(field $f "$tmp/one.lp")" ] || fail "no $f in the one-rank answer: $(cat "$tmp/one.lp")"
  [ "$(field $f "$tmp/one.lp")" = "$(field $f "$tmp/pool.lp")" ] ||
    fail "logprobs $f differ: pool $(cat "$tmp/pool.lp") vs one rank $(cat "$tmp/one.lp")"
done
[ "$(field text_offset "$tmp/pool.lp" | tr ',' '\n' | wc -l)" -eq 12 ] || fail "not 12 tokens: $(cat "$tmp/pool.lp")"
[ "$(field token_logprobs "$tmp/pool.lp" | tr ',' '\n' | wc -l)" -eq 12 ] || fail "not 12 logprobs: $(cat "$tmp/pool.lp")"
[ "$(grep -o '"top_logprobs":\[{[^]]*\]' "$tmp/pool.lp" | grep -o '},{' | wc -l)" -eq 11 ] ||
  fail "not 12 top_logprobs objects: $(cat "$tmp/pool.lp")"
curl -s "http://127.0.0.1:$p2/metrics" > "$tmp/metrics"
grep -Eq '^loom:plan_switches_total\{model_name="[^"]*",plan="tp2@0"\} [1-9]' "$tmp/metrics" ||
  fail "no regrouping into tp2@0: $(grep plan_ "$tmp/metrics")"
# SIGTERM to the control plane (world rank 0) stops the server and every worker: the job exits 0.
rank0=$(rank_pid "serve --comm mpi -m $model" 0)
[ -n "$rank0" ] || fail "world rank 0 not found"
kill -TERM "$rank0"
wait "$job" || fail "the pool exited non-zero after SIGTERM to its control plane: $(tail -5 "$tmp/pool.out")"
job=""
echo "OK: 6 greedy completions from the MPI pool equal the one-rank server's"
