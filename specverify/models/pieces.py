"""The text vocabulary of the tiny Llamas' GGUF as `specverify models write` exports it: one character a token.

Why not the HF folder's words "t0".."t{V-1}": the folder's tokenizer splits text on whitespace (WordLevel);
llama.cpp cannot. Its SentencePiece ("llama") vocabulary turns spaces into "▁" and prepends one, merges
characters only through pieces that are themselves tokens, and emits any leftover character as a byte
token "<0xNN>" -- a vocabulary without byte tokens aborts the server on the first text prompt
(std::out_of_range from `llama_vocab::byte_to_token`, src/llama-vocab.cpp). It also makes ids 1 and 2
BOS and EOS by default whatever the file says (`llama_vocab::impl::load`: a "tokenizer.ggml.eos_token_id"
outside the vocabulary keeps the default), so the completion API would stop at the ordinary word 2 and
no run of the law's length would come back.

So the export writes the vocabulary llama.cpp calls "rwkv" (`llm_tokenizer_rwkv_session::tokenize`):
a greedy longest match over the pieces, no space prefix, no BOS, no EOS, no byte fallback (a character
that starts no piece becomes the unknown token, which this vocabulary does not have: llama.cpp refuses
the prompt, it does not abort). With one character a piece -- `PIECES`, never a backslash, the one
character that vocabulary's pieces escape -- every text made of them tokenizes into exactly one id a
character, and any run of ids detokenises into its characters, so both directions are exact.

    pieces(V)               the V one-character pieces, id order ("a".."z", "A".."Z", "0".."9", then CJK)
    PieceCodec(pieces)      encode(ids) -> text, decode(text) -> ids (ValueError naming a character that
                            is no piece), piece(id)
    multibyte_codec(V)      a toy text of byte pieces (`BytePieceCodec`: a quote, a byte pair forming "€",
                            an emoji, "é"): what `specverify serve --toy-text multibyte` and the engine level
                            stream, so the stream row sees multi-byte characters split across tokens

The transformers folder keeps its words (its ids and law are what the mlx and vLLM reports audited);
the manifest records each role's GGUF pieces (`MANIFEST_ENTRY`), and the server-level client maps text
and ids through them for a server that serves the GGUF (`server.client.ServerClient.codec`).
"""

from __future__ import annotations

import string
from dataclasses import dataclass

ASCII = string.ascii_lowercase + string.ascii_uppercase + string.digits       # 62 one-byte pieces
CJK_FIRST = 0x4E00            # then CJK Unified Ideographs, three UTF-8 bytes each (20,992 of them)
CJK_COUNT = 0x9FFF - CJK_FIRST + 1
TOKENIZER = "rwkv"            # llama.cpp's vocabulary kind: greedy longest match, no BOS / EOS / space prefix
LAYOUT = "pieces-1"           # the GGUF vocabulary layout (a change rewrites exported files)


def pieces(vocab: int) -> list:
    """The `vocab` one-character pieces, in id order."""
    vocab = int(vocab)
    if not 1 <= vocab <= len(ASCII) + CJK_COUNT:
        raise ValueError(f"no {vocab} one-character pieces")
    extra = max(0, vocab - len(ASCII))
    return list(ASCII[:vocab]) + [chr(CJK_FIRST + i) for i in range(extra)]


