"""One vocabulary of flags (issue 32): `--json PATH` with '-' for stdout, `--report DIR`, `--checks`,
`--timeout`, `--quiet` keeping the one-line verdict, the default table (per-check totals and failing
rows) and `--all-rows`, across audit, zoo, generate and bench."""

import json
import subprocess
import sys

import pytest


def cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "specverify", *args], capture_output=True, text=True, timeout=timeout)


AUDIT = ["audit", "mutant:coin-ge-zero", "--checks", "endpoints,composition", "--jobs", "1"]     # exact checks: seconds


def test_the_default_table_is_totals_and_failing_rows_and_all_rows_shows_every_row():
    short, full = cli(*AUDIT), cli(*AUDIT, "--all-rows")
    assert short.returncode == full.returncode == 1, short.stderr
    lines = short.stdout.splitlines()
    assert lines[0].split()[:3] == ["check", "rows", "PASS"]
    totals = {line.split()[0]: int(line.split()[1]) for line in lines[2:lines.index("")]}
    assert set(totals) == {"endpoints", "composition", "contract"} and "failing rows (--all-rows: every row):" in short.stdout
    every = full.stdout.splitlines()
    rows = every[2:every.index("")]                                   # --all-rows: one line a row
    assert len(rows) == sum(totals.values()) and len(rows) > len(lines[2:lines.index("")]) + 5
    assert not any(r.split()[1] == "PASS" for r in lines[lines.index("failing rows (--all-rows: every row):"):]
                   if r.startswith("chain."))                         # passing rows only in --all-rows
    assert "chain.zero_prob[coin=0.0]" in short.stdout and "hint: closest known bugs: coin-ge-zero" in short.stdout


def test_quiet_keeps_the_one_line_verdict_and_json_dash_is_stdout():
    quiet = cli(*AUDIT, "--quiet")
    assert quiet.returncode == 1 and quiet.stdout.splitlines() == [quiet.stdout.strip()]
    assert quiet.stdout.startswith("mutant:coin-ge-zero: FAIL (biased output law) -- ")
    piped = cli(*AUDIT, "--quiet", "--json", "-")
    assert json.loads(piped.stdout)["verdict"] == "fail"                    # stdout is the JSON and nothing else
    assert "mutant:coin-ge-zero: FAIL (biased output law) -- " in piped.stderr   # the verdict line went to stderr


def test_zoo_takes_checks_timeout_report_and_json_dash(tmp_path):
    report = tmp_path / "zoo-report"
    proc = cli("zoo", "--only", "mutant:coin-ge-zero", "--checks", "endpoints", "--timeout", "60", "--samples", "1000",
               "--json", "-", "--report", str(report), "--quiet", "--jobs", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["engines"]["mutant:coin-ge-zero"]["verdict"] == "fail"
    assert proc.stderr.strip().splitlines()[-1].startswith("zoo: ")          # --quiet: the one-line verdict
    assert (report / "index.html").is_file()
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("command", ["generate", "bench"])
def test_generate_and_bench_take_json_path(command):
    from specverify.cli import build_parser

    parser = build_parser()
    first = ["generate", "hi"] if command == "generate" else ["bench"]
    assert parser.parse_args(first + ["--json"]).json == "-"                   # no PATH: stdout, as before
    assert parser.parse_args(first + ["--json", "out.json"]).json == "out.json"
    assert parser.parse_args(first).json is None


def test_report_and_lab_take_report_dir_as_audit_and_zoo_do():
    from specverify.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["report", "r.json", "--report", "out"]).output == "out"
    assert parser.parse_args(["report", "r.json", "-o", "out"]).output == "out"
    assert parser.parse_args(["lab", "--report", "out"]).output == "out"
