#!/bin/sh
# cuda-modules-match-torch.sh — every module's forward, dgrad and wgrads on the default device (CUDA where there is one) match PyTorch autograd in float64.
TEGRAPH="${TG_TOP_BUILDDIR:-.}/tegraph"
SRC="${TG_TOP_SRCDIR:-.}"
PY="${PYTHON:-python3}"
if ! "$PY" -c "import torch, numpy" >/dev/null 2>&1; then
    echo "1..0 # SKIP torch is not importable by $PY"
    exit 0
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/tg-torch-check.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
if ! out=$("$TEGRAPH" run "$SRC/t/torch-check.lua" "$dir" 2>&1); then
    echo "1..1"
    echo "not ok 1 - t/torch-check.lua failed"
    echo "$out" | sed 's/^/# /'
    exit 0
fi
echo "# $out"
"$PY" "$SRC/t/torch_check.py" "$dir"
