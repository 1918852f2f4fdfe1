"""`specverify models write/list` (models/export.py), serving an export with `specverify serve --model DEST`,
and server.law finding the exact law of the served model (server/audit.py `known_law`).

Statistics: the server audits run at --samples 20000 (1000 seeded runs per server.law row), seed 0,
family-wise alpha 1e-3 (Holm): the exact server's audit is deterministic (every run seeded, the engine
batch-invariant), false-alarm probability at most 1e-3 over seeds. The broken server
(`--variant recovered-from-p`, served from the export's GGUF) deviates far beyond the rows' minimum
detectable TV (~0.14 at power 0.99): measured p-values 1e-32 and 1e-98 at this seed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from specverify.cli import main
from specverify.errors import InputError
from specverify.models import export

pytest.importorskip("transformers")
pytest.importorskip("gguf")

VOCAB, SEED = 4, 7
STARTUP_S = 120.0
REAP_S = 10.0
SAMPLES = 20_000


@pytest.fixture(scope="module")
def dest(tmp_path_factory):
    """An export written through the command line (both formats, widened heads too)."""
    d = tmp_path_factory.mktemp("export") / "tiny"
    assert main(["models", "write", "tiny-llama", str(d), "--vocab", str(VOCAB), "--seed", str(SEED),
                 "--head-dim", "64"]) == 0
    return d


def _one_line_exit_2(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("specverify: error:") and "\n" not in err and "Traceback" not in err, err
    return err


# ---------------------------------------------------------------------------------- writing

def test_write_lays_out_both_roles_formats_and_a_manifest_that_matches_the_files(dest):
    manifest = json.loads((dest / export.MANIFEST).read_text())
    assert (manifest["family"], manifest["vocab"], manifest["seed"], manifest["formats"]) == \
        ("tiny-llama", VOCAB, SEED, ["hf", "gguf"])
    for role in export.ROLES:
        for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "model-f32.gguf"):
            assert (dest / role / name).is_file(), (role, name)
        assert set(manifest[role]["sha256"]) == {f"{role}/model.safetensors", f"{role}/model-f32.gguf"}
        assert (dest / manifest["widened"][role] / "config.json").is_file()
        assert json.loads((dest / f"{role}-hd64" / "config.json").read_text())["head_dim"] == 64
    assert "--head-dim 64" in manifest["rebuild"] and f"--seed {SEED}" in manifest["rebuild"]
    assert not list(dest.glob(".*")), "no build locks or temporary folders left in DEST"
    export.find(dest).verify()             # the sha256 in the manifest are those of the files


def test_find_maps_every_path_of_an_export_to_its_role_and_nothing_else(dest, tmp_path):
    cases = {dest: "target", dest / export.MANIFEST: "target", dest / "target": "target",
             dest / "target" / "model-f32.gguf": "target", dest / "draft": "draft", dest / "target-hd64": "target",
             dest / "draft-hd64": "draft"}
    for path, role in cases.items():
        found = export.find(path)
        assert found is not None and found.role == role and found.root == dest.resolve(), path
    for other in (tmp_path, tmp_path / "missing", "tiny:4,7", "smollm2", dest / "target" / "nope"):
        assert export.find(other) is None, other


def test_the_law_is_the_float64_forward_of_the_weights_and_our_engine_computes_it(dest):
    """The manifest's law (float64 of the folder) against our engine's float32 forward of the folder, of
    its GGUF and of the widened copy's law: one function, up to float32 rounding."""
    import torch

    from specverify.engine.loader import load_tiny_folder, load_weights
    law = export.find(dest).law()
    wide = export.find(dest / "target-hd64")
    assert wide.folder == dest.resolve() / "target"      # the law of a widened copy is read from the original
    prefixes = [(1,), (1, 2, 3), (3, 3, 0, 1, 2)]
    for model in (load_tiny_folder(dest / "target"), load_weights(dest / "target" / "model-f32.gguf", weights="fp32")[0]):
        for prefix in prefixes:
            got = _engine_next_logits(model, prefix)
            want = law.logits(prefix)
            assert np.allclose(got, want, atol=1e-5), (prefix, got, want)
    # and the widened transformers folder computes the same function in float64
    from transformers import LlamaForCausalLM
    m = LlamaForCausalLM.from_pretrained(str(dest / "target-hd64"), dtype=torch.float64, attn_implementation="eager")
    with torch.no_grad():
        for prefix in prefixes:
            got = m(torch.tensor([prefix])).logits[0, -1, :VOCAB].numpy()
            assert np.allclose(got, law.logits(prefix), atol=1e-9)


