#!/bin/sh
# Issue 19, defect 4, under mpirun: `loom serve --comm mpi --plan tp=2` with its follower rank
# frozen (SIGSTOP). The next completion fails once the communicator timeout passes (500 naming
# the timeout, never a hang), the engine is dead, and the server shuts down: the job exits
# non-zero with "the engine failed; the server stopped" instead of answering 500 forever.
# Usage: serve_dead_follower_mpi.sh LOOM MODEL MPIRUN [MPIRUN ARGS...]
set -u
loom=$1 model=$2
shift 2
if [ ! -e "$model" ]; then echo "skip: $model is missing (../shared not beside the checkout)"; exit 77; fi
command -v curl >/dev/null 2>&1 || { echo "skip: no curl"; exit 77; }
tmp=$(mktemp -d)
. "$(dirname "$0")/../mpi_rank_pid.sh"
export LOOM_COMM_TIMEOUT_S=5
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
req='{"prompt":"Once","max_tokens":5}'
code=$(curl -s -o "$tmp/r1" -w '%{http_code}' -m 30 -H 'Content-Type: application/json' -d "$req" "http://127.0.0.1:$port/v1/completions")
[ "$code" = 200 ] || { echo "FAIL: first completion got $code"; cat "$tmp/r1" "$tmp/err"; exit 1; }
[ "$(curl -s -o /dev/null -w '%{http_code}' -m 5 "http://127.0.0.1:$port/health")" = 200 ] || { echo "FAIL: /health not 200"; exit 1; }
victim=$(rank_pid "serve -m $model" 1)
[ -n "$victim" ] || { echo "FAIL: rank 1 not found"; exit 1; }
kill -STOP "$victim"
start=$(date +%s)
code=$(curl -s -o "$tmp/r2" -w '%{http_code}' -m 60 -H 'Content-Type: application/json' -d "$req" "http://127.0.0.1:$port/v1/completions")
case "$code" in
  500|503) ;;
  *) echo "FAIL: the completion with a frozen follower got '$code'"; cat "$tmp/r2"; exit 1 ;;
esac
grep -q "did not complete within" "$tmp/r2" || { echo "FAIL: the error does not name the timeout:"; cat "$tmp/r2"; exit 1; }
# The server shuts down on its own.
waited=0
while kill -0 "$job" 2>/dev/null && [ $waited -lt 40 ]; do sleep 1; waited=$((waited + 1)); done
if kill -0 "$job" 2>/dev/null; then echo "FAIL: the server still runs 40 s after the engine failed"; exit 1; fi
wait "$job"
rc=$?
[ $rc -ne 0 ] || { echo "FAIL: the job exited 0"; exit 1; }
grep -q "the engine failed; the server stopped" "$tmp/err" || { echo "FAIL: no shutdown message:"; tail -5 "$tmp/err"; exit 1; }
echo "OK: with rank 1 frozen the completion got $code, and the server stopped (status $rc) $(( $(date +%s) - start )) s after the freeze"
