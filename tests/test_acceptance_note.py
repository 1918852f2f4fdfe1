"""`findings.acceptance_note`: an engine_acceptance-only audit added to an existing report (acceptance.md,
acceptance.json, one pointer line in the README, written once)."""

import json

from specverify.findings import acceptance_note

AUDIT = {"engine": "toy-engine", "engine_version": "1.0", "verdict": "fail", "seed": 0, "samples": 20000,
         "alpha": 1e-3, "seconds": 12.3, "not_covered": {},
         "checks": [{"check": "engine_acceptance", "name": "engine.acceptance[x, fixed, per-step]", "verdict": "fail",
                     "p_value": 1e-9, "min_detectable_tv": 0.07, "exact": False, "detail": "E 1.5 vs exact 1.8",
                     "data": {"acceptance": {"E_observed": 1.5, "E_observed_ci": [1.45, 1.55], "E_exact": 1.8,
                                             "E_range": [1.75, 1.85]}}},
                    {"check": "runs", "name": "engine.runs[x]", "verdict": "pass", "detail": "not an acceptance row"}]}


def test_the_note_lists_the_acceptance_rows_and_points_to_them_once(tmp_path):
    audit_json = tmp_path / "audit.json"
    audit_json.write_text(json.dumps(AUDIT))
    report = tmp_path / "report"
    report.mkdir()
    (report / "README.md").write_text("# toy-engine 1.0: FAIL\n\nthe whole audit\n")
    assert acceptance_note.main([str(audit_json), str(report), "a note"]) == 0
    assert acceptance_note.main([str(audit_json), str(report)]) == 0          # again: the README line stays one
    text = (report / "acceptance.md").read_text()
    assert "| `engine.acceptance[x, fixed, per-step]` | fail | 1.5000 [1.4500, 1.5500] | 1.8000 [1.7500, 1.8500] |" in text
    assert "engine.runs" not in text
    readme = (report / "README.md").read_text()
    assert readme.count("(acceptance.md)") == 1 and readme.startswith("# toy-engine 1.0: FAIL\n")
    assert json.loads((report / "acceptance.json").read_text())["engine"] == "toy-engine"


def test_a_folder_without_a_report_is_one_line_and_exit_2(tmp_path, capsys):
    audit_json = tmp_path / "audit.json"
    audit_json.write_text(json.dumps(AUDIT))
    assert acceptance_note.main([str(audit_json), str(tmp_path / "nowhere")]) == 2
    assert "no README.md" in capsys.readouterr().err
    assert acceptance_note.main([]) == 2


def test_a_row_without_a_verify_step_has_no_e(tmp_path):
    """A greedy SKIP whose runs made no verify step carries E_observed and E_exact None: rendered '-'."""
    skip = {"check": "engine_acceptance", "name": "engine.acceptance_greedy[x]", "verdict": "skip", "exact": True,
            "detail": "no verify step", "data": {"acceptance": {"E_observed": None, "E_exact": None,
                                                                "E_range": [None, None]}}}
    audit_json = tmp_path / "audit.json"
    audit_json.write_text(json.dumps({**AUDIT, "checks": AUDIT["checks"] + [skip]}))
    report = tmp_path / "report"
    report.mkdir()
    (report / "README.md").write_text("# toy-engine 1.0: FAIL\n")
    assert acceptance_note.main([str(audit_json), str(report)]) == 0
    assert "| `engine.acceptance_greedy[x]` | skip | - | - | - | exact |" in (report / "acceptance.md").read_text()
