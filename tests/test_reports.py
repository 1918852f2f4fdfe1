"""Reports: residuals agree with the audit's statistic, QQ calibration, the page and its Markdown twin
show every check and every image decodes, atomic writes (failure and ^C leave nothing half-written),
the zoo matrix, progress bars, the CLI contract, and (slow) the page rendered in headless Chromium."""

import io
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from specverify import stats
from specverify.zoo.lossy import LossyEngine
from specverify.adapters.reference import ReferenceEngine
from specverify.audit import Context, run_audit
from specverify.errors import InputError
from specverify.progress import NULL, Progress, as_progress
from specverify.render import analysis as A
from specverify.render import audit_report, doc
from specverify.render.atomic import MARKER, atomic_dir
from specverify.render.pngcheck import check_png

SAMPLES = 3000


@pytest.fixture(scope="module")
def full_audits():
    """A passing (two seeds) and a failing audit (small samples, the marginal and joint checks)."""
    ref = run_audit(ReferenceEngine(), Context(seed=0, samples=SAMPLES), ["marginal", "joint"]).to_dict()
    ref1 = run_audit(ReferenceEngine(), Context(seed=1, samples=SAMPLES), ["marginal", "joint"]).to_dict()
    bad = run_audit(LossyEngine("threshold_acc=0.5"), Context(seed=0, samples=SAMPLES), ["marginal", "joint"]).to_dict()
    return ref, ref1, bad


def subset(result, keep=("dirichlet", "zero-mass")):
    """The result with only some problems' checks (fewer plots: the page tests stay fast)."""
    r = dict(result)
    r["checks"] = [c for c in result["checks"] if any(k in c["name"] for k in keep)]
    return r


@pytest.fixture(scope="module")
def audits(full_audits):
    return tuple(subset(r) for r in full_audits)


# ====================================================================== analysis

def test_pooled_residuals_reproduce_pearson_statistic():
    rng = np.random.default_rng(3)
    probs = rng.dirichlet(np.full(40, 0.3))          # many small cells: pooling happens
    probs = probs[probs > 0]
    probs /= probs.sum()
    counts = rng.multinomial(2000, probs)
    res = stats.pearson(counts, probs, min_expected=A.DISPLAY_MIN_EXPECTED)
    assert res.p_value_method == "asymptotic"
    t = A.cell_table({"observed": counts.tolist(), "expected": (probs * 2000).tolist()})
    assert t.pooled and len(t.labels) == res.cells
    assert t.chi2 == pytest.approx(res.statistic, rel=1e-9)
    assert t.observed.sum() == 2000


def test_residuals_match_every_statistical_check_of_a_real_audit(full_audits):
    ref, _, bad = full_audits
    n = exact = 0
    for r in (ref, bad):
        for c in A.statistical_checks(r):
            t = A.cell_table(c["data"])
            if t is None or "asymptotic" not in c["detail"]:
                continue
            # equal up to pooling ties: the check pools n * law.probs, the report n * probs rebuilt from
            # the saved expected counts; cells of (nearly) equal expectation can pool differently
            assert t.chi2 == pytest.approx(c["statistic"], rel=0.02), c["name"]
            exact += t.chi2 == pytest.approx(c["statistic"], rel=1e-9)
            n += 1
    assert n >= 10 and exact >= 0.9 * n


def test_impossible_cell_gets_infinite_residual_and_labels_come_from_data():
    t = A.cell_table({"observed": [50, 30, 2], "expected": [60.0, 22.0, 0.0], "cells": [7, 8, 9]})
    assert t.labels[:2] == ["7", "8"] and "impossible" in t.labels[2]
    assert np.isinf(t.residuals[2])
    assert t.residuals[0] == pytest.approx((50 - 60) / np.sqrt(60))


def test_generic_data_without_counts_is_shown_as_values():
    assert A.cell_table({"accepted": 10, "alpha": 0.5}) is None
    assert A.cell_table({"observed": [1, 2], "expected": [1.0]}) is None
    assert A.extra_data({"observed": [1], "expected": [1.0], "alpha": 0.5, "holm_adjusted_p": 0.1}) == {"alpha": 0.5}


