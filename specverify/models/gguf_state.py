"""The state families of issue 28 as f32 GGUF files for llama.cpp: the hybrid family (`models.hybrid`,
LFM2) as arch "lfm2", the sliding-window family (`models.sliding`, Mistral with sliding_window) as
arch "granite_swa" with every layer a sliding-window layer.

    export_hybrid(folder)     folder/model-f32.gguf, arch "lfm2"
    export_sliding(folder)    folder/model-f32-swa.gguf, arch "granite_swa"

Both are written with llama.cpp's `gguf` package (`GGUFWriter`, `get_tensor_name_map` for the names),
nothing quantized, so llama.cpp computes with the very weights whose float64 forward is the law
(tests/test_gguf_state.py: logits within ~2e-6 of it).

Hybrid (llama.cpp's loader: the arch "lfm2" tensor list in gguf-py's `constants.py`, MODEL_TENSORS[LFM2];
the graph in `src/models/lfm2.cpp`). A layer is a short-convolution layer when its KV-head count is 0
(`hparams.is_recurrent(il)`), so `attention.head_count_kv` is written per layer: 0 for "conv", the KV
heads for "full_attention". `shortconv.l_cache` is HF's conv_L_cache (the kernel size; the state is
l_cache - 1 inputs a layer). The convolution weight [hidden, 1, L] is written as [hidden, L]. The final
norm (HF `embedding_norm`) is gguf's `token_embd_norm`. q/k rows keep HF's order: LFM2's graph rotates
in NeoX ("rotate half") order, the order HF uses (a wrong order would show in the logits at once).

Sliding window: llama.cpp's "llama" graph (`src/models/llama.cpp`: `build_attn_inp_kv`, no window; its
`load_arch_hparams` reads no `attention.sliding_window`) and "mistral3" (`src/models/mistral3.cpp`,
the same) ignore a Mistral checkpoint's window, so a "llama" GGUF of this folder would run without it.
"granite_swa" (`src/models/granite-swa.cpp`) is the Llama graph (RMS norm, RoPE in adjacent pairs,
SwiGLU) on llama.cpp's interleaved-SWA cache (`build_attn_inp_kv_iswa`), reading `sliding_window`
(LLAMA_SWA_TYPE_STANDARD: masked when p_q - p_k >= n_swa, the family's mask) and a per-layer
`sliding_window_pattern` (written all true); its extras are neutral here: `logit_scale` 1 (logits
divided by 1), no residual / embedding scale (absent keys: not applied), the attention scale 0
(1/sqrt(head_dim)), and the attention sinks it requires per layer set to -inf, so that a sink adds
exp(-inf) = 0 to every softmax denominator.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from specverify import installed
from specverify.errors import InputError

from .gguf import add_llama_tensors, write_out

HYBRID_GGUF = "model-f32.gguf"
SLIDING_GGUF = "model-f32-swa.gguf"
STAMP_SUFFIX = ".stamp"             # beside the file: the HF stamp it was written from
NO_SINK = -math.inf                 # an attention sink that takes no probability mass


def _vocab(w, gguf, vocab: int) -> None:
    """A SentencePiece-style vocabulary of the tiny models' token strings; no BOS added (ids are fed)."""
    w.add_tokenizer_model("llama")
    w.add_token_list([f"t{i}" for i in range(vocab)])
    w.add_token_scores([0.0] * vocab)
    w.add_token_types([int(gguf.TokenType.NORMAL)] * vocab)
    w.add_add_bos_token(False)


def _cached(folder: Path, name: str, stamp_name: str):
    """(path, key, fresh?): the file is kept while the folder's own stamp is unchanged."""
    hf_stamp = folder / stamp_name
    if not hf_stamp.exists():
        raise InputError(f"llamacpp: {folder} is not a folder written by the state families (no {stamp_name})")
    path = folder / name
    key = hf_stamp.read_text()
    stamp = path.with_name(path.name + STAMP_SUFFIX)
    return path, key, path.exists() and stamp.exists() and stamp.read_text() == key


def _finish(w, path: Path, tmp: Path, key: str) -> Path:
    write_out(w)
    tmp.replace(path)
    path.with_name(path.name + STAMP_SUFFIX).write_text(key)
    return path


