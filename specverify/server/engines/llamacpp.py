"""llama-cpp-python's server, `python -m llama_cpp.server` (the `[server]` extra: FastAPI, uvicorn,
sse-starlette, pydantic-settings).

    python -m llama_cpp.server --model FILE.gguf --host 127.0.0.1 --port PORT
        [--draft_model prompt-lookup-decoding --draft_model_num_pred_tokens N]

Speculation: prompt lookup only. Its settings (llama_cpp/server/settings.py, `ModelSettings.draft_model`:
"Method to use for speculative decoding. One of (prompt-lookup-decoding)") and its model loader
(llama_cpp/server/model.py: any `draft_model` value builds `LlamaPromptLookupDecoding(num_pred_tokens=...)`)
offer no draft *model*: a second GGUF cannot be given to the server. `lookup:N` here is
`--draft_model prompt-lookup-decoding --draft_model_num_pred_tokens N` (its n-gram size stays the
class default, 2).

Its completions endpoint takes text prompts only (a token-id list fails request validation: HTTP 500) and
returns no token ids: on the GGUF of a `specverify models write` folder the audit's client maps ids and
text through the file's one-character pieces (`models.pieces`). Its request defaults are not OpenAI's
(`NEUTRAL_SAMPLING` below); its KV cache is f16 unless launched with `--type_k 0 --type_v 0`
(`--engine-args`), which the report in reports/llamacpp-server-0.3.36/ uses.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import EngineLauncher, parse_spec

INSTALL = "bash specverify/findings/install_llamacpp.sh VENV   (compiles llama.cpp; LLAMACPP_WHEEL=WHL reuses a wheel)"
LOOKUP = "prompt-lookup-decoding"


@dataclass(frozen=True)
class LlamaCppLauncher(EngineLauncher):
    def command(self, python, model, port, spec, extra=()):
        kind, arg = parse_spec(spec)
        argv = [python, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1", "--port", str(port)]
        if kind == "lookup":
            argv += ["--draft_model", LOOKUP, "--draft_model_num_pred_tokens", str(int(arg))]
        return argv + list(extra)


# llama-cpp-python's completions request (llama_cpp/server/types.py: top_p_field, top_k_field, min_p_field,
# repeat_penalty_field) defaults to top_p 0.95, top_k 40, min_p 0.05 and repeat_penalty 1.1, not OpenAI's
# plain temperature sampling: a request that names only temperature is not sampled from the temperature law.
# The audit sends the neutral values (an explicit top_p / top_k of a row still wins).
NEUTRAL_SAMPLING = {"top_p": 1.0, "top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0}

LAUNCHER = LlamaCppLauncher(name="llamacpp", install_hint=INSTALL, spec_kinds=("none", "lookup:N"),
                            env={}, ready_timeout_s=300.0, distribution="llama_cpp_python",
                            request_defaults=NEUTRAL_SAMPLING)
