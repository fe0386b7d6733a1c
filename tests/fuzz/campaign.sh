#!/bin/sh
# A longer fuzzing campaign on demand (not in CI): builds the harnesses like the fuzz_build test,
# then fuzzes each for SECONDS (default 600) with JOBS parallel workers (default 2), keeping new
# corpus entries in BUILD/fuzz-campaign/<name>/ (outside the repo). Crashes land in
# BUILD/fuzz-campaign/<name>/artifacts/; minimise one with
#   BUILD/fuzz/fuzz_<name> -minimize_crash=1 -runs=10000 <crash-file>
# and commit the result as tests/fuzz/corpus/<name>/regress-<what> beside a fix.
#   tests/fuzz/campaign.sh [BUILD_DIR] [SECONDS] [JOBS] [harness ...]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
secs=${2:-600}
jobs=${3:-2}
shift $(( $# > 3 ? 3 : $# ))
names=${*:-"gguf safetensors hf_config tokenizer_json llama2c llama2c_tokenizer openai_request step_codec"}
sh "$here/run.sh" build "$build/fuzz"
build=$(cd "$build" && pwd)
par=""
[ "$jobs" -gt 1 ] && par="-jobs=$jobs -workers=$jobs"  # workers log to fuzz-N.log in the work dir
for n in $names; do
  work="$build/fuzz-campaign/$n"
  mkdir -p "$work/corpus" "$work/artifacts" "$work/tmp"
  echo "== fuzz_$n for ${secs}s on $jobs jobs (corpus $work/corpus)"
  (cd "$work" && LOOM_FUZZ_TMP="$work/tmp" "$build/fuzz/fuzz_$n" -max_total_time="$secs" $par \
    -rss_limit_mb=2048 -timeout=20 -artifact_prefix="$work/artifacts/" \
    "$work/corpus" "$here/corpus/$n") || echo "fuzz_$n: findings in $work/artifacts"
done
