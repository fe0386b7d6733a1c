#!/bin/sh
# `loom serve --policy nitsum --profile DIR` on a folder `loom profile` has just written (issue 15,
# Deliver 4: "on CPU ranks a profile `loom` measures"): the pool builds its planner's table from
# the folder's cost model, starts with a layout of the planner's (not a forced one), and its
# greedy completions equal a one-rank server's; /metrics counts them in their tier.
# Usage: serve_nitsum_profile.sh LOOM MODEL
set -u
loom=$1 model=$2
if [ ! -e "$model" ]; then echo "skip: $model is missing (../shared not beside the checkout)"; exit 77; fi
command -v curl >/dev/null 2>&1 || { echo "skip: no curl"; exit 77; }
tmp=$(mktemp -d)
one="" pool=""
cleanup() {
  [ -n "$one" ] && kill "$one" 2>/dev/null
  [ -n "$pool" ] && kill "$pool" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
port_of() {
  for _ in $(seq 1 600); do grep -q listening "$1" && break; sleep 0.1; done
  grep -o '127.0.0.1:[0-9]*' "$1" | head -1 | cut -d: -f2
}
ask() {  # PORT TAG: 3 greedy completions at once into $tmp/TAG.N
  pids=""
  for n in 1 2 3; do
    curl -s -m 120 -o "$tmp/$2.$n" -H 'Content-Type: application/json' \
      -d "{\"prompt\":\"Once upon a time $n\",\"max_tokens\":$((12 + 8 * n)),\"temperature\":0,\"ignore_eos\":true,\"tier\":\"chat\"}" \
      "http://127.0.0.1:$1/v1/completions" &
    pids="$pids $!"
  done
  for p in $pids; do wait "$p"; done
}
# A quick profile of this machine for the model's shapes, TP 1 and 2 (seconds).
"$loom" profile --quick -o "$tmp/prof" --model "$model" --shapes '' --dtypes f32 --tokens 1,4,16 --tp 1,2 \
  --ranks 2 --reps 3 --budget-mib 64 >"$tmp/profile.out" 2>&1 || { cat "$tmp/profile.out"; fail "loom profile failed"; }
[ -f "$tmp/prof/hardware.json" ] || fail "loom profile wrote no hardware.json"
"$loom" serve -m "$model" --port 0 --threads 1 --tiers "chat=60000/10000" >"$tmp/one.out" 2>&1 &
one=$!
p1=$(port_of "$tmp/one.out")
[ -n "$p1" ] || { cat "$tmp/one.out"; fail "the one-rank server did not start"; }
ask "$p1" one
kill "$one"; wait "$one" 2>/dev/null; one=""
"$loom" serve -m "$model" --ranks 2 --policy nitsum --profile "$tmp/prof" --threads 1 --port 0 \
  --tiers "chat=60000/10000" --pool-lengths 32/24 >"$tmp/pool.out" 2>&1 &
pool=$!
p2=$(port_of "$tmp/pool.out")
[ -n "$p2" ] || { cat "$tmp/pool.out"; fail "the pool did not start on the profile folder"; }
grep -q "the planner over the profile table" "$tmp/pool.out" || fail "not planned from the profile: $(cat "$tmp/pool.out")"
grep -q "first layout: t0:" "$tmp/pool.out" || fail "no planned first layout: $(cat "$tmp/pool.out")"
ask "$p2" pool
text_of() { sed -e 's/"created":[0-9]*//' -e 's/"id":"[^"]*"//' "$1"; }
for n in 1 2 3; do
  grep -q '"finish_reason":"length"' "$tmp/one.$n" || fail "one-rank answer $n: $(cat "$tmp/one.$n")"
  [ "$(text_of "$tmp/one.$n")" = "$(text_of "$tmp/pool.$n")" ] ||
    fail "request $n differs: pool $(cat "$tmp/pool.$n") vs one rank $(cat "$tmp/one.$n")"
done
curl -s "http://127.0.0.1:$p2/metrics" > "$tmp/metrics"
grep -Eq '^loom:tier_requests_finished_total\{model_name="[^"]*",tier="chat"\} 3$' "$tmp/metrics" ||
  fail "tier chat did not count 3 requests: $(grep tier_ "$tmp/metrics")"
kill -TERM "$pool"
wait "$pool" || fail "the pool exited non-zero after SIGTERM: $(tail -5 "$tmp/pool.out")"
pool=""
echo "OK: the pool planned from a loom profile folder ($(grep -o 'first layout: [^]]*' "$tmp/pool.out")); 3 greedy completions equal the one-rank server's"