def test_qq_of_uniform_p_values_stays_in_its_band_and_biased_ones_do_not():
    # 200 seeded uniform samples: the 99% pointwise band holds ~99% of points (we ask for >= 95%,
    # a binomial false alarm far below 1e-6); KS p > 1e-3 has false-alarm rate 1e-3 at this seed set
    rng = np.random.default_rng(11)
    q = A.qq(rng.random(200))
    inside = np.mean((q.observed >= q.band_lo) & (q.observed <= q.band_hi))
    assert inside >= 0.95 and q.ks_p > 1e-3
    q_bad = A.qq(rng.random(200) ** 4)      # p-values piled up near 0: a biased engine
    assert q_bad.ks_p < 1e-6
    assert np.mean((q_bad.observed >= q_bad.band_lo) & (q_bad.observed <= q_bad.band_hi)) < 0.5
    with pytest.raises(InputError):
        A.qq([])


def test_power_curve_falls_as_one_over_root_n():
    tv = A.power_curve(7, 1e-4, 0.99, [1000, 4000])
    assert tv[0] / tv[1] == pytest.approx(2.0, rel=1e-9)


def test_zoo_matrix_shapes():
    checks_ok = [{"name": "chain.marginal[a,pos=0]", "verdict": "pass", "p_value": 0.5},
                 {"name": "chain.joint[a]", "verdict": "pass", "p_value": 0.3}]
    checks_bad = [{"name": "chain.marginal[a,pos=0]", "verdict": "fail", "p_value": 1e-20},
                  {"name": "chain.marginal[a,pos=1]", "verdict": "pass", "p_value": 0.2},
                  {"name": "chain.joint[a]", "verdict": "pass", "p_value": 0.3}]
    z = {"mutants": [{"name": "keep-tail", "audit": {"engine": "x", "verdict": "fail", "checks": checks_bad}},
                     {"name": "exact", "verdict": "pass", "checks": checks_ok}]}
    m = A.zoo_matrix(z)
    assert m.rows == ["keep-tail", "exact"] and m.cols == ["chain.marginal", "chain.joint"]
    assert m.verdict == [["fail", "pass"], ["pass", "pass"]]
    assert m.p_min[0][0] == 1e-20
    # the shape `specverify zoo --json` writes
    cli = {"ok": True, "checks": ["marginal", "endpoints", "runs"], "settings": {"seed": 0}, "wall_seconds": 1.0,
           "engines": {"reference": {"verdict": "pass", "row": {"marginal": ".", "endpoints": ".", "runs": "."}},
                       "mutant:coin-ge-zero": {"verdict": "fail", "row": {"marginal": ".", "endpoints": "X", "runs": "-"},
                                               "catch_seconds": 0.3, "audit": {"checks": [
                                                   {"name": "chain.zero_prob[coin=0.0]", "verdict": "fail",
                                                    "exact": True, "n": 5, "detail": "emitted token 3"}]}}}}
    assert A.kind_of(cli) == "zoo"
    m3 = A.zoo_matrix(cli)
    assert m3.rows == ["reference", "mutant:coin-ge-zero"] and m3.cols == ["marginal", "endpoints", "runs"]
    assert m3.verdict == [["pass", "pass", "pass"], ["pass", "fail", ""]] and m3.row_verdict == ["pass", "fail"]
    m2 = A.zoo_matrix({"matrix": {"rows": ["a"], "cols": ["c1", "c2"], "verdict": [["fail", "pass"]]}})
    assert m2.row_verdict == ["fail"]
    with pytest.raises(InputError):
        A.zoo_matrix({"mutants": "nope"})


def test_kind_of_rejects_foreign_json():
    with pytest.raises(InputError):
        A.kind_of({"hello": 1})
    assert A.kind_of({"engine": "x", "checks": []}) == "audit"
    assert A.kind_of({"kind": "lab"}) == "lab"