def _engine_next_logits(model, prefix) -> np.ndarray:
    """Our engine's next-token logits after `prefix` (one request's prefill), float64 [V]."""
    from specverify.engine.api import RunOptions, SpecOptions, generate
    from specverify.engine.engine import SamplingParams
    got = {}
    generate(model, None, [list(prefix)], sampling=SamplingParams(max_tokens=1, ignore_eos=True), spec=SpecOptions("none"),
             run=RunOptions(backend="invariant", record_logits=lambda r, j, row: got.__setitem__(j, row.numpy().copy())))
    return np.asarray(got[0], np.float64)


def test_rewriting_replaces_an_earlier_export_whole_and_a_failed_write_leaves_it_as_it_was(tmp_path, monkeypatch):
    d = tmp_path / "m"
    export.write("tiny-llama", d, vocab=3, seed=1, fmt="hf")
    first = json.loads((d / export.MANIFEST).read_text())
    assert first["formats"] == ["hf"] and not (d / "target" / "model-f32.gguf").exists()
    from specverify.models import gguf

    def boom(folder, text=False):
        raise RuntimeError("disk full")
    monkeypatch.setattr(gguf, "export", boom)
    with pytest.raises(RuntimeError):
        export.write("tiny-llama", d, vocab=5, seed=2, fmt="gguf")
    assert json.loads((d / export.MANIFEST).read_text()) == first        # untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]           # no temporary folder left
    monkeypatch.undo()
    export.write("tiny-llama", d, vocab=5, seed=2, fmt="gguf")
    assert json.loads((d / export.MANIFEST).read_text())["vocab"] == 5


def test_a_changed_weight_file_is_an_error_not_a_wrong_law(tmp_path):
    d = tmp_path / "m"
    export.write("tiny-llama", d, vocab=3, seed=1, fmt="hf")
    path = d / "draft" / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(InputError, match="differs from the file"):
        export.find(d / "draft").law()
    export.find(d).law()                   # the target is intact


