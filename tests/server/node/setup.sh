#!/bin/sh
# Installs the openai npm package for the client tests into DEST (a build directory, never the
# source tree). Quick no-op when the pinned version is already there; exits 77 (ctest: skipped)
# with a message when npm cannot reach the registry.
# Usage: setup.sh SRC_DIR DEST_DIR
set -eu
src=$(cd "$1" && pwd)
mkdir -p "$2"
dest=$(cd "$2" && pwd)
want=$(node -p "require('$src/package.json').dependencies.openai")
have=""
if [ -f "$dest/node_modules/openai/package.json" ]; then
  have=$(node -p "require('$dest/node_modules/openai/package.json').version")
fi
if [ "$have" = "$want" ]; then
  echo "openai $want already installed in $dest"
  exit 0
fi
cp "$src/package.json" "$dest/package.json"
if ! timeout 30 npm ping --loglevel=silent > /dev/null 2>&1; then
  echo "SKIP: npm cannot reach its registry; the openai client test needs the openai package ($want)"
  exit 77
fi
timeout 170 npm install --prefix "$dest" --no-audit --no-fund --no-package-lock --loglevel=error
echo "installed openai $want in $dest"
