#!/usr/bin/env bash
# Fetch llama.cpp's tokenizer test vectors (vocab-only GGUFs with .inp/.out
# cases) from the llama-cpp-python sdist on PyPI into tests/fixtures/vocab/.
# The directory is gitignored; run this once per checkout. Safe to re-run:
# it does nothing when the fixtures are already there.
set -euo pipefail

VERSION=0.3.36
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/tests/fixtures/vocab"
PYTHON="${PYTHON:-python3}"

if compgen -G "$DEST/ggml-vocab-*.gguf" > /dev/null; then
    echo "fixtures already present in $DEST"
    exit 0
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

"$PYTHON" -m pip download --quiet --no-deps --no-binary :all: \
    "llama-cpp-python==$VERSION" -d "$TMP"

SDIST="$TMP/llama_cpp_python-$VERSION.tar.gz"
PREFIX="llama_cpp_python-$VERSION/vendor/llama.cpp/models"

mkdir -p "$DEST"
# Extract only the vocab fixtures, flattened into $DEST.
tar -xzf "$SDIST" -C "$TMP" --wildcards "$PREFIX/ggml-vocab-*"
mv "$TMP/$PREFIX"/ggml-vocab-* "$DEST/"
echo "fetched $(ls "$DEST" | wc -l) files into $DEST"
