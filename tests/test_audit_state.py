"""Two audits in one process are independent: the audit's state (`battery.state.AuditState`) is its
own, the context is frozen and carries no hidden keys, no law or model cache outlives an audit."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from specverify.audit import prepare
from specverify.battery.base import Context

ENGINES = ("reference", "mutant:coin-reused-for-residual")
CHECKS = ("marginal", "joint", "acceptance", "runs")
SAMPLES = 2000


def rows(name: str) -> dict:
    """The audit of `name` (in this process, small), as JSON without its timings."""
    ready = prepare(name, {"seed": 0, "samples": SAMPLES, "checks": CHECKS}, isolated=False)
    return _untimed(ready.run().to_dict())


def _untimed(value):
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if "seconds" not in k}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def _alone(name: str) -> dict:
    code = f"import json, sys; from tests.test_audit_state import rows; json.dump(rows({name!r}), sys.stdout)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True)
    return json.loads(out.stdout)


def test_two_engines_back_to_back_equal_each_alone():
    together = [json.loads(json.dumps(rows(name))) for name in ENGINES]
    assert together[0]["verdict"] == "pass" and together[1]["verdict"] == "fail"
    for name, seen in zip(ENGINES, together):
        alone = _alone(name)
        assert seen == alone, name
        calls = [c for c in seen["checks"] if c["name"] == "contract.inputs_unchanged"]
        assert calls and calls[0]["n"] == alone["checks"][-1]["n"]      # each audit counts its own calls


def test_the_context_is_frozen_and_has_no_hidden_keys():
    ctx = Context()
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.check = "marginal"
    assert not hasattr(ctx, "__dict__")        # nothing can be written beside the declared fields
    assert dataclasses.replace(ctx, check="x").state is ctx.state


def test_each_audit_has_a_state_of_its_own():
    from specverify.adapters.reference import ReferenceEngine
    from specverify.audit import run_audit

    seen = []
    run_audit(ReferenceEngine(), Context(samples=2000), ["marginal"], extra=lambda e, c: seen.append(c.state) or [])
    run_audit(ReferenceEngine(), Context(samples=2000), ["marginal"], extra=lambda e, c: seen.append(c.state) or [])
    assert seen[0] is not seen[1] and seen[0].shared is not seen[1].shared
    assert seen[0].shared.laws and seen[0].onestep
