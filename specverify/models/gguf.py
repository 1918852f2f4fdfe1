"""GGUF files: reading one (metadata, and tensors dequantised to fp32 or kept in their Q4_1 / Q8_0
blocks), and writing a tiny HF Llama folder (`models.tiny.build`) as one for llama.cpp, f32 throughout.

Reading (`read_gguf`) uses the `gguf` package's reader and dequantize helpers; with `quantized=True`
the block-quantized matrices stay in their blocks (`kernels.quant.QuantizedWeight`). A missing,
truncated or foreign file is a one-line InputError.

Writing (`export`): the writer is llama.cpp's own Python package `gguf` (gguf-py, from the llama.cpp
repository): `gguf.GGUFWriter` for the file, `gguf.get_tensor_name_map(MODEL_ARCH.LLAMA, n)` for the
tensor names. Nothing is quantized (file type ALL_F32), so llama.cpp computes with the very weights
whose float64 forward gives the law.

llama.cpp's own converter (`convert_hf_to_gguf.py`, in the llama.cpp tree that llama-cpp-python's
sdist vendors) is not used: on a tiny folder it first needs `sentencepiece` (ModuleNotFoundError),
then, after tokenizer.model and a Llama BPE tokenizer are not found, it hashes the tokenizer's
output on a test string and stops at "NotImplementedError: BPE pre-tokenizer was not recognized -
update get_vocab_base_pre()" (with extra_tokens < 3 at "WordLevel error: Missing [UNK] token"):
it accepts only tokenizers it recognises, and the tiny models' WordLevel tokenizer is not one.
Two vocabularies (`export(folder, text=...)`):

- words (the in-process adapter, which feeds token ids): a "llama" (SentencePiece-style) vocabulary of
  the folder's token strings "t0".."t{V-1}" with score 0 and type NORMAL. Without BOS / EOS keys
  llama.cpp assumes its SentencePiece defaults (BOS 1, EOS 2): `Llama.generate` never stops at EOS
  (only the completion API does) and never adds BOS to a token-id prompt, so those ids are ordinary
  tokens here. A *text* prompt aborts llama.cpp on this vocabulary (no byte tokens for the spaces).
- text (`specverify models write`, for servers that take text prompts): the one-character "rwkv"
  vocabulary of `models.pieces`: exact text <-> ids, no BOS, no EOS (why: that module's docstring).

Layout: HF's q_proj / k_proj rows are ordered for the "rotate half" RoPE; llama.cpp's LLAMA graph
rotates adjacent pairs (its "normal" RoPE), so each head's rows are reordered from (half, i) to
(i, half) -- the same reordering llama.cpp's converter applies to Llama checkpoints. A wrong
reordering shows at once: the engine's logits would not match the float64 law (tests/test_llamacpp.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specverify import installed
from specverify.errors import InputError

from . import pieces, tiny

GGUF_NAME = "model-f32.gguf"
STAMP = "specverify-gguf.json"        # the HF stamp it was written from; a mismatch rewrites the file


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
    import torch

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


def _rope_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """HF rotate-half row order -> llama.cpp's adjacent-pair order, per head ([out, in] weights)."""
    out, inp = w.shape
    d = out // heads
    return w.reshape(heads, 2, d // 2, inp).transpose(0, 2, 1, 3).reshape(out, inp)


def export(folder, text: bool = False) -> Path:
    """Write `folder`/model-f32.gguf from the HF folder (once; kept while the folder is unchanged).

    `text=False` (the in-process adapter, which feeds token ids): a "llama" vocabulary of the folder's
    words. `text=True` (`specverify models write`, for servers that take text): the one-character
    "rwkv" vocabulary of `models.pieces` (no BOS, EOS, space prefix or byte fallback), so that
    llama.cpp tokenizes a text of pieces into exactly one id a character; the folder must then have no
    special tokens."""
    folder = Path(folder)
    hf_stamp = folder / tiny.STAMP
    if not hf_stamp.exists():
        raise InputError(f"llamacpp: {folder} is not a folder written by tiny_llama (models.tiny.build)")
    path, stamp = folder / GGUF_NAME, folder / STAMP
    key = hf_stamp.read_text() + (f"\nvocabulary {pieces.TOKENIZER} {pieces.LAYOUT}" if text else "")
    if path.exists() and stamp.exists() and stamp.read_text() == key:
        return path
    gguf = installed.load("gguf", "gguf")
    from safetensors.numpy import load_file

    cfg = json.loads((folder / "config.json").read_text())
    tensors = load_file(str(folder / "model.safetensors"))
    vocab = int(cfg["vocab_size"])
    layers, heads, kv_heads = int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"]), int(cfg["num_key_value_heads"])
    hidden = int(cfg["hidden_size"])
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, layers)
    tmp = path.with_suffix(".tmp")
    w = gguf.GGUFWriter(str(tmp), "llama")
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
    w.add_vocab_size(vocab)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    special = {cfg.get("eos_token_id"), cfg.get("bos_token_id"), cfg.get("pad_token_id")} - {None}
    if text and special:
        raise InputError(f"llamacpp: {folder} has special tokens; the text vocabulary is written for folders "
                         "without (specverify models write)")
    if text:
        _text_vocabulary(w, gguf, vocab)
    else:
        _word_vocabulary(w, gguf, folder, cfg, vocab, special)
    _write(w, gguf, tensors, names, heads, kv_heads)
    tmp.replace(path)
    stamp.write_text(key)
    return path