@dataclass(frozen=True)
class PieceCodec:
    """Text <-> ids of a one-character-a-token vocabulary (exact both ways)."""
    pieces: tuple

    def __post_init__(self):
        if any(len(p) != 1 or p == "\\" for p in self.pieces) or len(set(self.pieces)) != len(self.pieces):
            raise ValueError("a PieceCodec needs distinct one-character pieces (no backslash)")
        object.__setattr__(self, "_ids", {p: i for i, p in enumerate(self.pieces)})

    @property
    def vocab(self) -> int:
        return len(self.pieces)

    def piece(self, token: int) -> str:
        return self.pieces[int(token)]

    def encode(self, ids) -> str:
        return "".join(self.pieces[int(t)] for t in ids)

    def decode(self, text: str) -> tuple:
        index = self._ids
        out = []
        for ch in text:
            if ch not in index:
                raise ValueError(f"character {ch!r} is no piece of the {self.vocab}-token vocabulary")
            out.append(index[ch])
        return tuple(out)

    def token(self, piece: str) -> int | None:
        """The id of one piece, or None."""
        return self._ids.get(piece)

    def to_dict(self) -> dict:
        return {"tokenizer": TOKENIZER, "layout": LAYOUT, "pieces": "".join(self.pieces), "join": ""}


# A toy vocabulary whose text is not ASCII (the stream row's multi-byte case): a quote, the lead bytes of
# "€" (E2 82) and its last byte (AC) as two tokens -- a byte-fallback pair forming one character, and
# alone an unfinished UTF-8 sequence --, a 4-byte emoji, then "é" (2 bytes) and ASCII letters.
MULTIBYTE_PIECES = (b'"', b"\xe2\x82", b"\xac", "\U0001F600".encode(), "\u00e9".encode()) + tuple(
    c.encode() for c in ASCII)
MULTIBYTE_LAYOUT = "bytes-1"


@dataclass(frozen=True)
class BytePieceCodec:
    """ids -> text of a vocabulary of byte pieces: the pieces' bytes joined, decoded as UTF-8 with an
    unfinished or invalid sequence as U+FFFD (errors="replace", as a detokenizer shows a lone byte token).
    One way only: such text does not always map back to ids."""
    pieces: tuple

    def __post_init__(self):
        if any(not isinstance(p, bytes) or not p for p in self.pieces) or len(set(self.pieces)) != len(self.pieces):
            raise ValueError("a BytePieceCodec needs distinct non-empty byte pieces")

    @property
    def vocab(self) -> int:
        return len(self.pieces)

    def piece(self, token: int) -> str:
        return self.pieces[int(token)].decode("utf-8", errors="replace")

    def encode(self, ids) -> str:
        return b"".join(self.pieces[int(t)] for t in ids).decode("utf-8", errors="replace")

    def to_dict(self) -> dict:
        return {"layout": MULTIBYTE_LAYOUT, "pieces": [p.hex() for p in self.pieces]}


def from_served(entry) -> BytePieceCodec | None:
    """The byte-piece codec our server names in /v1/models ("specverify_text", `BytePieceCodec.to_dict`), or None."""
    if not isinstance(entry, dict) or entry.get("layout") != MULTIBYTE_LAYOUT:
        return None
    if not isinstance(entry.get("pieces"), list):
        return None
    try:
        return BytePieceCodec(tuple(bytes.fromhex(p) for p in entry["pieces"]))
    except (TypeError, ValueError):
        return None


def multibyte_codec(vocab: int) -> BytePieceCodec:
    """The first `vocab` of MULTIBYTE_PIECES (V = 4: the quote, the euro sign's byte pair, the emoji)."""
    if not 1 <= int(vocab) <= len(MULTIBYTE_PIECES):
        raise ValueError(f"no {vocab} multi-byte pieces (at most {len(MULTIBYTE_PIECES)})")
    return BytePieceCodec(MULTIBYTE_PIECES[:int(vocab)])


def codec(vocab: int) -> PieceCodec:
    return PieceCodec(tuple(pieces(vocab)))


def from_entry(entry) -> PieceCodec | None:
    """The codec a manifest role entry's "gguf_text" records, or None (an older manifest has none)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("pieces"), str) or entry.get("layout") != LAYOUT:
        return None
    return PieceCodec(tuple(entry["pieces"]))


__all__ = ["pieces", "codec", "PieceCodec", "from_entry", "TOKENIZER", "LAYOUT", "BytePieceCodec", "multibyte_codec",
           "MULTIBYTE_PIECES"]
