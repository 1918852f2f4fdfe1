"""MLX-LM's server, `python -m mlx_lm.server` (mlx-lm 0.32.2 on the Linux CPU build of MLX).

    python -m mlx_lm.server --model FOLDER --host 127.0.0.1 --port PORT [--draft-model FOLDER --num-draft-tokens K]

Speculation: a draft model only (`--draft-model`; `--num-draft-tokens`, default 3, through `extra`).
What its completions endpoint takes (read in mlx_lm/server.py of the install, `handle_text_completions`
and the request validation in `do_POST`): text prompts only (the prompt is tokenized by the server),
`logprobs` as a boolean (the OpenAI completions integer is refused with a 400), `seed` (it reseeds
MLX's global generator), no `n`. Its GET /v1/models lists the models of the Hugging Face cache and the
command line's model under its resolved path: the command gets resolved paths and requests name the
model by that path (`ModelProvider.load` then finds it loaded, with the command line's draft).
That listing calls huggingface_hub's `scan_cache_dir`, which raises when the cache folder does not exist
(a fresh machine): the handler has sent 200 and its headers already, so the answer is an empty body and
the server never looks ready. The child gets HF_HUB_CACHE, an empty folder of this launch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .base import EngineLauncher, parse_spec

INSTALL = "bash specverify/findings/install_mlx.sh VENV"


@dataclass(frozen=True)
class MlxLauncher(EngineLauncher):
    def command(self, python, model, port, spec, extra=()):
        kind, arg = parse_spec(spec)
        argv = [python, "-m", "mlx_lm.server", "--model", _resolved(model), "--host", "127.0.0.1", "--port", str(port)]
        if kind == "draft":
            argv += ["--draft-model", _resolved(arg)]
        return argv + list(extra)

    def served_name(self, model):
        return _resolved(model)

    def child_env(self, workdir):
        cache = Path(workdir) / "hf-cache"
        cache.mkdir(parents=True, exist_ok=True)
        return {**self.env, "HF_HUB_CACHE": str(cache)}


def _resolved(path) -> str:
    return str(Path(path).resolve())


LAUNCHER = MlxLauncher(name="mlx", install_hint=INSTALL, spec_kinds=("none", "draft:PATH"),
                       env={"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
                       ready_timeout_s=300.0, distribution="mlx-lm")
