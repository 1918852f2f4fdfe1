"""Our engine's models from GGUF files: a Llama GGUF (default: the bundled SmolLM2-135M-Instruct,
`models.smollm2`) read by `models.gguf.read_gguf` and built as the engine's `Llama`, with its tokenizer.

`weights=` picks how block-quantized matrices are held: "quantized" (the default: in their blocks,
`kernels.quant.QuantizedWeight`, which every backend's linear reads, dequantizing in registers;
the batch-invariant kernels then give the fp32 path's logits bit for bit at a fraction of the bytes
per step) or "fp32" (dequantised once at load, as gguf's own helpers do).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from specverify.errors import InputError
from specverify.models import smollm2
from specverify.models.gguf import read_gguf

from .model import Llama, LlamaConfig, build_llama

WEIGHTS = ("quantized", "fp32")
"""How block-quantized matrices are held (see the module docstring); the first is the default."""


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
    from .tokenizer import Tokenizer
    model, metadata = load_weights(path, backend, weights)
    return model, Tokenizer.from_gguf_metadata(metadata)


def load_weights(path=None, backend="default", weights: str = WEIGHTS[0]) -> tuple[Llama, dict]:
    """(model, GGUF metadata) of a Llama GGUF, without its tokenizer (a caller that has its own: the
    tiny Llamas' GGUF carries a SentencePiece-style vocabulary our tokenizer does not read)."""
    from specverify.kernels.quant import QuantizedWeight
    check_weights(weights)
    path = smollm2.path() if path is None else Path(path)
    f = read_gguf(path, quantized=weights == "quantized")
    config = llama_config(f.metadata)
    tensors = dict(f.tensors)
    expected = {"token_embd.weight": (config.vocab_size, config.dim)}
    if "output.weight" in tensors:              # an untied head (the tiny Llamas' GGUF, models.gguf.export)
        expected["output.weight"] = (config.vocab_size, config.dim)
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
    return model, f.metadata


def load_tiny_folder(folder, backend="default") -> Llama:
    """Our engine's model of a tiny Llama HF folder (`models.tiny.build`, `specverify models write`):
    its float32 safetensors, q/k rows in the adjacent-pair rotary layout, the untied head."""
    from specverify.models import tiny
    cfg, arrays = tiny.engine_tensors(folder)
    n_heads = int(cfg["num_attention_heads"])
    rope = cfg.get("rope_parameters") or {}
    config = LlamaConfig(vocab_size=int(cfg["vocab_size"]), dim=int(cfg["hidden_size"]),
                         n_layers=int(cfg["num_hidden_layers"]), n_heads=n_heads,
                         n_kv_heads=int(cfg.get("num_key_value_heads") or n_heads), ffn_dim=int(cfg["intermediate_size"]),
                         rope_theta=float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0))),
                         norm_eps=float(cfg["rms_norm_eps"]), max_seq_len=int(cfg["max_position_embeddings"]))
    tensors = {k: torch.from_numpy(v) for k, v in arrays.items()}
    return build_llama(config, tensors, backend, name=os.path.basename(str(folder)))


_CACHE: dict = {}


def load_smollm2(backend="default", weights: str = WEIGHTS[0]):
    """The bundled real model and its tokenizer, loaded once per process and `weights` setting
    (weights shared across backends: `with_backend` rebinds the ops, not the tensors)."""
    key = ("smollm2", check_weights(weights))
    if key not in _CACHE:
        _CACHE[key] = load_model(None, "default", weights)
    model, tok = _CACHE[key]
    return model.with_backend(backend), tok
