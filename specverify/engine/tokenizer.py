"""GPT-2 byte-level BPE from GGUF metadata (tokens, merges, pre-tokenizer), and the chat template.

The tokenizer is an HF `tokenizers` pipeline built from the GGUF's vocabulary and merges:
1. Special tokens (token_type CONTROL/USER_DEFINED, e.g. <|im_start|>) are cut out of the text
   verbatim (leftmost, longest) and map to their ids.
2. Pre-tokenizer "smollm" (as llama.cpp and the HF tokenizer.json define it): every numeric
   character (\\p{N}) is its own piece, then the GPT-2 pattern splits the rest:
   's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+
3. Each piece's UTF-8 bytes are mapped to printable characters (GPT-2's byte-level table) and
   merged by BPE: repeatedly merge the adjacent pair with the lowest merge rank.
Decoding maps the token strings back to bytes and decodes UTF-8 (invalid sequences replaced).
Text with a byte whose character the vocabulary lacks (SmolLM2 has no token for a few control
bytes and bytes that never occur in UTF-8) cannot be encoded: an InputError, not a silent drop.
"""

from __future__ import annotations

from specverify.errors import InputError

TOKEN_TYPE_NORMAL, TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED = 1, 3, 4

_GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
PRE_TOKENIZERS = {
    # name -> list of patterns applied in turn (each splits the pieces of the previous one)
    "smollm": [r"\p{N}", _GPT2_PATTERN],
    "gpt-2": [_GPT2_PATTERN],
    "default": [_GPT2_PATTERN],
}


class Tokenizer:
    """A GGUF's byte-level BPE (an HF `tokenizers` pipeline), its special tokens and its chat template."""

    def __init__(self, tokens, merges, token_types=None, *, pre="smollm", bos_id=None, eos_id=None,
                 chat_template=None):
        from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
        from tokenizers import Tokenizer as HFTokenizer
        if pre not in PRE_TOKENIZERS:
            raise InputError(f"unsupported pre-tokenizer {pre!r}; known: {', '.join(PRE_TOKENIZERS)}")
        self.tokens = list(tokens)
        vocab = {t: i for i, t in enumerate(self.tokens)}
        pairs = [tuple(m.split(" ", 1)) for m in merges]
        for m, pair in zip(merges, pairs):
            if len(pair) != 2 or "".join(pair) not in vocab:
                raise InputError(f"merge {m!r} does not make a token of the vocabulary")
        types = token_types or [TOKEN_TYPE_NORMAL] * len(self.tokens)
        special = [t for i, t in enumerate(self.tokens) if types[i] in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED)]
        self._hf = HFTokenizer(models.BPE(vocab, pairs))
        self._hf.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(p), "isolated") for p in PRE_TOKENIZERS[pre]]
            + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        self._hf.decoder = decoders.ByteLevel()
        self._hf.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
        # byte characters without a token: BPE would drop them, so encode refuses text that has one
        self._missing = set(pre_tokenizers.ByteLevel.alphabet()) - vocab.keys()
        self.bos_id, self.eos_id = bos_id, eos_id
        self.chat_template = chat_template

    @classmethod
    def from_gguf_metadata(cls, m: dict) -> "Tokenizer":
        if m.get("tokenizer.ggml.model") != "gpt2":
            raise InputError(f"unsupported tokenizer model {m.get('tokenizer.ggml.model')!r} (only gpt2 byte-level BPE)")
        try:
            return cls(m["tokenizer.ggml.tokens"], m["tokenizer.ggml.merges"], m.get("tokenizer.ggml.token_type"),
                       pre=m.get("tokenizer.ggml.pre", "default"), bos_id=m.get("tokenizer.ggml.bos_token_id"),
                       eos_id=m.get("tokenizer.ggml.eos_token_id"), chat_template=m.get("tokenizer.chat_template"))
        except KeyError as exc:
            raise InputError(f"GGUF metadata lacks {exc.args[0]}") from None

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    # -- encode / decode -----------------------------------------------------------------------------
    def encode(self, text: str, *, allow_special: bool = True) -> list:
        if self._missing:
            for piece, _ in self._hf.pre_tokenizer.pre_tokenize_str(text):
                if not self._missing.isdisjoint(piece):
                    raise InputError(f"text has a byte the vocabulary has no token for (in {piece!r})")
        self._hf.encode_special_tokens = not allow_special
        return self._hf.encode(text, add_special_tokens=False).ids

    def decode(self, ids, *, skip_special: bool = False) -> str:
        ids = [int(i) for i in ids]
        for i in ids:
            if not 0 <= i < len(self.tokens):
                raise InputError(f"token id {i} outside [0, {len(self.tokens)})")
        return self._hf.decode(ids, skip_special_tokens=skip_special)

    # -- chat --------------------------------------------------------------------------------------
    def apply_chat_template(self, messages, *, add_generation_prompt: bool = True) -> str:
        """Render the GGUF's chat template (jinja2) for a list of {"role", "content"} messages."""
        if not self.chat_template:
            raise InputError("this model has no chat template")
        import jinja2
        env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
        try:
            return env.from_string(self.chat_template).render(
                messages=list(messages), add_generation_prompt=add_generation_prompt,
                bos_token=self.tokens[self.bos_id] if self.bos_id is not None else "",
                eos_token=self.tokens[self.eos_id] if self.eos_id is not None else "")
        except jinja2.TemplateError as exc:
            raise InputError(f"chat template: {exc}") from None

    def encode_chat(self, messages, *, add_generation_prompt: bool = True) -> list:
        return self.encode(self.apply_chat_template(messages, add_generation_prompt=add_generation_prompt))
