#!/usr/bin/env bash
# The one-command GPU check (issue 29; tests/gpu/README.md):
#
#   scripts/gpu-check.sh build   here, on a machine with nvcc but no GPU: builds test_gpu, bench_gpu
#                                and loom for sm_90 (no MPI; libstdc++ and the CUDA runtime static)
#                                into build-gpu/ and packs them, the shared libraries they need
#                                beyond CUDA's, and the small part of ../shared the checks read
#                                into .gpu-bundle/ (git-ignored, ~20 MB);
#   scripts/gpu-check.sh run     on the GPU machine (the device tool: carry .gpu-bundle): runs
#                                test_gpu (every CUDA op against the CPU device, every plan and plan
#                                set against the CPU engine, KV migration and Seesaw swaps bit for
#                                bit), loom generate / bench offline / serve with --device cuda,
#                                bench_gpu (decode and prefill against this GPU's measured limits,
#                                switch times, the operator CSVs for `loom sim validate`) and the
#                                PyTorch reference beside it; leaves summary.md, the logs and
#                                csv.tar.gz in $OUT (default ./gpu-check-out). Without a GPU it says
#                                so and what it skipped, and exits 0.
#
# The device machine has CUDA 13 with cuBLAS and NCCL as Python packages, PyTorch, cmake and ninja,
# but none of the Debian libraries loom builds with: that is why the binaries travel.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-run}
bundle=.gpu-bundle

build() {
  set -e
  command -v nvcc >/dev/null || { echo "gpu-check build: nvcc not found (CUDA toolkit)"; exit 1; }
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_CUDA=ON -DLOOM_MPI=OFF \
    -DLOOM_CUDA_STATIC_RUNTIME=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc -Wl,-rpath,\$ORIGIN/lib" \
    ${CCACHE:+-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache} >/dev/null
  cmake --build build-gpu -j "$(nproc)" --target test_gpu bench_gpu loom
  rm -rf "$bundle"
  mkdir -p "$bundle/lib" "$bundle/shared/models" "$bundle/shared/data/gpu-measurements"
  cp build-gpu/tests/test_gpu build-gpu/bench/bench_gpu build-gpu/loom "$bundle/"
  strip "$bundle/test_gpu" "$bundle/bench_gpu" "$bundle/loom"
  # Shared libraries beyond the C library and CUDA's (the device has those): cpp-httplib and what it
  # links (TLS, compression), copied from this machine; the C and C++ runtimes are the machine's own.
  for b in test_gpu bench_gpu loom; do
    ldd "$bundle/$b" | awk '/=> \//{print $3}'
  done | sort -u | grep -vE '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so|libcuda|libcublas|libnccl|libcudart' \
    | while read -r lib; do cp -L "$lib" "$bundle/lib/"; done
  cp -r ../shared/models/stories260K "$bundle/shared/models/"
  cp -r ../shared/data/gpu-measurements/a100 "$bundle/shared/data/gpu-measurements/"
  cp bench/torch_decode.py "$bundle/"
  du -sh "$bundle"
  echo "gpu-check build: $bundle ready; on the GPU machine run: bash scripts/gpu-check.sh run (carry $bundle)"
}

