"""The settings of one audit, each declared once with what every front door needs to offer it.

A setting is a field of `Settings` made by `setting(...)`: its default, its help, how a command line
parses it, how it is validated, and which front doors expose it:

    audit    `specverify audit --NAME`          zoo      `specverify zoo --NAME`
    option   pytest's `--specverify-NAME`       marker   `@pytest.mark.specverify(NAME=...)` and the
                                                         keyword arguments of the `specverify` fixture

`SPECS` reads those declarations back; `add_arguments` (argparse), `add_pytest_options`,
`marker_keywords` and `check_value` derive every door from them, so adding a setting is one
`setting(...)` line here (plus, if the checks read it, a field of `battery.base.Context`, filled by
`context_values`).

    seed      integer in [0, 2**63 - 1]   seeds every problem and coin               default 0
    samples   integer in [MIN_SAMPLES, MAX_SAMPLES]  the sample budget of the statistical checks
              (samples per problem in the one-step checks; other checks scale it)  default 200 000
    alpha     float in (0, 1)             family-wise false-alarm rate (Holm)        default 1e-3
    timeout   finite float > 0            seconds one adapter call may take          default 120
    checks    None (every check that applies) or names from `specverify.audit.BATTERY`, in the
              battery's order; a name given twice counts once
    size      "quick", "standard" or "full": how large the engine-level greedy bitwise runs are
              (`checks.bitwise.SIZES`; an engine may choose its default)  default "standard"
    stop      "fixed" or "decisive": every row draws its whole budget, or rows sample in rounds until
              the evidence decides (`battery.decisive`)   default "fixed" (zoo, pytest gate: "decisive")
    power_tv  float in (0, 1): a decisive row passes once its min detectable TV is this small  default 0.01
    fail_fast bool: end the audit at its first failing row   default False (zoo, pytest gate: True)

Precedence, highest first: what the user gives (flags, keyword arguments, the pytest marker or
command line), the adapter's own `audit_defaults` (an engine may size its defaults to its speed, e.g.
an interpreter on a CPU), then `DEFAULTS`. `resolve` applies it and validates the outcome: a bad value
is one InputError naming the setting, before any work is done.
"""

from __future__ import annotations

import argparse
import math
import numbers
from dataclasses import dataclass, field, fields, replace

from specverify.errors import InputError

MIN_SAMPLES = 200      # the fewest at which a one-step law row tests anything (`checks.marginal.MIN_STATISTICAL_N`):
                       # below it every marginal row was "no test" and a biased engine passed
# the battery keeps every problem's samples (kappa + 1 int64 ids and the drafts, ~30 problems):
# about 2.5 kB a sample at the peak, so 4 million samples a problem need ~10 GB
MAX_SAMPLES = 4_000_000
MAX_SEED = 2**63 - 1
MIN_RARE_RATE = 1e-12    # --rare-rate below this needs over 1e12 draws (`checks.rare_event`)
STOPS = ("fixed", "decisive")            # when a statistical row stops sampling (`battery.decisive`)
SIZES = ("quick", "standard", "full")    # the bitwise check's sizes (`checks.bitwise.SIZES` holds what each runs)
DOORS = ("audit", "zoo", "option", "marker")
"""The front doors a setting may be exposed at (see the module docstring)."""


# ----------------------------------------------------------------------------------- validation

def _integer(low: int, high: int):
    def check(value, label, battery):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise InputError(f"{label} {value!r}: must be an integer")
        if not low <= value <= high:
            raise InputError(f"{label} {value}: must be an integer in [{low}, {high}]")
        return int(value)
    return check


def _number(label: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"{label} {value!r}: must be a number")
    return float(value)


def _alpha(value, label, battery) -> float:
    alpha = _number(label, value)
    if not 0 < alpha < 1:
        raise InputError(f"{label} {value!r}: must be in (0, 1)")
    return alpha


