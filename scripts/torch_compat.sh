#!/usr/bin/env bash
# Build the extension and run tests under one torch release, away from the checkout:
#   bash scripts/torch_compat.sh 2.15.0            (or: make compat TORCH=2.15.0)
# A throwaway venv and a copy of the checkout (tracked and untracked, not ignored, files) under
# $COMPAT_DIR/torch-VERSION (default /tmp/spacy-elmo-compat), so extensions built for different torch
# releases never mix with the checkout's; the project's own `make install` sets it up (torch first,
# then the package with --no-build-isolation, CPU kernels only: SPACY_ELMO_CUDA=0). Then pytest runs
# $COMPAT_TESTS (default: tests/ops tests/bilm tests/test_backend.py; "tests" for the whole suite).
# Removed afterwards unless KEEP=1. On x86-64 Linux pip takes torch's CUDA build from PyPI: several
# GB to download and unpack. Not part of `make test`. The exit status is pytest's.
set -euo pipefail
TORCH=${1:?usage: torch_compat.sh TORCH_VERSION (e.g. 2.15.0)}
# a release number only: it names the folder removed below
[[ "$TORCH" =~ ^[0-9]+(\.[0-9]+)*([a-z0-9.+]*)$ ]] || { echo "torch_compat.sh: not a torch release: '$TORCH'" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${COMPAT_DIR:-/tmp/spacy-elmo-compat}/torch-$TORCH
PYTHON=${PYTHON:-python3}
read -r -a TESTS <<< "${COMPAT_TESTS:-tests/ops tests/bilm tests/test_backend.py}"

rm -rf "$WORK"
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/src"
# the checkout's files as they are (a tracked file deleted in the worktree is not copied); GNU cp
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' f; do if [ -e "$f" ]; then printf '%s\0' "$f"; fi; done | xargs -0 cp --parents -t "$WORK/src")
SPACY_ELMO_CUDA=0 make -C "$WORK/src" install PYTHON="$PYTHON" VENV="$WORK/venv" TORCH_SPEC="torch==$TORCH"
cd "$WORK/src"
"$WORK/venv/bin/python" -c 'import torch, spacy_elmo.ops.extension as e; print("torch", torch.__version__, "compiled kernels:", e.fused_available())'
"$WORK/venv/bin/python" -m pytest -q -p no:cacheprovider "${TESTS[@]}"