run() {
  local out=${OUT:-$PWD/gpu-check-out}
  mkdir -p "$out"
  if [ ! -x "$bundle/test_gpu" ]; then
    echo "gpu-check run: no $bundle/ (make it here with: bash scripts/gpu-check.sh build)" | tee "$out/summary.md"
    exit 1
  fi
  local B=$bundle
  # cuBLAS, cuBLASLt, NCCL and the CUDA runtime pieces from the pip packages (nvidia-*).
  local pylibs
  pylibs=$(python3 - <<'PY' 2>/dev/null
import glob, os
try:
    import nvidia
    dirs = set()
    for base in nvidia.__path__:
        for so in glob.glob(os.path.join(base, "**", "lib", "lib*.so*"), recursive=True):
            dirs.add(os.path.dirname(so))
    print(":".join(sorted(dirs)))
except Exception:
    pass
PY
)
  export LD_LIBRARY_PATH="$PWD/$B/lib${pylibs:+:$pylibs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LOOM_SHARED="$PWD/$B/shared"
  local sum="$out/summary.md"
  {
    echo "# loom GPU check ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
    echo
    echo '```'
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || echo "nvidia-smi: not available"
    echo '```'
  } > "$sum"
  local gpu=yes
  nvidia-smi -L >/dev/null 2>&1 || gpu=no
  local t0=$SECONDS
  # 1. test_gpu: ops, plans, data movement (each test skips with the reason without a GPU), one
  # suite at a time so that a crash in one leaves the others' results.
  local rc=0 suite
  : > "$out/test_gpu.log"
  for suite in $("$B/test_gpu" --gtest_list_tests | awk '/^[^ ]/{print $1}'); do
    timeout 240 "$B/test_gpu" --gtest_filter="${suite}*" >> "$out/test_gpu.log" 2>&1 || {
      local r=$?
      rc=$r
      echo "[  CRASHED ] ${suite} (exit $r)" >> "$out/test_gpu.log"
    }
  done
  {
    echo
    echo "## test_gpu (rc $rc, $((SECONDS - t0)) s)"
    grep -E '^\[  (PASSED|FAILED|CRASHED) |^\[  FAILED  \] [A-Za-z]' "$out/test_gpu.log" | sort | uniq -c | head -60
    echo "ok: $(grep -c '^\[       OK \]' "$out/test_gpu.log"), skipped: $(grep -c '^\[  SKIPPED \] .*(' "$out/test_gpu.log"), failed: $(grep -c '^\[  FAILED  \] .*(' "$out/test_gpu.log")"
  } >> "$sum"
  if [ "$gpu" = no ]; then
    echo -e "\nNo GPU visible: test_gpu's tests skipped (reasons in test_gpu.log); bench_gpu, the --device cuda runs and the PyTorch reference were not run." >> "$sum"
    cat "$sum"
    return 0
  fi
  # 2. the CLI with --device cuda: the same greedy text as the CPU, every plan kind.
  t0=$SECONDS
  local m="$LOOM_SHARED/models/stories260K/stories260K.bin" tok="$LOOM_SHARED/models/stories260K/tok512.bin"
  {
    echo
    echo "## loom --device cuda (greedy text against --device cpu)"
    for plan in "tp=1" "tp=2" "sp=2" "kvp=2,tpa=1" "pp=2,layers=3+2" "dp=2"; do
      a=$(timeout 60 "$B/loom" generate --model "$m" --tokenizer "$tok" --prompt "Once upon a time" -n 48 --plan "$plan" --device cpu 2>/dev/null)
      b=$(timeout 60 "$B/loom" generate --model "$m" --tokenizer "$tok" --prompt "Once upon a time" -n 48 --plan "$plan" --device cuda 2>"$out/cli_err.txt")
      if [ -n "$b" ] && [ "$a" = "$b" ]; then echo "- $plan: same text"; else echo "- $plan: DIFFERS or failed: $(head -c 300 "$out/cli_err.txt")"; fi
    done
    timeout 90 "$B/loom" bench offline --model "$m" --synthetic batch --num-requests 16 --device cuda --plan tp=2 2>&1 | tail -4
    ( timeout 60 "$B/loom" serve --model "$m" --tokenizer "$tok" --device cuda --plan tp=2 --port 18089 > "$out/serve.txt" 2>&1 & )
    for _ in $(seq 1 40); do curl -s localhost:18089/health >/dev/null 2>&1 && break; sleep 0.5; done
    echo "serve: $(curl -s localhost:18089/v1/completions -H 'Content-Type: application/json' -d '{"prompt":"Once upon a time","max_tokens":16,"temperature":0}' | head -c 300)"
    pkill -f "loom serve" >/dev/null 2>&1 || true
    echo "($((SECONDS - t0)) s)"
  } >> "$sum" 2>&1
  # 3. bench_gpu and the PyTorch reference.
  t0=$SECONDS
  mkdir -p "$out/csv"
  LOOM_GPU_CSV_DIR="$out/csv" LOOM_GPU_CSV_TOKENS=${LOOM_GPU_CSV_TOKENS:-8} timeout 300 "$B/bench_gpu" > "$out/bench_gpu.log" 2>&1
  echo -e "\n## bench_gpu (rc $?, $((SECONDS - t0)) s)\n\`\`\`" >> "$sum"
  grep -vE '^  mlp_' "$out/bench_gpu.log" | head -60 >> "$sum"
  echo '```' >> "$sum"
  t0=$SECONDS
  timeout 180 python3 "$B/torch_decode.py" > "$out/torch.log" 2>&1
  echo -e "\n## PyTorch transformers reference (rc $?, $((SECONDS - t0)) s)" >> "$sum"
  tail -3 "$out/torch.log" >> "$sum"
  local l t
  l=$(awk '/^BENCH decode_b1_ms/{print $3}' "$out/bench_gpu.log")
  t=$(awk '/^BENCH torch_decode_ms/{print $3}' "$out/torch.log")
  if [ -n "$l" ] && [ -n "$t" ]; then
    echo "loom decode vs transformers eager generate, batch 1: $(awk -v l="$l" -v t="$t" 'BEGIN{printf "%.2fx (target >= 1.5x)", t/l}')" >> "$sum"
  fi
  (cd "$out" && tar czf csv.tar.gz csv && rm -rf csv)
  cat "$sum"
}

case "$mode" in
  build) build ;;
  run) run ;;
  *) echo "usage: scripts/gpu-check.sh build|run"; exit 2 ;;
esac
