"""GPT-2 byte-level BPE from GGUF metadata (tokens, merges, pre-tokenizer), and the chat template.

Encoding, in order:
1. Special tokens (token_type CONTROL/USER_DEFINED, e.g. <|im_start|>) are cut out of the text
   verbatim and map to their ids.
2. Pre-tokenizer "smollm" (as llama.cpp and the HF tokenizer.json define it): every numeric
   character (\\p{N}) is its own piece, then the GPT-2 pattern splits the rest:
   's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+
3. Each piece's UTF-8 bytes are mapped to printable characters (GPT-2's bytes_to_unicode table)
   and merged by BPE: repeatedly merge the adjacent pair with the lowest merge rank.
Decoding maps the token strings back to bytes and decodes UTF-8 (invalid sequences replaced;
`decode_bytes` gives the raw bytes for streaming).
"""

from __future__ import annotations

from functools import lru_cache

from specverify.errors import InputError

TOKEN_TYPE_NORMAL, TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED = 1, 3, 4

_GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
PRE_TOKENIZERS = {
    # name -> list of patterns applied in turn (each splits the pieces of the previous one)
    "smollm": [r"\p{N}", _GPT2_PATTERN],
    "gpt-2": [_GPT2_PATTERN],
    "default": [_GPT2_PATTERN],
}


def bytes_to_unicode() -> dict:
    """GPT-2's reversible byte -> printable character table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


class Tokenizer:
    def __init__(self, tokens, merges, token_types=None, *, pre="smollm", bos_id=None, eos_id=None,
                 chat_template=None):
        import regex
        self.tokens = list(tokens)
        self.vocab = {t: i for i, t in enumerate(self.tokens)}
        self.ranks = {}
        for r, m in enumerate(merges):
            a, _, b = m.partition(" ")
            self.ranks[(a, b)] = r
        types = token_types or [TOKEN_TYPE_NORMAL] * len(self.tokens)
        self.special = {t: i for i, t in enumerate(self.tokens)
                        if types[i] in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED)}
        self.special_ids = set(self.special.values())
        if pre not in PRE_TOKENIZERS:
            raise InputError(f"unsupported pre-tokenizer {pre!r}; known: {', '.join(PRE_TOKENIZERS)}")
        self.patterns = [regex.compile(p) for p in PRE_TOKENIZERS[pre]]
        self.special_re = (regex.compile("|".join(regex.escape(s) for s in sorted(self.special, key=len, reverse=True)))
                           if self.special else None)
        self.byte_enc = bytes_to_unicode()
        self.byte_dec = {c: b for b, c in self.byte_enc.items()}
        self.bos_id, self.eos_id = bos_id, eos_id
        self.chat_template = chat_template
        self._bpe = lru_cache(maxsize=65536)(self._bpe_uncached)
        self._token_bytes = [self._to_bytes(t, i) for i, t in enumerate(self.tokens)]

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

    # -- encode ------------------------------------------------------------------------------------
    def _bpe_uncached(self, word: str) -> tuple:
        parts = list(word)
        ranks = self.ranks
        while len(parts) > 1:
            best, best_i = None, -1
            for i in range(len(parts) - 1):
                r = ranks.get((parts[i], parts[i + 1]))
                if r is not None and (best is None or r < best):
                    best, best_i = r, i
            if best is None:
                break
            merged = parts[best_i] + parts[best_i + 1]
            # merge every occurrence of this pair, left to right
            out, i = [], 0
            a, b = parts[best_i], parts[best_i + 1]
            while i < len(parts):
                if i < len(parts) - 1 and parts[i] == a and parts[i + 1] == b:
                    out.append(merged)
                    i += 2
                else:
                    out.append(parts[i])
                    i += 1
            parts = out
        ids = []
        for p in parts:
            if p in self.vocab:
                ids.append(self.vocab[p])
            else:  # not in the vocabulary: fall back to single byte-characters
                ids.extend(self.vocab[c] for c in p)
        return tuple(ids)

    def _pretokenize(self, text: str) -> list:
        pieces = [text]
        for pat in self.patterns:
            nxt = []
            for piece in pieces:
                pos = 0
                for m in pat.finditer(piece):
                    if m.start() > pos:
                        nxt.append(piece[pos:m.start()])
                    nxt.append(m.group())
                    pos = m.end()
                if pos < len(piece):
                    nxt.append(piece[pos:])
            pieces = nxt
        return [p for p in pieces if p]

    def _encode_ordinary(self, text: str) -> list:
        ids = []
        for piece in self._pretokenize(text):
            ids.extend(self._bpe("".join(self.byte_enc[b] for b in piece.encode("utf-8"))))
        return ids

    def encode(self, text: str, *, allow_special: bool = True) -> list:
        if not allow_special or self.special_re is None:
            return self._encode_ordinary(text)
        ids, pos = [], 0
        for m in self.special_re.finditer(text):
            ids.extend(self._encode_ordinary(text[pos:m.start()]))
            ids.append(self.special[m.group()])
            pos = m.end()
        ids.extend(self._encode_ordinary(text[pos:]))
        return ids

    # -- decode ------------------------------------------------------------------------------------
    def _to_bytes(self, tok: str, i: int) -> bytes:
        if i in getattr(self, "special_ids", ()):
            return tok.encode("utf-8")
        try:
            return bytes(self.byte_dec[c] for c in tok)
        except KeyError:
            return tok.encode("utf-8")

    def decode_bytes(self, ids, *, skip_special: bool = False) -> bytes:
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < len(self.tokens):
                raise InputError(f"token id {i} outside [0, {len(self.tokens)})")
            if skip_special and i in self.special_ids:
                continue
            out.append(self._token_bytes[i])
        return b"".join(out)

    def decode(self, ids, *, skip_special: bool = False) -> str:
        return self.decode_bytes(ids, skip_special=skip_special).decode("utf-8", errors="replace")

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