# ======================================================================== PNG check

def test_png_check_accepts_plots_and_rejects_damage():
    from specverify.render import plots
    png = plots.qq_plot({"x": A.qq(np.linspace(0.01, 0.99, 20))}, "t")
    info = check_png(png)
    assert info.width > 50 and info.height > 50
    with pytest.raises(ValueError):
        check_png(png[: len(png) // 2])                   # truncated
    broken = bytearray(png)
    broken[len(png) // 2] ^= 0xFF                         # one flipped byte inside IDAT: CRC fails
    with pytest.raises(ValueError):
        check_png(bytes(broken))
    with pytest.raises(ValueError):
        check_png(b"GIF89a" + png[6:])


# ========================================================================= the page

IMG_RE = re.compile(r'<img src="([^"]+)"')


def assert_report_complete(folder, results):
    html = open(os.path.join(folder, "index.html"), encoding="utf-8").read()
    md = open(os.path.join(folder, "README.md"), encoding="utf-8").read()
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    assert html.count("<table") == html.count("</table>") and html.count("<details") == html.count("</details>")
    assert "http://" not in html and "https://" not in html          # no network assets
    srcs = IMG_RE.findall(html)
    assert srcs, "no images"
    for src in srcs:
        if src.startswith("data:image/png;base64,"):
            import base64
            check_png(base64.b64decode(src.split(",", 1)[1]))
        else:
            check_png(open(os.path.join(folder, src), "rb").read())
            assert f"]({src})" in md                                  # the twin shows the same image
    for r in results:
        for c in r["checks"]:
            assert c["name"] in html and c["name"] in md
        assert f"Engine `{r['engine']}`" in md
    return html, md


def test_report_of_passing_and_failing_audits(audits, tmp_path):
    ref, ref1, bad = audits
    out = tmp_path / "rep"
    info = audit_report.write_report([ref, ref1, bad], str(out))
    assert info.engines == {"reference": "pass", "lossy:threshold_acc=0.5": "fail"}
    html, md = assert_report_complete(str(out), [ref, bad])
    assert 'class="verdicts"' in html and "<tr class=\"fail\">" in html
    assert "2 seeded repeats (seeds 0, 1)" in md
    assert "p-values against uniform (QQ)" in md and "Power" in md and "Engine x check" in md
    summary = json.load(open(out / "summary.json"))
    assert summary["engines"]["reference"]["verdict"] == "pass"
    assert [c["verdict"] for c in summary["engines"]["lossy:threshold_acc=0.5"]["checks"]] == \
        [c["verdict"] for c in bad["checks"]]
    assert (out / MARKER).exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]     # no temporary leftovers


def test_embedded_single_file_page(audits, tmp_path):
    out = tmp_path / "one"
    one = subset(audits[2], ("dirichlet,pos=0",))
    audit_report.write_report([one], str(out), embed=True)
    html = (out / "index.html").read_text()
    assert 'src="img/' not in html and html.count("data:image/png;base64,") == 2     # residuals + power
    assert_report_complete(str(out), [one])


def test_zoo_cli_result_renders_matrix_and_failing_rows(tmp_path):
    cli = {"ok": True, "checks": ["marginal", "endpoints"], "settings": {"seed": 0}, "wall_seconds": 1.0,
           "engines": {"reference": {"verdict": "pass", "row": {"marginal": ".", "endpoints": "."}},
                       "mutant:coin-ge-zero": {"verdict": "fail", "row": {"marginal": ".", "endpoints": "X"},
                                               "catch_seconds": 0.3, "seconds": 2.0, "audit": {"checks": [
                                                   {"name": "chain.zero_prob[coin=0.0]", "verdict": "fail",
                                                    "exact": True, "n": 5, "detail": "emitted token 3"}]}}}}
    out = tmp_path / "zoo"
    audit_report.write_report([cli], str(out))
    md = (out / "README.md").read_text()
    assert "| mutant:coin-ge-zero | FAIL | endpoints | 0.30 | 2.0 |" in md
    assert "chain.zero_prob[coin=0.0]" in md and "emitted token 3" in md
    assert_report_complete(str(out), [])


def test_zoo_result_renders_its_matrix(audits, tmp_path):
    ref, _, bad = audits
    zoo = {"mutants": [{"name": "threshold_acc=0.5", "audit": bad}, {"name": "exact", "audit": ref}]}
    out = tmp_path / "zoo"
    audit_report.write_report([zoo], str(out))
    md = (out / "README.md").read_text()
    assert "Zoo: mutant x check" in md and "| threshold_acc=0.5 | FAIL |" in md
    assert json.load(open(out / "summary.json"))["zoo"]["row_verdict"] == ["fail", "pass"]


# ======================================================================== atomicity

def _listing(folder):
    return sorted((os.path.relpath(os.path.join(d, f), folder), open(os.path.join(d, f), "rb").read())
                  for d, _, fs in os.walk(folder) for f in fs)


@pytest.mark.parametrize("exc", [KeyboardInterrupt, RuntimeError])
def test_interrupted_write_leaves_old_report_or_nothing(audits, tmp_path, monkeypatch, exc):
    ref, _, bad = (subset(r, ("dirichlet,pos=0",)) for r in audits)
    out = tmp_path / "rep"
    real = doc.write_document

    def half_then_fail(d, folder, embed=False):
        real(d, folder, embed)                     # everything written into the temporary folder ...
        raise exc("interrupted")                   # ... then ^C before the swap

    monkeypatch.setattr(audit_report, "write_document", half_then_fail)
    with pytest.raises(exc):
        audit_report.write_report([ref], str(out))
    assert not out.exists()
    assert os.listdir(tmp_path) == []              # the temporary folder is gone too
    monkeypatch.setattr(audit_report, "write_document", real)
    audit_report.write_report([ref], str(out))
    before = _listing(out)
    monkeypatch.setattr(audit_report, "write_document", half_then_fail)
    with pytest.raises(exc):
        audit_report.write_report([bad], str(out))
    assert _listing(out) == before                 # the old report, byte for byte
    assert sorted(os.listdir(tmp_path)) == ["rep"]


def test_sigint_to_the_cli_leaves_the_old_report_or_a_whole_new_one(full_audits, tmp_path):
    """A real ^C (SIGINT) to `specverify report` while it renders: the old report survives byte for
    byte and no temporary folder is left (or, if the signal landed after the swap, the new report is
    whole -- the exit may then still be 130). Never a half-written folder, never a traceback."""
    import signal
    import time
    out = tmp_path / "rep"
    audit_report.write_report([subset(full_audits[0], ("dirichlet,pos=0",))], str(out))
    before = _listing(out)
    src = tmp_path / "in.json"
    src.write_text(json.dumps(full_audits[2]))
    proc = subprocess.Popen([sys.executable, "-m", "specverify", "report", str(src), "-o", str(out), "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300                    # wait until it renders into its staging folder
    while proc.poll() is None and time.monotonic() < deadline:
        if any(name.startswith(".rep.tmp-") for name in os.listdir(tmp_path)):
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert sorted(os.listdir(tmp_path)) == ["in.json", "rep"], os.listdir(tmp_path)
    assert proc.returncode in (0, 130), err
    if proc.returncode == 130:
        assert err.strip().endswith("specverify: interrupted"), err
    if _listing(out) != before:                          # not the old report: then the whole new one
        assert_report_complete(str(out), [full_audits[2]])


def test_replacing_a_report_swaps_it_whole_and_never_deletes_a_users_file(audits, tmp_path):
    out = tmp_path / "rep"
    audit_report.write_report([subset(audits[0], ("dirichlet,pos=0",))], str(out))
    (out / "notes.txt").write_text("the user's, added to the report folder")   # was deleted silently
    with pytest.raises(InputError, match="now also holds 'notes.txt'"):
        audit_report.write_report([subset(audits[2], ("dirichlet,pos=0",))], str(out))
    assert (out / "notes.txt").exists()
    (out / "notes.txt").unlink()
    audit_report.write_report([subset(audits[2], ("dirichlet,pos=0",))], str(out))
    assert "lossy" in (out / "README.md").read_text()
    assert sorted(os.listdir(tmp_path)) == ["rep"]


def test_a_killed_runs_staging_folder_is_removed_by_the_next_run(audits, tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()                     # a pid that has ended
    stale = tmp_path / f".rep.tmp-{dead}-abc123"
    stale.mkdir()
    (stale / "index.html").write_text("half")
    audit_report.write_report([subset(audits[0], ("dirichlet,pos=0",))], str(tmp_path / "rep"))
    assert sorted(os.listdir(tmp_path)) == ["rep"]


HOSTILE = {                      # what a hostile or damaged result file did: a traceback or worse
    "engine a list": (lambda d: d.update(engine=["a"]), "engine must be a name"),
    "alpha a string": (lambda d: d.update(alpha="x"), "alpha 'x' is not a"),
    "alpha above 1": (lambda d: d.update(alpha=3.0), "alpha 3.0 is outside (0, 1)"),
    "detail a dict": (lambda d: d["checks"][0].update(detail={"a": 1}), "detail must be a str, got dict"),
    "data a list": (lambda d: d["checks"][0].update(data=[1]), "data must be a dict, got list"),
    "a 1 MB name": (lambda d: d["checks"][0].update(name="n" * 10**6), "a row name of 1000000 characters"),
    "a lone surrogate": (lambda d: d.update(engine="ref\ud800"), "a lone surrogate"),
    "verdict over rows": (lambda d: d["checks"][0].update(verdict="fail"), "says 'pass' but its rows fail"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_result_json_is_refused_in_one_line(audits, tmp_path, case):
    import copy
    doc_ = copy.deepcopy(subset(audits[0], ("dirichlet,pos=0",)))
    edit, needle = HOSTILE[case]
    edit(doc_)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc_))
    with pytest.raises(InputError, match=re.escape(needle)):
        A.check_result(A.load_json(str(path)), str(path))


def test_deeply_nested_json_is_refused_not_a_recursion_error(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text('{"engine": "x", "verdict": "pass", "checks": [{"name": "a", "verdict": "pass", "data": '
                    + "[" * 100_000 + "]" * 100_000 + "}]}")
    with pytest.raises(InputError, match="nested too deeply"):
        A.load_json(str(path))
    path.write_text(json.dumps({"engine": "x", "verdict": "pass", "checks": [
        {"name": "a", "verdict": "pass", "data": {"d": json.loads("[" * 100 + "]" * 100)}}]}))
    with pytest.raises(InputError, match="nested deeper than"):
        A.check_result(A.load_json(str(path)), str(path))


def test_the_markdown_twin_escapes_names_and_details_like_the_html(audits, tmp_path):
    import copy
    doc_ = copy.deepcopy(subset(audits[2], ("dirichlet,pos=0",)))
    doc_["engine"] = "<script>alert(1)</script>[click](javascript:alert(1))"
    doc_["checks"][0]["detail"] = "<img src=x onerror=alert(1)> ![i](http://evil/x.png) `kept <b>`"
    out = tmp_path / "rep"
    audit_report.write_report([doc_], str(out))
    md = (out / "README.md").read_text()
    prose = re.sub(r"`[^`\n]+`", "", md)                # code spans show their content literally
    for raw in ("<script>", "<img", "](javascript:", "](http://evil"):
        assert raw not in prose, raw
    assert "&lt;script&gt;" in md and "`kept <b>`" in md           # shown as text; code spans literal


def test_unwritable_output_is_one_line_and_exit_2(audits, tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(subset(audits[0], ("dirichlet,pos=0",))))
    for out in ("/proc/specverify-x", str(path / "sub")):            # no permission; a file as the parent
        r = _cli("report", str(path), "-o", out, "-q")
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr


def test_refuses_to_replace_a_folder_that_is_not_a_report(audits, tmp_path):
    keep = tmp_path / "src"
    keep.mkdir()
    (keep / "precious.py").write_text("x = 1\n")
    with pytest.raises(InputError, match="not a specverify report"):
        audit_report.write_report([audits[0]], str(keep))
    assert (keep / "precious.py").read_text() == "x = 1\n"
    with pytest.raises(InputError):
        with atomic_dir(str(keep / "precious.py")):
            pass


def test_atomic_dir_on_empty_existing_folder(tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    with atomic_dir(str(out)) as tmp:
        open(os.path.join(tmp, "a.txt"), "w").write("a")
    assert (out / "a.txt").read_text() == "a" and (out / MARKER).exists()


# ========================================================================== progress

def test_progress_bar_draws_only_when_enabled():
    s = io.StringIO()
    p = Progress(stream=s, enabled=True)
    with p.bar(4, "work") as bar:
        for _ in range(4):
            bar.advance(note="x")
    p.done()
    text = s.getvalue()
    assert "work [" in text and "4/4" in text and "100%" in text
    quiet = io.StringIO()
    q = Progress(stream=quiet, quiet=True, enabled=True)
    with q.bar(3, "work") as bar:
        bar.advance()
    q("message")
    assert quiet.getvalue() == ""
    nontty = io.StringIO()                        # StringIO.isatty() is False: silent by default
    Progress(stream=nontty)("hello")
    assert nontty.getvalue() == ""


def test_as_progress_adapts_callables_and_none():
    seen = []
    p = as_progress(seen.append)
    with p.bar(2, "lab") as bar:
        bar.advance()
    p("status")
    assert seen == ["lab (2 steps)", "status"]
    assert as_progress(None) is NULL
    with pytest.raises(TypeError):
        as_progress(42)


# =============================================================================== CLI

def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "specverify", *args], capture_output=True, text=True, cwd=cwd)


def test_cli_report_and_errors(audits, tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(subset(audits[2], ("dirichlet,pos=0",))))
    r = _cli("report", str(path), "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert "lossy:threshold_acc=0.5: FAIL" in r.stdout
    assert (tmp_path / "out" / "index.html").exists()
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for args in ([str(bad), "-o", str(tmp_path / "x")], [str(tmp_path / "missing.json"), "-o", str(tmp_path / "x")],
                 [str(path), "-o", str(tmp_path)]):                   # tmp_path is not a report folder
        r = _cli("report", *args)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr


def test_cli_audit_report_flag(tmp_path):
    out = tmp_path / "audit-report"
    r = _cli("audit", "lossy:threshold_acc=0.5", "--samples", "2000", "--checks", "marginal", "--report", str(out), "-q")
    assert r.returncode == 1, r.stderr                    # the lossy rule fails, and the report is written
    md = (out / "README.md").read_text()
    assert "FAIL" in md and "chain.marginal" in md


# ========================================================================== Chromium

def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.mark.slow
def test_page_renders_in_headless_chromium(audits, tmp_path):
    """The page as a browser shows it: the verdict table is in the DOM and every image loaded
    (the page's own load handler counts images with naturalWidth 0). Needs Debian's `chromium`."""
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium not installed (apt-get install -y chromium)")
    out = tmp_path / "rep"
    audit_report.write_report([audits[0], audits[2]], str(out))
    n_imgs = len(IMG_RE.findall((out / "index.html").read_text()))
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000",
           "--run-all-compositor-stages-before-draw", "--dump-dom", (out / "index.html").as_uri()]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    dom = r.stdout
    assert 'class="verdicts"' in dom and "chain.marginal" in dom, r.stderr[-2000:]
    assert f'data-images-ok="{n_imgs}"' in dom and 'data-images-broken="0"' in dom, dom[:500]
    # negative control: without its img/ folder the page reports broken images
    shutil.rmtree(out / "img")
    r = subprocess.run(cmd[:-1] + [(out / "index.html").as_uri()], capture_output=True, text=True, timeout=120)
    assert f'data-images-broken="{n_imgs}"' in r.stdout
