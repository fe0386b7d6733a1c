#!/bin/sh
# Builds and runs the libFuzzer harnesses (README.md). Exit 77 = skipped (ctest SKIP_RETURN_CODE).
#   run.sh build BUILD_DIR               configure + build tests/fuzz with clang++ (ASan + UBSan)
#   run.sh run BUILD_DIR NAME SECONDS    replay the committed corpus of NAME, then fuzz for SECONDS
# Environment: LOOM_FUZZ_CXX (default clang++), LOOM_FUZZ_JOBS (default 2).
set -u
here=$(cd "$(dirname "$0")" && pwd)
cmd=$1
build=$2
cxx=${LOOM_FUZZ_CXX:-clang++}

skip() { echo "fuzz: skipped: $*"; exit 77; }

case "$cmd" in
build)
  command -v "$cxx" >/dev/null 2>&1 || skip "$cxx not found (apt-get install clang for the fuzz harnesses)"
  # libFuzzer ships with clang's runtime; probe it with a one-line program.
  probe=$(mktemp -d)
  printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' > "$probe/p.cpp"
  if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" >"$probe/log" 2>&1; then
    cat "$probe/log"; rm -rf "$probe"
    skip "$cxx cannot link -fsanitize=fuzzer,address,undefined (libFuzzer runtime missing?)"
  fi
  rm -rf "$probe"
  launcher=""
  command -v ccache >/dev/null 2>&1 && launcher="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
  cmake -S "$here" -B "$build" -DCMAKE_CXX_COMPILER="$cxx" $launcher >"$build.configure.log" 2>&1 ||
    { cat "$build.configure.log"; exit 1; }
  exec cmake --build "$build" -j "${LOOM_FUZZ_JOBS:-2}"
  ;;
run)
  name=$3
  secs=$4
  bin="$build/fuzz_$name"
  [ -x "$bin" ] || skip "$bin was not built (no clang++ with libFuzzer; see the fuzz_build test)"
  corpus="$here/corpus/$name"
  [ -d "$corpus" ] || { echo "fuzz: no corpus at $corpus"; exit 1; }
  work="$build/work/$name"
  rm -rf "$work"
  mkdir -p "$work/new" "$work/artifacts"
  export LOOM_FUZZ_TMP="$work"
  opts="-rss_limit_mb=2048 -timeout=20 -artifact_prefix=$work/artifacts/ -print_final_stats=1"
  # 1. Every committed input (seeds and regressions of past findings) once.
  echo "fuzz_$name: replaying $(ls "$corpus" | wc -l) committed inputs"
  "$bin" $opts -runs=0 "$corpus" || { echo "fuzz_$name: a committed input fails (artifacts in $work/artifacts)"; exit 1; }
  # 2. A short coverage-guided run from the corpus; new inputs go to a scratch dir, never the repo.
  echo "fuzz_$name: fuzzing for ${secs}s"
  "$bin" $opts -max_total_time="$secs" "$work/new" "$corpus" ||
    { echo "fuzz_$name: FOUND a failing input: $(ls "$work/artifacts")"; ls "$work/artifacts"; exit 1; }
  ;;
*)
  echo "usage: run.sh build BUILD_DIR | run BUILD_DIR NAME SECONDS"; exit 2 ;;
esac
