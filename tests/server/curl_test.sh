#!/bin/sh
# curl against `loom serve` on 127.0.0.1 (a free port): raw SSE framing ("data: " lines, the
# [DONE] terminator), /health, /metrics in the Prometheus text format, an error status.
# Usage: curl_test.sh LOOM_BIN WORK_DIR
set -eu
loom=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
"$loom" synth --shape tiny --dtype f32 -o "$work/tiny.gguf" > /dev/null

: > "$work/serve.log"  # exists before the background shell opens it (the loop below reads it)
"$loom" serve -m "$work/tiny.gguf" --port 0 --threads 1 --served-model-name tiny > "$work/serve.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true' EXIT
url=""
i=0
while [ $i -lt 200 ]; do
  url=$(sed -n 's/.*listening on \(http:\/\/127\.0\.0\.1:[0-9]*\).*/\1/p' "$work/serve.log")
  [ -n "$url" ] && break
  kill -0 $pid 2>/dev/null || { cat "$work/serve.log"; echo "FAIL: loom serve exited"; exit 1; }
  sleep 0.05
  i=$((i + 1))
done
[ -n "$url" ] || { cat "$work/serve.log"; echo "FAIL: no listening line"; exit 1; }
fail() { echo "FAIL: $*"; exit 1; }

# /health
[ "$(curl -s -o /dev/null -w '%{http_code}' "$url/health")" = 200 ] || fail "/health is not 200"

# Streaming completion: raw SSE framing.
curl -sN "$url/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model":"tiny","prompt":"Hello","max_tokens":12,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}' \
  > "$work/sse.txt"
# Every non-empty line starts with "data: ", every event is followed by a blank line.
if grep -v '^$' "$work/sse.txt" | grep -qv '^data: '; then cat "$work/sse.txt"; fail "a line without 'data: '"; fi
events=$(grep -c '^data: ' "$work/sse.txt")
blanks=$(grep -c '^$' "$work/sse.txt")
[ "$events" -ge 3 ] || fail "only $events events"
[ "$events" = "$blanks" ] || fail "$events events but $blanks blank lines"
[ "$(tail -n 2 "$work/sse.txt" | head -n 1)" = "data: [DONE]" ] || fail "the stream does not end with data: [DONE]"
grep -q '"finish_reason":"length"' "$work/sse.txt" || fail "no finish_reason chunk"
grep -q '"completion_tokens":12' "$work/sse.txt" || fail "no usage chunk with 12 completion tokens"
head -c 20 "$work/sse.txt" | grep -q '^data: {"choices"' || fail "the first event is not a JSON chunk"
curl -sN -D "$work/headers.txt" -o /dev/null "$url/v1/completions" -d '{"prompt":"Hi","max_tokens":2,"ignore_eos":true,"stream":true}'
grep -qi '^content-type: text/event-stream' "$work/headers.txt" || fail "no text/event-stream content type"
grep -qi '^transfer-encoding: chunked' "$work/headers.txt" || fail "not chunked"

# An error: status and body.
code=$(curl -s -o "$work/err.json" -w '%{http_code}' "$url/v1/completions" -d '{"prompt":"Hi","top_p":2}')
[ "$code" = 400 ] || fail "top_p 2 answered $code"
grep -q '"type":"invalid_request_error"' "$work/err.json" || fail "error body: $(cat "$work/err.json")"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$url/v2/nothing")" = 404 ] || fail "unknown route is not 404"

# /metrics: content type and every sample line `name[{labels}] number`.
curl -s -D "$work/mh.txt" "$url/metrics" > "$work/metrics.txt"
grep -qi '^content-type: text/plain; version=0.0.4' "$work/mh.txt" || fail "metrics content type"
bad=$(grep -v '^#' "$work/metrics.txt" | grep -v '^$' |
      grep -Ev '^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? (-?[0-9.eE+-]+|\+Inf|-Inf|NaN)$' || true)
[ -z "$bad" ] || fail "unparsable metrics lines: $bad"
for m in vllm:time_to_first_token_seconds_bucket vllm:inter_token_latency_seconds_bucket \
         vllm:e2e_request_latency_seconds_bucket vllm:num_requests_running vllm:num_requests_waiting \
         vllm:kv_cache_usage_perc vllm:prompt_tokens_total vllm:generation_tokens_total \
         vllm:request_success_total loom:step_plan_info; do
  grep -q "^$m" "$work/metrics.txt" || fail "metric $m missing"
done
grep -q '^vllm:generation_tokens_total{model_name="tiny"} 14$' "$work/metrics.txt" ||
  fail "generation tokens: $(grep '^vllm:generation_tokens_total' "$work/metrics.txt")"

