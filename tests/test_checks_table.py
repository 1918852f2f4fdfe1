"""The check table (`specverify.checks.TABLE`) is the battery: every module in checks/ is a row, every
row states its budget in its module's docstring, and `describe()` gives one line per check."""

from __future__ import annotations

import pkgutil
import sys

import specverify.checks as checks
from specverify.audit import BATTERY, groups_of


def test_checks_folder_holds_only_the_table_checks():
    modules = {m.name for m in pkgutil.iter_modules(checks.__path__)}
    assert modules == set(checks.NAMES)
    assert BATTERY == checks.NAMES


def test_each_row_runs_its_module_and_states_its_budget_there():
    for c in checks.TABLE:
        module = sys.modules[f"specverify.checks.{c.name}"]
        assert c.run is module.run
        assert f"Budget (`--samples`): {c.budget}." in " ".join(module.__doc__.split()), c.name
        assert c.kind in (checks.ONE_STEP, checks.WHOLE_RUN, checks.SEEDED, checks.REAL_VOCAB, checks.EXACT, checks.SERVER)


def test_describe_has_one_line_per_check_in_battery_order():
    lines = checks.describe().splitlines()
    assert [line.split(":")[0] for line in lines] == checks.NAMES
    assert all(f"{c.kind}, {c.budget}" in line for c, line in zip(checks.TABLE, lines))


def test_groups_keep_shared_samples_together_and_long_checks_first():
    groups = groups_of(BATTERY)
    assert groups[:3] == [["bitwise"], ["transforms"], ["runs"]]
    assert ["marginal", "joint", "acceptance"] in groups
    assert sorted(n for g in groups for n in g) == sorted(BATTERY)


def test_server_checks_run_by_default_only_against_a_server():
    from specverify.audit import default_checks

    class Adapter:
        capabilities = {"chain"}

    class Server:
        capabilities = {"server"}

    assert "server" not in default_checks(Adapter())
    assert default_checks(Server()) == ["server", "serving"]
    assert sorted(default_checks(Adapter()) + default_checks(Server())) == sorted(BATTERY)