@pytest.mark.parametrize("argv, words", [
    (["models", "write", "tiny-llama", "{d}", "--vocab", "x"], "--vocab 'x': not an integer"),
    (["models", "write", "tiny-llama", "{d}", "--vocab", "1"], "--vocab 1: outside [2, 4096]"),
    (["models", "write", "tiny-llama", "{d}", "--seed", "-3"], "--seed -3"),
    (["models", "write", "tiny-llama", "{d}", "--format", "onnx"], "--format 'onnx'"),
    (["models", "write", "tiny-llama", "{d}", "--head-dim", "48"], "--head-dim 48"),
    (["models", "write", "tiny-gpt", "{d}"], "unknown model kind 'tiny-gpt'"),
    (["models"], "name an action"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(capsys, tmp_path, argv, words):
    d = tmp_path / "out"
    err = _one_line_exit_2(capsys, [a.format(d=d) for a in argv])
    assert words in err
    assert not d.exists()


def test_a_foreign_non_empty_folder_is_refused(capsys, tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    assert "holds no specverify-models.json" in _one_line_exit_2(capsys, ["models", "write", "tiny-llama", str(tmp_path)])
    assert (tmp_path / "mine.txt").read_text() == "keep me"


def test_list_and_help_name_the_kinds_formats_and_the_law_lookup(capsys):
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "tiny-llama" in out and "hf, gguf" in out
    with pytest.raises(SystemExit) as exc:
        main(["models", "write", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--law-model" in out and "--head-dim" in out and "specverify serve --model DEST" in out


# ---------------------------------------------------------------------------------- law lookup

def test_known_law_from_name_or_law_model_and_none_otherwise(dest):
    from specverify.server.audit import known_law
    assert known_law("tiny:4,7", None).vocab == 4
    assert known_law(str(dest / "target-hd64"), None).source.startswith("tiny-llama:4,7 target")
    assert known_law("my-model", str(dest / "draft")).source.startswith("tiny-llama:4,7 draft")
    assert known_law("my-model", None) is None
    with pytest.raises(InputError, match="law_model 'nowhere'"):
        known_law("my-model", "nowhere")


def test_a_law_too_large_to_enumerate_is_a_skip_listed_as_not_covered():
    from types import SimpleNamespace

    from specverify.battery.base import Context
    from specverify.checks.server import law_rows
    from specverify.server.audit import KnownLaw
    engine = SimpleNamespace(law=KnownLaw(None, 64, "tiny-llama:64,1 target"), client=SimpleNamespace(model="m"))
    rows = law_rows(engine, Context())
    assert [r.verdict for r in rows] == ["skip"] and rows[0].data["not_covered"] and "64^4 runs" in rows[0].detail


def test_law_model_is_refused_for_an_adapter(capsys, dest):
    assert "server audit" in _one_line_exit_2(capsys, ["audit", "reference", "--law-model", str(dest)])


# ---------------------------------------------------------------------------------- served

def _start(tmp: Path, name: str, *args):
    import os
    ready = tmp / f"{name}.url"
    log = open(tmp / f"{name}.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "specverify", "serve", "--port", "0", "--ready-file", str(ready),
                             *args], stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="1"),
                            start_new_session=True)
    return proc, ready, log


def _wait(proc, ready: Path, deadline: float) -> str:
    while time.monotonic() < deadline:
        if ready.exists():
            return ready.read_text().strip()
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before it was ready")
        time.sleep(0.1)
    raise TimeoutError("server not ready in time")


@pytest.fixture(scope="module")
def served(dest, tmp_path_factory):
    """{"spec", "broken", "anonymous", "anonymous64"} -> URL: servers of the export (folder, GGUF, a name
    with no law), and one of a 64-token export under a name with no law (an audit that knows no law
    knows no vocabulary either: its prompts are ids below 64)."""
    pytest.importorskip("fastapi")
    pytest.importorskip("openai")
    tmp = tmp_path_factory.mktemp("served")
    wide = export.write("tiny-llama", tmp / "v64", vocab=64, seed=1, fmt="hf") and tmp / "v64"
    started = {"spec": _start(tmp, "spec", "--model", str(dest), "--spec", "draft"),
               "broken": _start(tmp, "broken", "--model", str(dest / "target" / "model-f32.gguf"), "--spec", "draft",
                                "--variant", "recovered-from-p"),
               "anonymous": _start(tmp, "anonymous", "--model", str(dest), "--spec", "draft",
                                   "--served-model-name", "my-model"),
               "anonymous64": _start(tmp, "anonymous64", "--model", str(wide), "--spec", "draft",
                                     "--served-model-name", "my-model")}
    try:
        deadline = time.monotonic() + STARTUP_S
        yield {k: _wait(p, r, deadline) for k, (p, r, _) in started.items()}
    finally:
        for p, _, _ in started.values():
            if p.poll() is None:
                p.terminate()
        for p, _, log in started.values():
            try:
                p.wait(REAP_S)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(REAP_S)
            log.close()
        assert all(p.poll() is not None for p, _, _ in started.values())


def _law_rows(url, **given):
    from specverify.audit import prepare
    result = prepare(url, {"samples": SAMPLES, "timeout": 60.0, "checks": ("server",), **given}).run()
    return result, [r for r in result.checks if r.name.startswith("server.law")]


def test_server_of_the_export_passes_server_law_with_the_law_found_from_its_name(served, dest):
    result, rows = _law_rows(served["spec"])
    assert [r.verdict for r in rows] == ["pass", "pass"], [r.detail for r in rows]
    assert all(r.n == SAMPLES // 20 and r.p_value is not None and r.min_detectable_tv < 0.2 for r in rows)
    assert all(r.data["law_source"].startswith("tiny-llama:4,7 target") for r in rows)
    assert str((dest / "target").resolve()) in rows[0].name


def test_broken_server_of_the_exports_gguf_fails_server_law(served):
    result, rows = _law_rows(served["broken"])
    assert [r.verdict for r in rows] == ["fail", "fail"], [r.detail for r in rows]
    assert result.verdict == "fail"


def test_a_model_whose_law_the_audit_cannot_know_is_a_skip_listed_as_not_covered(served, dest):
    result, rows = _law_rows(served["anonymous64"])
    assert [r.verdict for r in rows] == ["skip"] and rows[0].data.get("not_covered")
    assert "has no law the audit knows" in result.not_covered["server"]
    result, rows = _law_rows(served["anonymous"], law_model=str(dest))      # named: tested, and it passes
    assert [r.verdict for r in rows] == ["pass", "pass"]
    assert "server.law" not in result.not_covered.get("server", "")
