#!/bin/sh
# Installs the interop test's npm packages into $2 (a build directory), once. Exits 77 (skip)
# when npm cannot reach its registry.
set -u
src=$1
dst=$2
mkdir -p "$dst"
if [ -f "$dst/node_modules/@huggingface/gguf/package.json" ] && [ -f "$dst/node_modules/tokenizers/package.json" ]; then
  exit 0
fi
cp "$src/package.json" "$dst/package.json"
if ! (cd "$dst" && timeout 150 npm install --no-audit --no-fund --loglevel=error >/dev/null 2>&1); then
  echo "SKIP: npm could not install the interop packages (no registry access?)"
  exit 77
fi