def _seconds(value, label, battery) -> float:
    seconds = _number(label, value)
    if not (math.isfinite(seconds) and seconds > 0):
        raise InputError(f"{label} {value!r}: must be a finite number of seconds > 0")
    return seconds


def _size(value, label, battery) -> str:
    if value not in SIZES:
        raise InputError(f"{label} {value!r}: must be one of {', '.join(SIZES)}")
    return value


def _stop(value, label, battery) -> str:
    if value not in STOPS:
        raise InputError(f"{label} {value!r}: must be one of {', '.join(STOPS)}")
    return value


def _tv(value, label, battery) -> float:
    tv = _number(label, value)
    if not 0 < tv < 1:
        raise InputError(f"{label} {value!r}: must be a total-variation distance in (0, 1)")
    return tv


def _flag(value, label, battery) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{label} {value!r}: must be True or False")
    return value


def _rate(value, label, battery) -> float:
    rate = _number(label, value)
    if not MIN_RARE_RATE <= rate < 1:
        raise InputError(f"{label} {value!r}: must be an event rate in [{MIN_RARE_RATE:g}, 1) (the draws it needs "
                         "grow as 1 / rate)")
    return rate


def _text_or_none(value, label, battery):
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise InputError(f"{label} {value!r}: must be a non-empty name")
    return value


def _url_or_none(value, label, battery):
    if value is not None and (not isinstance(value, str) or not value.startswith(("http://", "https://"))):
        raise InputError(f"{label} {value!r}: must be an http:// or https:// URL (e.g. http://127.0.0.1:8000/v1)")
    return value


def validate_checks(checks, battery, label: str = "checks") -> tuple | None:
    """None, or the named checks in the battery's order (duplicates removed); InputError on an
    unknown name or an empty selection."""
    if checks is None:
        return None
    names = [c.strip() for c in checks.split(",")] if isinstance(checks, str) else list(checks)
    if not names or not all(isinstance(c, str) and c for c in names):
        raise InputError(f"{label} {checks!r}: give one or more check names; available: {', '.join(battery)}")
    unknown = [c for c in dict.fromkeys(names) if c not in battery]
    if unknown:
        raise InputError(f"unknown check(s) {', '.join(unknown)}; available: {', '.join(battery)}")
    return tuple(c for c in battery if c in names)


def _checks(value, label, battery):
    return validate_checks(value, battery, label)


# ----------------------------------------------------------------------------------- declaration

def setting(default, *, help: str, check, parse=None, choices=None, metavar=None, flag=None,
            doors=DOORS, default_text=None, door_help=None, door_default=None, context: bool = True):
    """A field of `Settings` carrying what the front doors need:
    help          what the setting means (the pytest option's help; the CLI's with " (default ...)")
    check         check(value, label, battery) -> the normalised value, or InputError naming `label`
    parse         how a command line turns the text into a value (argparse/pytest `type`); None: text
    choices       the values a command line accepts (argparse/pytest `choices`)
    metavar, flag the command line's metavar and flag name (default `--<name>`)
    doors         the front doors that expose it (`DOORS`)
    default_text  the audit CLI help's "(default ...)" text (an engine may change the default); None:
                  the default itself
    door_help     {door: help} where one door says it differently
    door_default  {door: default} where one door has a default of its own (the zoo and the pytest gate
                  stop decisively; the audit CLI keeps fixed budgets)
    A setting whose default is a bool is a flag on the command lines (given: True).
    context       whether the checks read it (`context_values` passes it to `battery.base.Context`)"""
    meta = dict(help=help, check=check, parse=parse, choices=choices, metavar=metavar, flag=flag,
                doors=tuple(doors), default_text=default_text, door_help=dict(door_help or {}),
                door_default=dict(door_default or {}), context=context)
    unknown = set(meta["doors"]) - set(DOORS)
    if unknown:
        raise ValueError(f"unknown door(s) {sorted(unknown)}; known: {DOORS}")
    return field(default=default, metadata=meta)


