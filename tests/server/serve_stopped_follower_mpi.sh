#!/bin/sh
# Issue 36 under mpirun: `loom serve --comm mpi --plan tp=2`, idle, with its follower rank stopped
# (SIGSTOP). /health turns 503 naming the heartbeat within the stated time (a heartbeat every
# second while idle, 503 once one is out for --heartbeat-timeout 5 s: 6 s; polled up to 40 s,
# well inside LOOM_COMM_TIMEOUT_S = 60 so the engine is stalled, not dead), and 200 again once
# the follower continues (SIGCONT); then a completion is served. Before, /health said 200 for
# the whole 60 s of a stopped follower.
# Usage: serve_stopped_follower_mpi.sh LOOM MODEL MPIRUN [MPIRUN ARGS...]
set -u
loom=$1 model=$2
shift 2
if [ ! -e "$model" ]; then echo "skip: $model is missing (../shared not beside the checkout)"; exit 77; fi
command -v curl >/dev/null 2>&1 || { echo "skip: no curl"; exit 77; }
tmp=$(mktemp -d)
. "$(dirname "$0")/../mpi_rank_pid.sh"
export LOOM_COMM_TIMEOUT_S=60
"$@" -x LOOM_COMM_TIMEOUT_S -x LOOM_TEST_TAG -np 2 "$loom" serve -m "$model" --comm mpi --plan tp=2 --port 0 \
  --kv-cache-bytes 8000000 >"$tmp/out" 2>"$tmp/err" &
job=$!
victim=""
cleanup() {
  [ -n "$victim" ] && kill -CONT "$victim" 2>/dev/null
  kill "$job" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
for _ in $(seq 1 300); do grep -q listening "$tmp/out" && break; sleep 0.1; done
port=$(grep -o '127.0.0.1:[0-9]*' "$tmp/out" | head -1 | cut -d: -f2)
[ -n "$port" ] || { echo "FAIL: the server did not start"; cat "$tmp/err"; exit 1; }
health() { curl -s -o "$tmp/h" -w '%{http_code}' -m 5 "http://127.0.0.1:$port/health"; }
[ "$(health)" = 200 ] || { echo "FAIL: /health not 200 at start"; cat "$tmp/h"; exit 1; }
victim=$(rank_pid "serve -m $model" 1)
[ -n "$victim" ] || { echo "FAIL: rank 1 not found"; exit 1; }
kill -STOP "$victim"
start=$(date +%s)
code=""
for _ in $(seq 1 80); do
  code=$(health)
  [ "$code" = 503 ] && break
  sleep 0.5
done
[ "$code" = 503 ] || { echo "FAIL: /health still '$code' 40 s after rank 1 stopped"; exit 1; }
stalled=$(( $(date +%s) - start ))
grep -q "heartbeat" "$tmp/h" || { echo "FAIL: the 503 does not name the heartbeat:"; cat "$tmp/h"; exit 1; }
kill -CONT "$victim"
for _ in $(seq 1 60); do
  code=$(health)
  [ "$code" = 200 ] && break
  sleep 0.5
done
[ "$code" = 200 ] || { echo "FAIL: /health '$code' 30 s after rank 1 continued"; cat "$tmp/h"; exit 1; }
code=$(curl -s -o "$tmp/r" -w '%{http_code}' -m 30 -H 'Content-Type: application/json' \
  -d '{"prompt":"Once","max_tokens":5}' "http://127.0.0.1:$port/v1/completions")
[ "$code" = 200 ] || { echo "FAIL: completion after the follower continued got $code"; cat "$tmp/r"; exit 1; }
echo "OK: /health 503 about ${stalled} s after rank 1 stopped (heartbeat), 200 after it continued, then served"
