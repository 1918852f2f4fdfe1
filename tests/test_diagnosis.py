"""A failing audit's diagnosis (issue 32): the worst cells with the role of the token there, and the
zoo's hint, for the issue's three planted bugs in the README's example sampler; none for the correct one.

Each audit: seed 0, 5000 samples per problem, the checks marginal, joint, endpoints, fixed budgets,
family-wise alpha 1e-3 (so the correct sampler fails with probability <= 1e-3; at seed 0 it passes).
The planted bugs are caught far beyond that level (p < 1e-20 on their worst rows at this size, and
impossible tokens for two of them), so the rows named here are not near a threshold."""

import json
from pathlib import Path

import pytest

import specverify
from specverify import diagnosis

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "my_sampler.py"
CHECKS = ["marginal", "joint", "endpoints"]
BUGS = {   # the three planted bugs: name -> (exact text, bug, the zoo mutant that models it, the role)
    "resample_p": ("np.maximum(p[i] - q_i, 0.0)", "p[i]", "mutant:resample-from-p", "recovered token"),
    "coin_le": ("coins.accept[first + i] * q_i[x] < p[i][x]", "coins.accept[first + i] * q_i[x] <= p[i][x]",
                "mutant:coin-ge-zero", "accepted draft"),
    "coin_reused": ("draw(residual, coins.final[b])", "draw(residual, coins.accept[first + i])",
                    "mutant:coin-reused-for-residual", "recovered token"),
}


def audit_file(tmp_path, name, source):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return specverify.audit(f"{path}:factory", samples=5000, checks=CHECKS, stop="fixed", isolated=False)


@pytest.fixture(scope="module")
def audits(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("planted")
    good = EXAMPLE.read_text()
    out = {"good": audit_file(tmp, "good", good)}
    for name, (old, new, _, _) in BUGS.items():
        assert old in good
        out[name] = audit_file(tmp, name, good.replace(old, new))
    return out


def test_a_correct_sampler_gets_no_diagnosis_and_no_hint(audits):
    r = audits["good"]
    assert r.passed and r.diagnosis is None and "diagnosis" not in r.to_dict()
    assert "hint" not in str(r) and "worst cell" not in str(r)


@pytest.mark.parametrize("bug", list(BUGS))
def test_each_planted_bug_names_the_token_role_and_the_closest_zoo_mutant(audits, bug):
    _, _, mutant, role = BUGS[bug]
    r = audits[bug]
    assert not r.passed
    worst = r.diagnosis["worst"]
    assert worst and worst[0]["role"] == role, worst
    closest = [m["mutant"] for m in r.diagnosis["hint"]["closest"]]
    assert mutant in closest, closest
    text = str(r)
    assert f"as {role}" in text and "hint: closest known bugs:" in text and mutant.removeprefix("mutant:") in text
    # the same diagnosis in JSON, and read back from JSON
    doc = json.loads(json.dumps(r.to_dict()))
    assert doc["diagnosis"]["hint"]["closest"][0]["mutant"] == closest[0]
    assert diagnosis.diagnose(doc)["hint"]["closest"] == r.diagnosis["hint"]["closest"]


def test_resample_from_p_is_named_first_and_its_recovered_tokens_are_impossible(audits):
    r = audits["resample_p"]
    assert r.diagnosis["hint"]["closest"][0]["mutant"] == "mutant:resample-from-p"
    assert r.diagnosis["worst"][0]["impossible"]
    assert "exact probability 0 (impossible)" in str(r)


def test_the_coin_boundary_bug_is_closest_to_the_coin_mutants(audits):
    closest = [m["mutant"] for m in audits["coin_le"].diagnosis["hint"]["closest"]]
    assert closest[0] in ("mutant:coin-ge-zero", "mutant:coin-one-past-cdf"), closest
    assert not any(m in closest for m in ("mutant:resample-from-p", "mutant:coin-reused-for-residual"))


def test_sigma_of_a_cell_and_the_roles_of_violations():
    row = {"name": "chain.marginal[x,pos=0]", "verdict": "fail",
           "data": {"roles": {"names": ["accepted draft", "recovered token"], "cells": [0, 1],
                              "observed": [[100, 0], [0, 30]], "expected": [[100.0, 0.0], [0.0, 10.0]]}}}
    (worst,) = diagnosis.worst_cells([row])
    assert (worst["cell"], worst["role"], worst["sigma"]) == (1, "recovered token", pytest.approx(20 / 10 ** 0.5))
    exact = {"name": "chain.zero_prob[coin=0.0]", "verdict": "fail", "data": {"violations": [
        "request 0 (drafts [0, 5]) emitted token 0 of probability 0 at position 0",
        "request 1 (drafts [0]) emitted token 3 of probability 0 at position 1",
        "request 2 (drafts [0, 5]) emitted token 4 of probability 0 at position 1"]}}
    roles = {(c["cell"], c["role"]) for c in diagnosis.cells_of(exact)}
    assert roles == {(0, "accepted draft"), (3, "bonus token"), (4, "recovered token")}
    # a passing row is never a worst cell; cells expected fewer than MIN_EXPECTED times are not ranked
    assert diagnosis.worst_cells([{**row, "verdict": "pass"}]) == []
    tiny = {"name": "r", "verdict": "fail", "data": {"observed": [1, 99], "expected": [0.01, 99.99]}}
    assert diagnosis.worst_cells([tiny])[0]["cell"] == 1


def test_the_committed_signatures_are_the_committed_zoo_summary():
    """signatures.json's check pattern per mutant is what reports/zoo/summary.json holds (regenerate
    with `specverify.diagnosis.write_signatures()` after a new zoo run)."""
    committed = json.loads(diagnosis.SIGNATURES.read_text())["mutants"]
    fresh = diagnosis.signatures_from(json.loads((ROOT / "reports" / "zoo" / "summary.json").read_text()))
    assert set(committed) == set(fresh)
    for name, sig in fresh.items():
        assert {k: committed[name][k] for k in sig} == sig, name


def test_a_lossy_acceptance_knob_is_closest_to_the_acceptance_mutants():
    """SGLang's threshold_acc = 0.9 (a lossy rule that accepts too often): the hint names the zoo's
    acceptance mutants, not the residual ones (seed 0, 20000 samples, alpha 1e-3; the rows fail at p < 1e-10)."""
    r = specverify.audit("lossy:threshold_acc=0.9", samples=20_000, checks=["marginal", "joint", "acceptance"],
                         isolated=False)
    closest = [m["mutant"] for m in r.diagnosis["hint"]["closest"]]
    assert closest[0] in ("mutant:threshold_acc=0.5", "mutant:threshold_single=0.3", "mutant:threshold-on-p"), closest


def test_the_report_shows_the_diagnosis_and_the_failing_rows_first(audits, tmp_path):
    from specverify.render import write_report

    write_report([audits["resample_p"].to_dict()], str(tmp_path / "bad"))
    md = (tmp_path / "bad" / "README.md").read_text()
    assert "### Diagnosis" in md and "as recovered token" in md and "hint: closest known bugs: resample-from-p" in md
    verdicts = md[md.index("### Verdicts"):]
    assert verdicts.index("| FAIL") < verdicts.index("passing")     # failing rows first, the rest (passing, skipped) folded
    write_report([audits["good"].to_dict()], str(tmp_path / "good"))
    assert "Diagnosis" not in (tmp_path / "good" / "README.md").read_text()
