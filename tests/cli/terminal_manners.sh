#!/bin/sh
# Issue 19, deliver 5: progress bars only on a terminal, and --tokenizer on every subcommand
# that takes a model file. stderr here is a pipe: `loom sim run` and `loom plan` must write no
# carriage-return progress lines into it; `loom bench offline` takes --tokenizer (checked
# against the model: a missing file is a one-line error naming it).
# Usage: terminal_manners.sh LOOM MODEL_DIR(stories260K)
set -u
loom=$1 dir=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$loom" sim run --synthetic poisson:5 --num-requests 20 >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
if grep -q "$(printf '\r')" "$tmp/err"; then echo "FAIL: sim run drew a progress bar into a pipe"; exit 1; fi
"$loom" plan --num-requests 8 >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
if grep -q "$(printf '\r')" "$tmp/err"; then echo "FAIL: sim plan drew a progress bar into a pipe"; exit 1; fi
if [ ! -e "$dir/stories260K.bin" ]; then echo "skip: $dir is missing (../shared not beside the checkout)"; exit 77; fi
"$loom" bench offline -m "$dir/stories260K.bin" --tokenizer "$dir/tok512.bin" --synthetic batch -n 2 \
  --prompt-len 4 --output-len 4 --threads 1 >"$tmp/out" 2>&1 || { echo "FAIL: bench offline --tokenizer"; cat "$tmp/out"; exit 1; }
if "$loom" bench offline -m "$dir/stories260K.bin" --tokenizer "$tmp/missing.json" --synthetic batch -n 2 >"$tmp/out" 2>&1; then
  echo "FAIL: a missing --tokenizer was accepted"; exit 1
fi
grep -q "missing.json" "$tmp/out" || { echo "FAIL: the error does not name the tokenizer:"; cat "$tmp/out"; exit 1; }
# sim validate-engine (a model file too) takes --tokenizer, checked before anything else runs.
if "$loom" sim validate-engine --model "$dir/stories260K.bin" --tokenizer "$tmp/missing.json" --profile "$tmp" \
     --plan tp=1 >"$tmp/out" 2>&1; then echo "FAIL: validate-engine accepted a missing --tokenizer"; exit 1; fi
grep -q "missing.json" "$tmp/out" || { echo "FAIL: validate-engine: the error does not name the tokenizer:"; cat "$tmp/out"; exit 1; }
echo "OK: no progress bars into pipes; bench offline and sim validate-engine take and check --tokenizer"