def _word_vocabulary(w, gguf, folder: Path, cfg: dict, vocab: int, special: set) -> None:
    """The folder's words as a "llama" vocabulary (module docstring: token-id prompts only)."""
    words = json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]
    by_id = sorted(words.items(), key=lambda kv: kv[1])
    if [i for _, i in by_id] != list(range(vocab)):
        raise InputError(f"llamacpp: {folder}/tokenizer.json does not name ids 0..{vocab - 1} once each")
    w.add_tokenizer_model("llama")
    w.add_token_list([s for s, _ in by_id])
    w.add_token_scores([0.0] * vocab)
    w.add_token_types([int(gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL) for i in range(vocab)])
    if cfg.get("eos_token_id") is not None:
        w.add_eos_token_id(int(cfg["eos_token_id"]))
    if cfg.get("bos_token_id") is not None:
        w.add_bos_token_id(int(cfg["bos_token_id"]))
    w.add_add_bos_token(False)


def _text_vocabulary(w, gguf, vocab: int) -> None:
    """The one-character "rwkv" vocabulary (`models.pieces`): every piece NORMAL, no special-token keys
    (that vocabulary kind defaults every special id to none), no BOS added, no space prefix."""
    w.add_tokenizer_model(pieces.TOKENIZER)
    w.add_token_list(pieces.pieces(vocab))
    w.add_token_scores([0.0] * vocab)
    w.add_token_types([int(gguf.TokenType.NORMAL)] * vocab)
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)


def _write(w, gguf, tensors, names, heads, kv_heads) -> None:
    add_llama_tensors(w, tensors, names, heads, kv_heads)
    write_out(w)


def add_llama_tensors(w, tensors, names, heads, kv_heads) -> None:
    """Add a Llama-layout HF state dict to GGUFWriter `w` under the GGUF names of `names` (the gguf
    package's tensor-name map), float32, q/k rows in llama.cpp's adjacent-pair rotary order."""
    for hf_name, t in tensors.items():
        base, dot, suffix = hf_name.rpartition(".")
        name = names.get_name(base)
        if name is None:
            raise InputError(f"llamacpp: no GGUF name for tensor {hf_name!r}")
        t = np.ascontiguousarray(t, np.float32)
        if base.endswith("self_attn.q_proj"):
            t = _rope_rows(t, heads)
        elif base.endswith("self_attn.k_proj"):
            t = _rope_rows(t, kv_heads)
        w.add_tensor(f"{name}.{suffix}", np.ascontiguousarray(t))


def write_out(w) -> None:
    """Write GGUFWriter `w`'s header, metadata and tensors to its file and close it."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
