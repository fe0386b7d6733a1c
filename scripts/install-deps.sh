#!/usr/bin/env bash
# Installs the Debian packages loom needs, by name, only when they are missing.
# Usage: scripts/install-deps.sh            (everything the build and tests use: `make test`)
#        scripts/install-deps.sh --runtime  (what building and running `loom` needs: `make run`)
set -euo pipefail

packages=(
  g++ cmake make pkg-config         # toolchain
  nlohmann-json3-dev libcli11-dev    # JSON, command line
  libcpp-httplib-dev                 # HTTP server (loom serve)
  openmpi-bin libopenmpi-dev         # multi-process ranks (--comm mpi)
)
# Tools that may already come from elsewhere than Debian (a newer npm, say): install the
# Debian package only when the command itself is missing.
declare -A by_command=([mpirun]=openmpi-bin [ninja]=ninja-build)
if [ "${1:-}" != "--runtime" ]; then
  packages+=(
    googletest libgtest-dev libgmock-dev libbenchmark-dev   # tests and benchmarks
    curl                               # raw HTTP client in server tests
    clang libclang-rt-dev              # libFuzzer + sanitizer runtimes (tests/fuzz)
  )
  by_command+=([node]=nodejs [npm]=npm)  # the official openai client in server tests
fi

missing=()
for p in "${packages[@]}"; do
  # dpkg-query prints "install ok installed" for a package that is fully installed.
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

for c in "${!by_command[@]}"; do
  if ! command -v "$c" >/dev/null 2>&1; then missing+=("${by_command[$c]}"); fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing missing Debian packages: ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