# A greedy completion from this one-rank server, to compare with a tp=2 server below.
greedy='{"model":"tiny","prompt":"Hello there","max_tokens":24,"temperature":0,"ignore_eos":true}'
curl -s "$url/v1/completions" -d "$greedy" > "$work/one.json"
grep -q '"completion_tokens":24' "$work/one.json" || fail "greedy completion: $(cat "$work/one.json")"

# Layouts serve cannot run: a clear error, non-zero exit.
if "$loom" serve -m "$work/tiny.gguf" --ranks 3 --plan tp=3 --port 0 > "$work/tp3.log" 2>&1; then fail "tp=3 started"; fi
grep -q "tp=3" "$work/tp3.log" || fail "tp=3 message: $(cat "$work/tp3.log")"

# SIGTERM stops the server cleanly.
kill -TERM $pid
wait $pid || fail "loom serve exited non-zero after SIGTERM"
trap - EXIT

# The same server on two ranks (ranks as threads): model split tp=2, two DP replicas stepping
# under one scheduler, a plan set switching every 3 steps (KV migrated between tp=2 and dp=2),
# and Shift Parallelism (base sp=2 for steps over 4 tokens, shift config TP(2) otherwise): the
# same greedy text as one rank; under Shift the last step (a decode) ran the shift config, and
# under the cycle the switches are counted per plan, as /metrics says. Nitsum's pool (--policy
# nitsum): two workers as a prefill and a decode instance (every request handed off) and one TP(2)
# instance, the next layout every 5 ms (a regrouping moves the running requests' K/V by heads).
# Nitsum's TP switch (issue 15): weights as views of each rank's full copy, DP(2) <-> TP(2) with the
# KV re-partitioned by head at every switch, on a server with SLO tiers (the request names none:
# the first tier).
for layout in "--plan tp=2" "--plan dp=2" "--plan tp=2 --plan dp=2 --policy cycle:3" \
              "--plan sp=2 --policy shift --shift-threshold 4" \
              "--plan dp=2,weights=full --plan tp=2,weights=full --policy cycle:2 --tiers t1=60000/60000,t2=60000/60000" \
              "--policy nitsum --pool-layout prefill:tp1,decode:tp1 --pool-layout both:tp2 --window 0.005"; do
  : > "$work/serve2.log"
  # shellcheck disable=SC2086
  "$loom" serve -m "$work/tiny.gguf" --port 0 --ranks 2 $layout --served-model-name tiny > "$work/serve2.log" 2>&1 &
  pid=$!
  trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true' EXIT
  url=""
  i=0
  while [ $i -lt 200 ]; do
    url=$(sed -n 's/.*listening on \(http:\/\/127\.0\.0\.1:[0-9]*\).*/\1/p' "$work/serve2.log")
    [ -n "$url" ] && break
    kill -0 $pid 2>/dev/null || { cat "$work/serve2.log"; fail "loom serve $layout exited"; }
    sleep 0.05
    i=$((i + 1))
  done
  [ -n "$url" ] || { cat "$work/serve2.log"; fail "$layout: no listening line"; }
  curl -s "$url/v1/completions" -d "$greedy" > "$work/two.json"
  # The whole response but its id and creation time (text, finish reason and usage included).
  text_of() { sed -e 's/"created":[0-9]*//' -e 's/"id":"[^"]*"//' "$1"; }
  [ "$(text_of "$work/one.json")" = "$(text_of "$work/two.json")" ] ||
    fail "$layout: text differs: $(cat "$work/two.json") vs $(cat "$work/one.json")"
  case "$layout" in
    *shift*) curl -s "$url/metrics" | grep -q '^loom:step_plan_info{model_name="tiny",plan="shift:sp=2"} 1' ||
               fail "$layout: last step plan: $(curl -s "$url/metrics" | grep step_plan)";;
    *weights=full*) curl -s "$url/metrics" | grep -Eq '^loom:plan_switches_total\{model_name="tiny",plan="tp=2,weights=full"\} [1-9]' ||
               fail "$layout: switches: $(curl -s "$url/metrics" | grep plan_)"
             curl -s "$url/metrics" | grep -Eq '^loom:tier_requests_finished_total\{model_name="tiny",tier="t1"\} 1' ||
               fail "$layout: tiers: $(curl -s "$url/metrics" | grep tier_)";;
    *nitsum*) curl -s "$url/metrics" | grep -Eq '^loom:plan_switches_total\{model_name="tiny",plan="tp2@0"\} [1-9]' ||
               fail "$layout: no regrouping into tp2@0: $(curl -s "$url/metrics" | grep plan_)";;
    *cycle*) curl -s "$url/metrics" | grep -Eq '^loom:plan_switches_total\{model_name="tiny",plan="dp=2"\} [1-9]' ||
               fail "$layout: switches: $(curl -s "$url/metrics" | grep plan_)";;
  esac
  kill -TERM $pid
  wait $pid || fail "loom serve $layout exited non-zero after SIGTERM"
  trap - EXIT
done
echo "curl tests passed"
