"""`specverify zoo` at the default sizes: the reference passes, every mutant fails, and each mutant is
caught by every check it is meant for (`zoo.TARGETS`) inside the full battery; the JSON says so.
Also `specverify audit mutant:<name>` as a single command, the CLI's usage errors, and README.md's zoo
matrix: the rendering of the committed zoo report."""

import json
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from specverify.audit import ADAPTER_CHECKS as BATTERY      # the zoo's columns: no server rows
from specverify.render import audit_report
from specverify.zoo import MUTANTS, TARGETS
from specverify.zoo.render import readme_block
from specverify.zoo.run import engine_names, tabulate

ROOT = pathlib.Path(__file__).resolve().parents[1]
README_BLOCK = re.compile(r"```console\n\$ specverify zoo\n.*?```\n", re.S)


def cli(*args):
    return subprocess.run([sys.executable, "-m", "specverify", *args], capture_output=True, text=True, timeout=900)


@pytest.mark.slow      # the whole zoo: ~50 CPU-s (test_battery_checks covers every mutant in CI)
def test_the_zoo_catches_every_mutant_and_passes_the_reference(tmp_path):
    out = tmp_path / "zoo.json"
    proc = cli("zoo", "--json", str(out), "--quiet", "--stop", "fixed", "--no-fail-fast")   # the full matrix, fixed budgets
    assert proc.returncode == 0, proc.stdout + proc.stderr
    zoo = json.loads(out.read_text())
    assert zoo["ok"] is True and zoo["checks"] == BATTERY
    engines = zoo["engines"]
    assert set(engines) == {"reference", "specverify-serving"} | {f"mutant:{m}" for m in MUTANTS}
    assert engines["reference"]["verdict"] == "pass" and engines["reference"]["caught_by"] == []
    row = engines["reference"]["row"]
    assert row.pop("bitwise") == "-"          # a model-engine check: `audit specverify` runs it
    assert row.pop("engine_serving") == "-"   # the serving engine level: specverify-serving's row below
    assert set(row.values()) == {"."}
    serving = engines["specverify-serving"]   # the exact twin of mutants 45-51, 54 and 55: not flagged
    assert serving["verdict"] == "pass" and serving["row"]["engine_serving"] == "."
    for name, checks in TARGETS.items():
        e = engines[f"mutant:{name}"]
        assert e["verdict"] == "fail", name
        for check in checks:
            assert e["row"][check] == "X", (name, check, e["row"])
        assert e["catch_seconds"] is not None
    # the printed matrix has a line per engine and the summary
    assert f"{len(MUTANTS)}/{len(MUTANTS)} mutants caught" in proc.stdout
    for name in MUTANTS:
        assert f"mutant:{name}" in proc.stdout


def test_audit_of_one_mutant_fails_with_exit_1():
    proc = cli("audit", "mutant:coin-ge-zero", "--checks", "endpoints", "--samples", "1000")
    assert proc.returncode == 1, proc.stderr
    assert "FAIL chain.zero_prob[coin=0.0]" in proc.stdout


def test_zoo_usage_errors_are_exit_2():
    proc = cli("zoo", "--only", "mutant:nope")
    assert proc.returncode == 2 and "unknown zoo engine" in proc.stderr
    proc = cli("zoo", "--samples", "10")
    assert proc.returncode == 2 and "--samples" in proc.stderr


def test_zoo_subset_runs_and_a_missed_mutant_or_a_failing_reference_is_not_ok():
    proc = cli("zoo", "--only", "reference,mutant:argmax-tie-highest", "--samples", "2000", "--jobs", "1", "--quiet")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1/1 mutants caught" in proc.stdout

    def audit(verdict, failing=()):
        rows = [{"check": c, "verdict": "fail" if c in failing else "pass"} for c in BATTERY]
        return {"audit": {"verdict": verdict, "checks": rows, "check_seconds": {c: 1.0 for c in BATTERY}}, "seconds": 1.0}

    names = ["reference", "mutant:a", "mutant:b"]
    ok = tabulate(names, {"reference": audit("pass"), "mutant:a": audit("fail", ["greedy"]),
                          "mutant:b": audit("fail", ["runs", "joint"])}, {}, 1.0)
    assert ok.ok and ok.caught_by["mutant:b"] == ["joint", "runs"] and ok.matrix["mutant:a"]["greedy"] == "X"
    missed = tabulate(names, {"reference": audit("pass"), "mutant:a": audit("pass"), "mutant:b": audit("fail", ["runs"])}, {}, 1.0)
    assert not missed.ok and missed.missed() == ["mutant:a"]
    bad_ref = tabulate(names, {"reference": audit("fail", ["joint"]), "mutant:a": audit("fail", ["greedy"]),
                               "mutant:b": audit("fail", ["runs"])}, {}, 1.0)
    assert not bad_ref.ok
    errored = tabulate(names, {"reference": audit("pass"), "mutant:a": {"error": "boom", "seconds": 0.1},
                               "mutant:b": audit("fail", ["runs"])}, {}, 1.0)
    assert not errored.ok and errored.matrix["mutant:a"]["greedy"] == "E"


