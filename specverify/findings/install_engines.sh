#!/usr/bin/env bash
# Install vLLM 0.33.0 and SGLang 0.5.23 for the CPU audits, outside the main environment:
# the wheels --no-deps into $ENGINES, and only the pure-Python modules their sampler imports pull in
# into $DEPS (torch and triton come from the main venv: torch stays 2.13.0).
# Then: PYTHONPATH=$ENGINES:$DEPS python -m specverify findings run vllm sglang sglang-block sglang-tree-greedy
set -euo pipefail
ENGINES=${ENGINES:-/tmp/sv-engines}
DEPS=${DEPS:-/tmp/sv-deps}
pip install -q --no-deps --target "$ENGINES" vllm==0.33.0 sglang==0.5.23
pip install -q --no-deps --target "$DEPS" \
    cbor2 pyzmq aiohttp multidict attrs yarl propcache aiohappyeyeballs aiosignal frozenlist \
    openai-harmony openai sniffio pybase64 cachetools msgspec cloudpickle uvloop prometheus-client \
    xgrammar apache-tvm-ffi fastapi starlette opentelemetry-api opentelemetry-semantic-conventions \
    partial-json-parser llguidance orjson ipython traitlets
echo "installed: PYTHONPATH=$ENGINES:$DEPS"