def export_hybrid(folder) -> Path:
    """Write `folder`/model-f32.gguf (arch "lfm2") from a `models.hybrid` folder; kept while unchanged."""
    from . import hybrid
    folder = Path(folder)
    path, key, fresh = _cached(folder, HYBRID_GGUF, hybrid.STAMP)
    if fresh:
        return path
    gguf = installed.load("gguf", "gguf")
    from safetensors.numpy import load_file

    cfg = json.loads((folder / "config.json").read_text())
    tensors = load_file(str(folder / "model.safetensors"))
    layers, types = int(cfg["num_hidden_layers"]), list(cfg["layer_types"])
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LFM2, layers)
    tmp = path.with_suffix(".tmp")
    w = gguf.GGUFWriter(str(tmp), gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LFM2])
    w.add_name(folder.name)
    w.add_context_length(int(cfg["max_position_embeddings"]))
    w.add_embedding_length(int(cfg["hidden_size"]))
    w.add_block_count(layers)
    w.add_feed_forward_length(int(cfg["intermediate_size"]))
    w.add_head_count(int(cfg["num_attention_heads"]))
    w.add_head_count_kv([int(cfg["num_key_value_heads"]) if t == "full_attention" else 0 for t in types])
    w.add_rope_freq_base(float((cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta", 1e6))))
    w.add_layer_norm_rms_eps(float(cfg["norm_eps"]))
    w.add_shortconv_l_cache(int(cfg["conv_L_cache"]))
    w.add_vocab_size(int(cfg["vocab_size"]))
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    _vocab(w, gguf, int(cfg["vocab_size"]))
    for hf_name, t in tensors.items():
        base, _, suffix = hf_name.rpartition(".")
        name = names.get_name(base)
        if name is None:
            raise InputError(f"llamacpp: no GGUF name for LFM2 tensor {hf_name!r}")
        t = np.asarray(t, np.float32)
        if t.ndim == 3:                                         # conv weight [hidden, 1, L] -> [hidden, L]
            t = t[:, 0, :]
        w.add_tensor(f"{name}.{suffix}", np.ascontiguousarray(t))
    return _finish(w, path, tmp, key)


def export_sliding(folder) -> Path:
    """Write `folder`/model-f32-swa.gguf (arch "granite_swa", every layer windowed) from a
    `models.sliding` folder; kept while unchanged."""
    from . import sliding
    folder = Path(folder)
    path, key, fresh = _cached(folder, SLIDING_GGUF, sliding.STAMP)
    if fresh:
        return path
    gguf = installed.load("gguf", "gguf")
    from safetensors.numpy import load_file

    cfg = json.loads((folder / "config.json").read_text())
    tensors = load_file(str(folder / "model.safetensors"))
    layers, heads, kv_heads = int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"]), int(cfg["num_key_value_heads"])
    hidden = int(cfg["hidden_size"])
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, layers)     # the same HF -> GGUF names
    tmp = path.with_suffix(".tmp")
    w = gguf.GGUFWriter(str(tmp), "granite_swa")                      # not in this gguf-py's MODEL_ARCH
    w.add_name(folder.name)
    w.add_context_length(int(cfg["max_position_embeddings"]))
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(int(cfg["intermediate_size"]))
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(int(cfg.get("head_dim") or hidden // heads))
    rope = cfg.get("rope_parameters") or {}
    if rope.get("rope_type", "default") != "default":
        raise InputError(f"llamacpp: rope_type {rope.get('rope_type')!r} is not exported (only the default RoPE)")
    w.add_rope_freq_base(float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0))))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    w.add_vocab_size(int(cfg["vocab_size"]))
    w.add_sliding_window(int(cfg["sliding_window"]))
    w.add_sliding_window_pattern([True] * layers)
    w.add_logit_scale(1.0)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    _vocab(w, gguf, int(cfg["vocab_size"]))
    add_llama_tensors(w, tensors, names, heads, kv_heads)
    for i in range(layers):
        w.add_tensor(f"blk.{i}.attn_sinks.weight", np.full((heads,), NO_SINK, np.float32))   # [heads]
    return _finish(w, path, tmp, key)