def test_the_readme_zoo_matrix_is_the_rendering_of_the_committed_zoo_report():
    block = README_BLOCK.search((ROOT / "docs" / "zoo.md").read_text())
    assert block, "docs/zoo.md has no `$ specverify zoo` console block"
    summary = json.loads((ROOT / "reports" / "zoo" / "summary.json").read_text())
    assert block.group(0) == readme_block(summary), "regenerate it: specverify zoo --markdown PATH"
    assert summary["zoo"]["rows"] == engine_names()


def test_the_readme_block_of_a_zoo_run_equals_that_of_its_report():
    def audit(verdict, failing=(), checks=BATTERY):
        rows = [{"check": c, "verdict": "fail" if c in failing else "pass"} for c in checks]
        return {"audit": {"verdict": verdict, "checks": rows, "check_seconds": {c: 1.0 for c in checks}}, "seconds": 1.0}

    sampler = [c for c in BATTERY if c not in ("bitwise", "engine_serving")]   # they apply to no engine here
    names = ["reference", "mutant:a", "mutant:engine-b"]
    zoo = tabulate(names, {"reference": audit("pass", checks=sampler), "mutant:a": audit("pass", checks=sampler),
                           "mutant:engine-b": audit("fail", ["runs"], checks=["runs", "identity"])}, {}, 1.0)
    block = readme_block(zoo.to_dict())
    assert block == readme_block(audit_report.summary([zoo.to_dict()]))
    lines = block.splitlines()
    assert lines[:2] == ["```console", "$ specverify zoo"] and lines[-1] == "```"
    assert lines[2].split() == ["marg", "joint", "accept", "endpt", "compos", "greedy", "seeded", "rng", "runs",
                                "transf", "ident", "eacc", "ainv", "procs", "ranks", "largeV", "ftail", "rare", "hostil",
                                "verdict"]
    assert lines[5].split() == ["mutant:engine-b"] + ["-"] * 8 + ["X", "-", "."] + ["-"] * 8 + ["FAIL"]
    assert lines[-2] == "zoo: FAILED -- reference PASS, 1/2 mutants caught (missed: mutant:a)"


def test_the_compiled_fp32_cumsum_mutant_is_numpys_float32_cumsum_draw():
    """fp32-cumsum-draw is compiled (its far_tail audit passes 2 MB rows); its tokens are those of the
    numpy statement of the bug it models: a sequential float32 np.cumsum and #{cdf <= coin * total},
    at the coin endpoints and with zero weights and an all-zero end."""
    from specverify.battery import large_problems as lp
    from specverify.zoo.precision import Fp32CumsumDraw

    def numpy_statement(w, coin):
        cdf = np.cumsum(w.astype(np.float32), axis=1)
        token = (cdf <= (coin * cdf[:, -1].astype(np.float64))[:, None]).sum(axis=1)
        past = token == w.shape[1]
        token[past] = w.shape[1] - 1 - np.argmax((w[past] > 0)[:, ::-1], axis=1)
        return token

    rng = np.random.default_rng(0)
    mutant = Fp32CumsumDraw()
    for vocab in (5, 64, 1000, 4096):
        for trial in range(3):
            w = rng.dirichlet(np.full(vocab, 0.3), size=16)
            w[:, rng.integers(0, vocab, 3)] = 0
            if trial == 2:
                w[:, -vocab // 3:] = 0
            coin = rng.random(16)
            coin[0], coin[1] = 0.0, np.nextafter(1.0, 0)
            assert (mutant.draw(w, coin) == numpy_statement(w, coin)).all()
    tail = np.repeat(lp.far_tail().target, 8, axis=0)
    coin = rng.random(8)
    assert (mutant.draw(tail, coin) == numpy_statement(tail, coin)).all()


def test_the_pruned_fp32_race_is_the_full_race():
    """fp32-exponential-race skips ids that cannot beat the best score so far (w / E_MIN <= best): the
    tokens are those of the full race, which hashes and logs every id, on random rows, a far-tail row
    and a far-tail row reversed (the tail first, where nothing can be skipped)."""
    import numba

    from specverify.battery import large_problems as lp
    from specverify.zoo import precision

    @numba.njit
    def full_race(w, seeds, out):
        n, v = w.shape
        for i in range(n):
            best, arg = -1.0, 0
            for k in range(v):
                if w[i, k] > 0:
                    m = precision._splitmix64(seeds[i] ^ (np.uint64(k) * np.uint64(0xD1B54A32D192ED03))) >> np.uint64(40)
                    if m == 0:
                        continue
                    s = w[i, k] / -np.log(np.float32(np.float64(m) * precision.U24))
                    if s > best:
                        best, arg = s, k
            out[i] = arg

    rng = np.random.default_rng(1)
    tail = lp.far_tail().target
    cases = [rng.dirichlet(np.full(v, a), size=32) for v in (2, 7, 100, 5000) for a in (0.05, 1.0)]
    cases += [np.repeat(tail, 32, axis=0), np.repeat(tail[:, ::-1].copy(), 8, axis=0)]
    for w in cases:
        seeds = rng.random(w.shape[0]).view(np.uint64)
        want, got = np.empty(w.shape[0], np.int64), np.empty(w.shape[0], np.int64)
        full_race(w, seeds, want)
        precision._race_fp32(w, seeds, got)
        assert (want == got).all()
