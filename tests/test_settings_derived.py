"""Every front door's settings come from the declarations in `specverify.settings`: the argparse
options of `specverify audit` and `specverify zoo`, pytest's `--specverify-*` options and the
`specverify` marker's keywords. A setting declared once reaches every door it names."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import pytest

from specverify import settings
from specverify.errors import InputError
from specverify.settings import Settings, setting


def subparser(command: str) -> argparse.ArgumentParser:
    from specverify.cli import build_parser
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


def dests(parser) -> dict:
    """{dest: the action whose flag is --<dest>, else the first with that dest}."""
    out = {}
    for a in parser._actions:
        if a.dest not in out or f"--{a.dest}" in a.option_strings:
            out[a.dest] = a
    return out


class FakeGroup:
    """What `pytest_addoption` sees of pytest's option group: the options it adds."""

    def __init__(self):
        self.options = {}

    def addoption(self, *names, **kw):
        self.options[names[0]] = kw

    def getgroup(self, *args, **kw):
        return self


def pytest_options() -> dict:
    from specverify import pytest_plugin
    group = FakeGroup()
    pytest_plugin.pytest_addoption(group)
    return group.options


@pytest.mark.parametrize("door,command", [("audit", "audit"), ("zoo", "zoo")])
def test_every_setting_reaches_the_commands_it_declares(door, command):
    actions = dests(subparser(command))
    for spec in settings.SPECS:
        if spec.at(door):
            action = actions[spec.name]
            assert spec.cli_flag() in action.option_strings
            assert action.help == spec.help_at(door)
            assert action.default == (None if door == "audit" else spec.default_at(door))
            if spec.choices:
                assert tuple(action.choices) == tuple(spec.choices)
        else:
            assert spec.name not in actions


def test_every_setting_reaches_the_pytest_options_and_marker_it_declares():
    options = pytest_options()
    run = {"--specverify-jobs", "--specverify-report"}        # how the gate runs, not settings
    assert set(options) - run == {f"--specverify-{s.cli_flag()[2:]}" for s in settings.SPECS if s.at("option")}
    assert set(settings.marker_keywords()) == {s.name for s in settings.SPECS if s.at("marker")}
    assert settings.marker_keywords() == ("seed", "samples", "alpha", "timeout", "checks", "size", "stop", "power_tv",
                                         "fail_fast", "model", "plain_url", "law_model", "rare_rate")
    for name in settings.marker_keywords():
        assert f"{name}=None" in settings.marker_line()


def test_the_doors_are_what_they_were():
    """The same flags, options and keywords as before the settings were derived, and the three of the
    decisive audits (issue 25) at every door."""
    decisive = {"stop", "power_tv", "fail_fast"}
    server = {"model", "plain_url", "law_model"}   # the server level (issue 26): audit, pytest option and marker
    rare = {"rare_rate"}                  # the rare_event rows' target rate (issue 31): audit, option, marker
    assert {s.name for s in settings.at_door("audit")} == {"seed", "samples", "alpha", "timeout", "checks", "size"} | decisive | server | rare
    # issue 32: the zoo takes --timeout and --checks, pytest every setting (--specverify-checks, -size)
    assert {s.name for s in settings.at_door("zoo")} == {"seed", "samples", "alpha", "timeout", "checks"} | decisive
    assert {s.name for s in settings.at_door("option")} == set(settings.NAMES)
    assert settings.door_defaults("zoo") == {"stop": "decisive", "power_tv": 0.05, "fail_fast": True}
    assert settings.door_defaults("option") == {"stop": "decisive", "fail_fast": True}
    assert settings.with_door_defaults({"stop": "fixed"}, "option") == {"stop": "fixed", "fail_fast": False}
    full = next(a for a in subparser("audit")._actions if "--full" in a.option_strings)
    assert (full.dest, full.const) == ("size", "full")


def test_the_context_gets_the_settings_the_checks_read():
    from specverify.battery.base import Context
    values = settings.context_values(settings.DEFAULTS)
    assert set(values) == {"seed", "samples", "alpha", "timeout", "size", "rare_rate"}
    ctx = Context(**values)
    assert (ctx.seed, ctx.samples, ctx.alpha, ctx.timeout, ctx.size) == (0, 200_000, 1e-3, 120.0, "standard")


def _check_depth(value, label, battery):
    if not isinstance(value, int) or value < 1:
        raise InputError(f"{label} {value!r}: must be an integer >= 1")
    return value


@dataclass(frozen=True)
class Extended(Settings):
    """The settings plus one new field, declared once."""
    depth: int = setting(4, help="how deep the new check looks", check=_check_depth, parse=int, metavar="D")


def test_a_new_setting_declared_once_reaches_every_door(monkeypatch):
    monkeypatch.setattr(settings, "SPECS", settings.specs_of(Extended))
    audit, zoo = dests(subparser("audit")), dests(subparser("zoo"))
    for actions, default in ((audit, None), (zoo, 4)):
        assert actions["depth"].option_strings == ["--depth"] and actions["depth"].type is int
        assert actions["depth"].default == default and actions["depth"].metavar == "D"
    assert audit["depth"].help == "how deep the new check looks (default 4)"
    assert subparser("audit").parse_args(["reference", "--depth", "7"]).depth == 7
    assert "--specverify-depth" in pytest_options()
    assert "depth" in settings.marker_keywords() and "depth=None" in settings.marker_line()
    settings.check_marker((), {"depth": 2})                          # a known keyword now
    assert settings.check_value("depth", 3, ()) == 3
    with pytest.raises(InputError, match=r"--depth 0: must be an integer >= 1"):
        settings.check_value("depth", 0, (), label=settings.spelled("depth", "audit"))
    args = subparser("audit").parse_args(["reference", "--depth", "5"])
    assert settings.given_from(args, "audit")["depth"] == 5


def test_a_setting_may_stay_off_a_door(monkeypatch):
    @dataclass(frozen=True)
    class Narrow(Settings):
        inner: int = setting(1, help="only for the marker", check=_check_depth, doors=("marker",))

    monkeypatch.setattr(settings, "SPECS", settings.specs_of(Narrow))
    assert "inner" not in dests(subparser("audit")) and "inner" not in dests(subparser("zoo"))
    assert "--specverify-inner" not in pytest_options()
    assert "inner" in settings.marker_keywords()


def test_an_unknown_marker_keyword_or_a_bad_value_is_one_clear_error():
    with pytest.raises(InputError) as err:
        settings.check_marker((), {"sample": 5})
    assert str(err.value) == ("@pytest.mark.specverify takes keyword settings seed, samples, alpha, timeout, checks, "
                              "size, stop, power_tv, fail_fast, model, plain_url, law_model, rare_rate, got 'sample'")
    with pytest.raises(InputError, match=r"takes keyword settings .* got 5"):
        settings.check_marker((5,), {})
    with pytest.raises(InputError) as err:
        settings.check_given({"samples": -5}, (), lambda k: settings.spelled(k, "marker"))
    assert str(err.value) == "@pytest.mark.specverify(samples=...) -5: must be an integer in [200, 4000000]"
    with pytest.raises(InputError, match=r"^--specverify-alpha 2.0: must be in \(0, 1\)$"):
        settings.check_given({"alpha": 2.0}, (), lambda k: settings.spelled(k, "option"))
    with pytest.raises(InputError, match="unknown setting 'depth'"):
        settings.check_value("depth", 1, ())


def test_a_door_is_a_known_door():
    with pytest.raises(ValueError, match="unknown door"):
        setting(1, help="x", check=_check_depth, doors=("audit", "cli"))