# What --samples means differs per check (samples per problem in the one-step checks, whole runs,
# a fraction, or nothing): each check's budget text comes from the check table
# (`specverify.checks.describe()`); `cli/audit.py` appends it to `--help`.
SAMPLES_HELP = ("the sample budget of the statistical checks: samples per problem in the one-step checks; "
                "other checks scale it or keep their own sizes")


@dataclass(frozen=True)
class Settings:
    seed: int = setting(0, help="seed of every problem and coin", check=_integer(0, MAX_SEED), parse=int,
                        door_help={"zoo": "seed of every audit", "option": "seed of the audit"})
    samples: int = setting(200_000, help=SAMPLES_HELP, check=_integer(MIN_SAMPLES, MAX_SAMPLES), parse=int,
                           default_text="200000, or the engine's own CPU-sized default")
    alpha: float = setting(1e-3, help="family-wise false-alarm rate", check=_alpha, parse=float, default_text="1e-3",
                           door_help={"zoo": "family-wise false-alarm rate of each audit"})
    timeout: float = setting(120.0, help="seconds one adapter call may take", check=_seconds, parse=float,
                             default_text="120")
    checks: tuple | None = setting(None, help="comma-separated subset of checks to run (`specverify audit --help` "
                                        "lists them)", check=_checks, metavar="CHECK,...",
                                   default_text="all that apply", context=False)
    size: str = setting("standard", check=_size, choices=SIZES, doors=("audit", "option", "marker"),
                        help="size of the greedy bitwise runs: quick 16 prompts x 32 tokens, standard 32 x 64 (both "
                             "kappa 1, 3, 7 at batch 1, 8 and ragged 8), full 256 x 256 (kappa 1..7, batch 1..64)",
                        default_text="standard, or the engine's own default: quick for specverify")
    stop: str = setting("fixed", check=_stop, choices=STOPS, context=False, door_default={"zoo": "decisive", "option": "decisive"},
                        help="when a statistical row stops sampling: fixed (every row draws its whole budget, one "
                             "chi-squared test) or decisive (rounds of doubling size, anytime-valid e-values, until "
                             "the row fails, or reaches --power-tv, or its budget: then it passes as inconclusive)",
                        default_text="fixed; the zoo and the pytest gate: decisive")
    power_tv: float = setting(0.01, check=_tv, parse=float, metavar="TV", context=False, door_default={"zoo": 0.05},
                              default_text="0.01; the zoo: 0.05, which every mutant exceeds by far",
                              help="with --stop decisive: a row passes once it would catch a deviation of this total "
                                   "variation with probability 0.99")
    fail_fast: bool = setting(False, check=_flag, context=False, door_default={"zoo": True, "option": True},
                              help="end the audit at its first failing row, naming it and listing what did not run",
                              default_text="off; the zoo and the pytest gate: on")

    # the server level (`specverify audit http://HOST:PORT/v1`, `specverify.server.audit`)
    model: str | None = setting(None, check=_text_or_none, metavar="NAME", doors=("audit", "option", "marker"), context=False,
                                help="server audits: the model to ask the server for",
                                default_text="the server's only model")
    plain_url: str | None = setting(None, check=_url_or_none, metavar="URL", doors=("audit", "option", "marker"), context=False,
                                    help="server audits: a plain (non-speculative) server of the same model, for "
                                         "server.greedy_bitwise and server.spec_vs_plain",
                                    default_text="none: those rows are not covered")
    law_model: str | None = setting(None, check=_text_or_none, metavar="PATH", doors=("audit", "option", "marker"),
                                    context=False,
                                    help="server audits: the `specverify models write` folder (DEST, DEST/draft or its "
                                         "manifest) of the served model, whose exact law server.law tests against",
                                    default_text="found from the served model's name (tiny:V,SEED, or a path into "
                                                 "such a folder); else server.law is not covered")
    rare_rate: float = setting(1e-3, check=_rate, parse=float, metavar="RATE", doors=("audit", "option", "marker"),
                               help="the rare_event check's target rate of impossible emissions: it draws enough that "
                                    "none seen bounds the rate below RATE at --alpha (Clopper-Pearson; 1e-7 needs "
                                    "6.9e7 draws at alpha 1e-3)", default_text="1e-3 (6,905 draws a level at alpha 1e-3)")

    def to_dict(self) -> dict:
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v) for f in fields(self)}


