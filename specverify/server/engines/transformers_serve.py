"""transformers' own server, `transformers serve` (transformers 5.24, the `serving` extra: FastAPI,
uvicorn, openai), pinned to one model:

    transformers serve FOLDER --host 127.0.0.1 --port PORT --device cpu

Does it speculate? Only through the model's generation config (read in the 5.24 install):
transformers/cli/serving/completion.py `CompletionHandler.handle_request` builds the request's
GenerationConfig with `_build_generation_config` (transformers/cli/serving/utils.py), which starts from
a deep copy of the model's `generation_config` (or from a `generation_config` JSON string in the request
body) and overrides only max_tokens, temperature, top_p, seed, stop; the sequential path
(`GenerateManager`, utils.py) then calls `model.generate(**inputs, generation_config=...)`. So a folder
whose generation_config.json sets `prompt_lookup_num_tokens` makes every request prompt-lookup
decoding (generate's assisted mode with its prompt-lookup candidate generator). No command-line flag
names a draft model, and `assistant_model` is an argument of `generate`, not a generation-config field:
the server cannot run a separate draft model. With `--continuous-batching` the CB manager generates
instead of `generate`, and prompt lookup does not apply there.

`lookup:N` here: a copy of the folder (weights linked, not copied) whose generation_config.json has
prompt_lookup_num_tokens N; `none`: the same copy without it (so that plain is plain).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from specverify.errors import InputError

from .base import EngineLauncher, parse_spec

INSTALL = "pip install 'transformers[serving]==5.24.0' (specverify's own venv has it with '.[transformers,server]')"
GENERATION_CONFIG = "generation_config.json"
LOOKUP_FIELD = "prompt_lookup_num_tokens"
LINKED = (".safetensors", ".bin", ".gguf")


@dataclass(frozen=True)
class TransformersServeLauncher(EngineLauncher):
    def prepare(self, model, spec, workdir):
        folder = Path(model)
        if not (folder / "config.json").is_file():
            raise InputError(f"--model {model}: engine {self.name} takes a transformers folder (with config.json)")
        kind, arg = parse_spec(spec)
        out = Path(workdir)
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        for f in folder.iterdir():
            if f.is_file():
                if f.name.endswith(LINKED):
                    os.symlink(f.resolve(), out / f.name)
                else:
                    shutil.copyfile(f, out / f.name)
        path = out / GENERATION_CONFIG
        config = json.loads(path.read_text()) if path.exists() else {}
        config.pop(LOOKUP_FIELD, None)
        if kind == "lookup":
            config[LOOKUP_FIELD] = int(arg)
        path.write_text(json.dumps(config, indent=1) + "\n")
        return str(out.resolve())

    def command(self, python, model, port, spec, extra=()):
        return [str(Path(python).parent / "transformers"), "serve", str(model), "--host", "127.0.0.1",
                "--port", str(port), "--device", "cpu", *extra]


LAUNCHER = TransformersServeLauncher(name="transformers", install_hint=INSTALL, spec_kinds=("none", "lookup:N"),
                                     env={"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
                                     ready_timeout_s=300.0, distribution="transformers")
