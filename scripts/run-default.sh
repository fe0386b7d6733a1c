#!/usr/bin/env bash
# The main job of `make run` (under a minute once built): what loom is, on the model at hand.
#   1. generate from a trained model (../shared/models/stories260K when it is there), else from the
#      built-in synthetic model (random weights: gibberish by design, non-printable bytes escaped);
#   2. one bursty load on two ranks under fixed sp=2 (Ulysses), fixed tp=2 (Megatron) and Shift
#      Parallelism (sp=2 for big steps, tp=2 in the shift order for small ones), side by side;
#   3. a plan set that switches the same two ranks between tp=2 and dp=2, migrating the KV cache;
#   4. the same Shift policy on a GPU cluster, priced by the simulator (Shift Parallelism 4.3.1).
set -euo pipefail
loom=${1:-build/loom}
shared=${LOOM_SHARED:-../shared}
stories="$shared/models/stories260K"
if [ -f "$stories/stories260K.bin" ]; then
  model_args=(--model "$stories/stories260K.bin" --tokenizer "$stories/tok512.bin")
  what="stories260K (a tiny Llama trained on TinyStories, llama2.c format)"
  escape=cat
else
  models=${LOOM_MODELS_DIR:-models}
  model="$models/small-q8_0.gguf"
  mkdir -p "$models"
  if [ ! -f "$model" ]; then
    echo "== first run: writing the built-in synthetic model with 'loom synth' -> $model"
    "$loom" synth --shape small --dtype q8_0 --format gguf --seed 1 -o "$model" >/dev/null
  fi
  model_args=(--model "$model")
  what="the built-in synthetic model (random weights: its text is gibberish by design; $stories is not here)"
  # Random weights emit control bytes that can scramble a terminal: show them escaped.
  escape() { LC_ALL=C sed 's/[^[:print:]\t]/?/g'; }
fi

echo "== loom: one LLM engine whose parallel layout is a runtime decision"
echo "   model: $what"
echo
echo "== 1. generate on one rank"
"$loom" generate "${model_args[@]}" --prompt "Once upon a time" -n 60 --temperature 0 2>/dev/null | ${escape}
echo

# One bursty load (24 requests, prompts 16-200 tokens, arrivals honoured), the same on every plan.
load=(--synthetic bursty:40:0.5:1.5 -n 24 --prompt-len 16:200 --output-len 8:24 --use-arrivals --seed 1 --threads 1)
run_plan() {  # label, then the layout flags; prints one summary line
  local label=$1
  shift
  local out
  out=$("$loom" bench offline "${model_args[@]}" "${load[@]}" --ranks 2 "$@" 2>&1)
  local tput ttft tpot
  tput=$(sed -n 's/.*throughput: \([0-9.]*\) tok\/s total.*/\1/p' <<<"$out")
  ttft=$(awk '/^  TTFT/{print $4}' <<<"$out")
  tpot=$(awk '/^  TPOT/{print $4}' <<<"$out")
  printf '   %-48s %8s tok/s   TTFT p50 %8s ms   TPOT p50 %6s ms\n' "$label" "$tput" "$ttft" "$tpot"
  # Per-plan step counts and KV bytes moved (multi-plan runs).
  awk '/^  plans/{p=1; next} p && /steps/{printf "       %s\n", $0} p && !/steps/{p=0}' <<<"$out"
}
echo "== 2. the same bursty load on 2 ranks (threads), three layouts"
run_plan "fixed sp=2 (Ulysses: tokens split, heads whole)" --plan sp=2
run_plan "fixed tp=2 (Megatron: heads split)" --plan tp=2
run_plan "Shift: sp=2 for big steps, tp=2 for small" --plan sp=2 --policy shift
echo "   Shift moved no KV: its small-step config is TP over the same ranks in the shift order, so each"
echo "   rank keeps exactly the KV heads it holds under sp=2 (Shift Parallelism 3.3.1); a switch is free."
echo

echo "== 3. a plan set: the same 2 ranks switch between tp=2 and dp=2 every 4 steps; a switch migrates"
echo "   the KV cache between the two placements at the step boundary"
"$loom" generate "${model_args[@]}" --prompt "Once upon a time" --prompt "The little dog" -n 24 --temperature 0 \
  --plan tp=2 --plan dp=2 --policy cycle:4 --threads 1 2>&1 >/dev/null | grep -E '^\[(plan|policy) ' | tr -d '[]' | sed 's/^/   /' || true
echo

echo "== 4. the same Shift policy on a GPU cluster (simulator: Llama-70B FP8 on 8 H200, Shift Parallelism 4.3.1)"
"$loom" sim experiment shift-4.3.1 2>/dev/null | awk '$2=="shift" || $2=="dp" || $2=="tp" {printf "   %-17s %-6s %10s\n", $1, $2, $3}'
echo
echo "More: README.md (loom plan picks a layout for your model, hardware and SLOs; loom serve is"
echo "OpenAI-compatible; every plan also runs on a GPU with --device cuda)."