@dataclass(frozen=True)
class Spec:
    """One setting as the front doors see it (read back from a `Settings` field)."""
    name: str
    default: object
    help: str
    check: object
    parse: object
    choices: tuple | None
    metavar: str | None
    flag: str | None
    doors: tuple
    default_text: str | None
    door_help: dict
    door_default: dict
    context: bool

    def at(self, door: str) -> bool:
        return door in self.doors

    def cli_flag(self) -> str:
        return self.flag or f"--{self.name.replace('_', '-')}"

    def default_at(self, door: str):
        """This door's default (`door_default`, else the setting's)."""
        return self.door_default.get(door, self.default)

    def help_at(self, door: str) -> str:
        """The help this door shows: its own text (`door_help`) or `help`; on a command line followed by
        the default (`default_text` at the audit, whose default an engine may change)."""
        text = self.door_help.get(door, self.help)
        if door == "option":
            return text
        default = self.default_text if door == "audit" and self.default_text is not None else (
            f"{self.default_at(door):g}" if isinstance(self.default_at(door), float) else
            ("on" if self.default_at(door) else "off") if isinstance(self.default_at(door), bool) else str(self.default_at(door)))
        return f"{text} (default{': ' if default[:1].isalpha() else ' '}{default})"


def specs_of(cls=Settings) -> tuple:
    """The `Spec` of every field of a settings dataclass, in declaration order."""
    return tuple(Spec(name=f.name, default=f.default, **f.metadata) for f in fields(cls))


SPECS = specs_of()
DEFAULTS = Settings()
NAMES = tuple(s.name for s in SPECS)


def _specs(specs):
    return SPECS if specs is None else specs


def at_door(door: str, specs=None) -> tuple:
    """The settings a front door exposes, in declaration order."""
    if door not in DOORS:
        raise ValueError(f"unknown door {door!r}; known: {DOORS}")
    return tuple(s for s in _specs(specs) if s.at(door))


def marker_keywords(specs=None) -> tuple:
    """The keywords `@pytest.mark.specverify(...)` and the fixture's `audit(..., **settings)` accept."""
    return tuple(s.name for s in at_door("marker", specs))


def spelled(name: str, door: str) -> str:
    """How the user spelled a setting at a door, for error messages."""
    spec = next((s for s in SPECS if s.name == name), None)
    flag = spec.cli_flag() if spec else f"--{name}"
    return {"audit": flag, "zoo": flag, "option": f"--specverify-{flag[2:]}",
            "marker": f"@pytest.mark.specverify({name}=...)", "keyword": f"{name}="}[door]


# ----------------------------------------------------------------------------------- the doors

def add_arguments(parser, door: str, specs=None) -> None:
    """The argparse options of a command (`door` "audit" or "zoo"). The audit's default is None
    (unset: the adapter's `audit_defaults`, then DEFAULTS, fill it); the zoo's is the default itself."""
    for s in at_door(door, specs):
        kw = dict(help=s.help_at(door), default=None if door == "audit" else s.default_at(door))
        if isinstance(s.default, bool):
            parser.add_argument(s.cli_flag(), dest=s.name, action=argparse.BooleanOptionalAction, **kw)
            continue
        if s.parse is not None:
            kw["type"] = s.parse
        if s.choices is not None:
            kw["choices"] = s.choices
        if s.metavar is not None:
            kw["metavar"] = s.metavar
        parser.add_argument(s.cli_flag(), dest=s.name, **kw)


