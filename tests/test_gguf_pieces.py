"""The exported GGUF's text vocabulary (`models.pieces`): one character a token, exact both ways.

The codec tests run everywhere; the llama.cpp tests skip without llama-cpp-python (install hint below)
and check on the real tokenizer that text made of the pieces tokenizes into exactly the intended ids,
that ids detokenise back to the same text, that there is no BOS / EOS (the completion API returns the
full length), and that the weights still give the float64 law's logits. Each can fail: a vocabulary
whose pieces merge, a space prefix, a default EOS at id 2 (the "llama" vocabulary's: checked to be
there, so the test knows what it guards against), or a tensor written wrong.
"""

from __future__ import annotations

import numpy as np
import pytest

from specverify.models import pieces

F32 = 0                          # GGML_TYPE_F32: the KV cache in f32 (its default is f16)
INSTALL = ("llama-cpp-python not installed: LLAMACPP_WHEEL=/work/wheels/llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl "
           "bash specverify/findings/install_llamacpp.sh VENV")


def test_pieces_are_distinct_single_characters_and_the_codec_is_exact_both_ways():
    for vocab in (2, 4, 62, 63, 4096):
        ps = pieces.pieces(vocab)
        assert len(ps) == vocab and len(set(ps)) == vocab and all(len(p) == 1 and p != "\\" for p in ps)
    codec = pieces.codec(70)
    rng = np.random.default_rng(0)
    for _ in range(50):
        ids = tuple(int(t) for t in rng.integers(0, 70, size=rng.integers(0, 20)))
        assert codec.decode(codec.encode(ids)) == ids
    assert codec.encode((0, 1, 62)) == "ab\u4e00"
    with pytest.raises(ValueError, match="no piece"):
        codec.decode("ab ")
    with pytest.raises(ValueError):
        pieces.PieceCodec(("a", "a"))
    assert pieces.from_entry({"pieces": "abcd", "layout": "other"}) is None
    assert pieces.from_entry(codec.to_dict()) == codec


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    pytest.importorskip("transformers", reason="pip install 'specverify[transformers]'")
    pytest.importorskip("gguf", reason="pip install 'specverify[engine]'")
    from specverify.models import export as ex
    dest = tmp_path_factory.mktemp("models") / "tiny"
    ex.write("tiny-llama", dest, vocab=4, seed=0, fmt="both")
    return dest


def test_the_manifest_records_the_gguf_pieces_and_only_the_gguf_gets_the_codec(export):
    from specverify.models import export as ex
    manifest = ex.read_manifest(export)
    for role in ("target", "draft"):
        entry = manifest[role]["gguf_text"]
        assert entry["pieces"] == "abcd" and entry["tokenizer"] == "rwkv" and entry["differs_from_tokenizer_json"]
    assert ex.served_codec(str(export / "target" / "model-f32.gguf")) == pieces.codec(4)
    assert ex.served_codec(str(export / "target")) is None          # the transformers folder keeps its words
    assert ex.served_codec("/nonexistent/model.gguf") is None


@pytest.fixture(scope="module")
def llama_cpp():
    return pytest.importorskip("llama_cpp", reason=INSTALL)


def _llm(llama_cpp, path):
    return llama_cpp.Llama(model_path=str(path), n_ctx=128, logits_all=True, type_k=F32, type_v=F32, verbose=False)


def test_llama_cpp_tokenizes_the_pieces_into_the_intended_ids_and_back(export, llama_cpp):
    codec = pieces.codec(4)
    llm = _llm(llama_cpp, export / "target" / "model-f32.gguf")
    assert llm.n_vocab() == 4 and llm.token_bos() == -1 and llm.token_eos() == -1
    assert not any(llama_cpp.llama_vocab_is_eog(llm._model.vocab, t) for t in range(4))
    rng = np.random.default_rng(1)
    cases = [tuple(range(4)), (2, 2, 2), (1,)] + [tuple(int(t) for t in rng.integers(0, 4, size=12)) for _ in range(20)]
    for ids in cases:
        text = codec.encode(ids)
        assert llm.tokenize(text.encode(), add_bos=True, special=True) == list(ids), text   # add_bos: none to add
        assert llm.detokenize(list(ids)).decode() == text
    # the completion API (the server's) does not stop at id 2, and its text reads back to its tokens
    out = llm.create_completion(codec.encode((1,)), max_tokens=24, temperature=1.0, seed=7, logprobs=1)["choices"][0]
    assert out["finish_reason"] == "length" and len(out["logprobs"]["tokens"]) == 24
    assert codec.decode(out["text"]) == codec.decode("".join(out["logprobs"]["tokens"]))


def test_the_text_export_keeps_the_float64_laws_logits(export, llama_cpp):
    from specverify.models import tiny
    target = tiny.tabulated(export / "target")
    llm = _llm(llama_cpp, export / "target" / "model-f32.gguf")
    for prefix in [(1,), (1, 2), (3, 0, 2, 1, 1)]:
        llm.reset()
        llm.eval(list(prefix))
        got = np.asarray(llm.scores[len(prefix) - 1], np.float64)[:4]
        want = target.logits(prefix)
        assert np.abs(got - want).max() <= 1e-5 * max(1.0, np.abs(want).max()), (prefix, got, want)


def test_the_word_vocabulary_would_stop_at_id_2(export, tmp_path, llama_cpp):
    """Why the text export is not the "llama" vocabulary of the folder's words: there llama.cpp's default
    EOS is the ordinary word 2 (and a text prompt of the words aborts the process: not run here)."""
    import shutil

    from specverify.models import gguf
    folder = tmp_path / "target"
    shutil.copytree(export / "target", folder)
    (folder / gguf.STAMP).unlink()
    llm = _llm(llama_cpp, gguf.export(folder, text=False))
    assert llm.token_eos() == 2 and llama_cpp.llama_vocab_is_eog(llm._model.vocab, 2)