def given_from(args, door: str, specs=None) -> dict:
    """{name: value} of the settings a parsed command line exposes (None: unset)."""
    return {s.name: getattr(args, s.name) for s in at_door(door, specs)}


def add_pytest_options(group, specs=None) -> None:
    """pytest's `--specverify-NAME` options (default None: unset)."""
    for s in at_door("option", specs):
        kw = dict(default=None, help=s.help_at("option"), dest=f"specverify_{s.name}")
        if isinstance(s.default, bool):
            group.addoption(f"--specverify-{s.cli_flag()[2:]}", action="store_const", const=True, **kw)
            continue
        if s.parse is not None:
            kw["type"] = s.parse
        if s.choices is not None:
            kw["choices"] = s.choices
        group.addoption(f"--specverify-{s.cli_flag()[2:]}", **kw)


def door_defaults(door: str, specs=None) -> dict:
    """{name: value} of the settings whose default differs at this door (`door_default`)."""
    return {s.name: s.door_default[door] for s in at_door(door, specs) if door in s.door_default}


def with_door_defaults(given: dict, door: str, specs=None) -> dict:
    """`given` with this door's own defaults filled in where unset; fail_fast's door default only where
    the audit stops decisively (with fixed budgets every row is decided at the end)."""
    out = dict(given)
    for name, value in door_defaults(door, specs).items():
        if out.get(name) is None:
            out[name] = value
    if "fail_fast" in out and given.get("fail_fast") is None and out.get("stop", DEFAULTS.stop) != "decisive":
        out["fail_fast"] = False
    return out


def marker_line(specs=None) -> str:
    """The `markers` ini line that documents the `specverify` marker."""
    keys = marker_keywords(specs)
    return (f"specverify({', '.join(f'{k}=None' for k in keys)}): settings of the specverify exactness gate "
            "(the `specverify` fixture) in this test")


def check_marker(args, kwargs, specs=None) -> None:
    """InputError unless a `specverify` marker (or the fixture's keywords) names known settings only."""
    keys = marker_keywords(specs)
    unknown = sorted(set(kwargs) - set(keys))
    if unknown or args:
        raise InputError(f"@pytest.mark.specverify takes keyword settings {', '.join(keys)}, got "
                         f"{', '.join(map(repr, list(args) + unknown))}")


def check_value(name: str, value, battery, label: str | None = None, specs=None):
    """One setting's value, checked and normalised; InputError names it as `label` (default: its name).
    The one validation every front door uses."""
    spec = next((s for s in _specs(specs) if s.name == name), None)
    if spec is None:
        raise InputError(f"unknown setting {name!r}; known: {', '.join(s.name for s in _specs(specs))}")
    return spec.check(value, label or name, battery)


def check_given(given: dict, battery, label) -> dict:
    """The set values of `given` (None: unset) checked; `label(name)` spells each for errors."""
    return {k: check_value(k, v, battery, label(k)) for k, v in given.items() if v is not None}


def resolve(given: dict, adapter_defaults: dict | None, battery, label=None) -> Settings:
    """The settings of an audit: `given` (what the user set; None values are unset) over the
    adapter's `audit_defaults` over DEFAULTS, each value validated where it comes from.
    `label(name)` is how the user spelled a setting (e.g. "--samples"), for the error message."""
    values = {}
    sources = ((adapter_defaults or {}, lambda n: f"audit_defaults[{n!r}]", "audit_defaults key"),
               (given, label or (lambda n: n), "setting"))
    for source, name_of, what in sources:
        unknown = sorted(set(source) - set(NAMES))
        if unknown:
            raise InputError(f"unknown {what}(s) {', '.join(unknown)}; known: {', '.join(NAMES)}")
        values.update(check_given(source, battery, name_of))
    return replace(DEFAULTS, **values)


def context_values(s: Settings) -> dict:
    """The settings the checks read, as keyword arguments of `battery.base.Context`."""
    return {spec.name: getattr(s, spec.name) for spec in SPECS if spec.context}
