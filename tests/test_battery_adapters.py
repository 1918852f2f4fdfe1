"""Plug-in adapters through the CLI: a correct one passes, and every way an adapter can break -- an
unknown name, a factory that raises, a crash, a hang, garbage output -- is one line on stderr and
exit 2 (never a traceback). Also: the engine-level protocol through a plug-in, and the fresh-adapter
factory the seeded checks need."""

import re
import subprocess
import sys

import numpy as np
import pytest

from specverify.adapters.registry import factory, resolve
from specverify.audit import Context, run_audit
from specverify.errors import AdapterError, InputError

# a 15 s call timeout: 2 s (the old value) timed out building adapters and in correct calls on the
# 2 shared cores at load 14; the hanging plug-in below then costs 15 s
QUICK = ["--samples", "2000", "--checks", "endpoints,composition", "--timeout", "15", "--quiet"]

GOOD = """
from specverify.reference import fast

class Good:
    name = "good"
    capabilities = {"chain", "greedy"}
    def verify(self, batch, coins):
        return fast.verify_batch(batch, coins)

def factory():
    return Good()
"""

BROKEN = {
    "factory raises": ("def factory():\n    raise RuntimeError('no GPU here')\n", "RuntimeError: no GPU here"),
    "import raises": ("raise ImportError('missing dependency')\n", "ImportError"),
    "no capabilities": ("class A:\n    name = 'a'\n    capabilities = set()\ndef factory():\n    return A()\n", "no capabilities"),
    "verify crashes": ("class A:\n    name = 'a'\n    capabilities = {'chain'}\n    def verify(self, batch, coins):\n"
                       "        raise ValueError('index out of range')\ndef factory():\n    return A()\n",
                       "raised ValueError: index out of range"),
    "verify hangs": ("import time\nclass A:\n    name = 'a'\n    capabilities = {'chain'}\n    def verify(self, batch, coins):\n"
                     "        time.sleep(60)\ndef factory():\n    return A()\n", "no answer within 15 s"),
    "float output": ("import numpy as np\nclass A:\n    name = 'a'\n    capabilities = {'chain'}\n    def verify(self, batch, coins):\n"
                     "        return np.zeros((batch.batch_size, batch.max_spec_len + 1))\ndef factory():\n    return A()\n",
                     "is not an integer type"),
    "wrong shape": ("import numpy as np\nclass A:\n    name = 'a'\n    capabilities = {'chain'}\n    def verify(self, batch, coins):\n"
                    "        return np.zeros((batch.batch_size, 1), int)\ndef factory():\n    return A()\n", "output shape"),
    "id out of range": ("import numpy as np\nclass A:\n    name = 'a'\n    capabilities = {'chain'}\n    def verify(self, batch, coins):\n"
                        "        return np.full((batch.batch_size, batch.max_spec_len + 1), 99)\ndef factory():\n    return A()\n",
                        "outside [-1,"),
    "not an array": ("class A:\n    name = 'a'\n    capabilities = {'chain'}\n    def verify(self, batch, coins):\n"
                     "        return None\ndef factory():\n    return A()\n", "output shape"),
}


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "specverify", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def assert_one_line_exit_2(proc, needle):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specverify: error:"), proc.stderr
    assert "Traceback" not in proc.stderr and needle in lines[0], lines[0]


def test_a_correct_plugin_passes(tmp_path):
    (tmp_path / "good.py").write_text(GOOD)
    proc = cli("audit", f"{tmp_path / 'good.py'}:factory", *QUICK)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_plugin_is_one_line_and_exit_2(tmp_path, case):
    source, needle = BROKEN[case]
    path = tmp_path / "adapter.py"
    path.write_text(source)
    assert_one_line_exit_2(cli("audit", f"{path}:factory", *QUICK), needle)


@pytest.mark.parametrize("spec, needle", [
    ("no_such_module_xyz:factory", "no module named 'no_such_module_xyz'"),
    ("/nonexistent/adapter.py:factory", "no such file"),
    ("specverify.errors:no_such_factory", "has no attribute 'no_such_factory'"),
    ("mutant:no-such-bug", "unknown mutant 'no-such-bug'"),
    ("not-an-engine", "unknown engine 'not-an-engine'"),
])
def test_unknown_names_are_one_line_and_exit_2(spec, needle):
    assert_one_line_exit_2(cli("audit", spec, *QUICK), needle)


def test_the_seeded_checks_build_fresh_adapters_from_the_factory():
    make = factory("reference")
    a, b = make(), make()
    assert a is not b and type(a) is type(b)
    result = run_audit(a, Context(samples=2000), ["reproducibility", "rng_discipline"], factory=make)
    assert result.verdict == "pass" and all(r.verdict == "pass" for r in result.checks)
    skipped = run_audit(a, Context(samples=2000), ["reproducibility"], factory=None)
    assert any(r.verdict == "skip" for r in skipped.checks)


ENGINE = """
import numpy as np
from specverify.reference.toy_engine import SpecEngine

class MyEngine:
    name = "my-engine"
    capabilities = {"engine"}
    def __init__(self, report_counters):
        self.inner = SpecEngine()
        self.report_counters = report_counters
    def generate(self, target, draft, prompt, kappa, transform, seed, n, length):
        tokens, info = self.inner.generate(target, draft, prompt, kappa, transform, seed, n, length)
        return (tokens, info) if self.report_counters else tokens

def factory():
    return MyEngine(True)

def quiet_factory():
    return MyEngine(False)
"""


def test_an_engine_level_plugin_is_audited_by_the_run_checks(tmp_path):
    path = tmp_path / "engine.py"
    path.write_text(ENGINE)
    engine = resolve(f"{path}:factory")
    result = run_audit(engine, Context(samples=20_000))
    assert result.verdict == "pass"
    assert {r.check for r in result.checks if r.verdict != "skip"} == {"runs", "transforms", "identity", "rare_event"}
    # it declares no logits processors: their check runs nothing, says so, and the result lists it
    assert [r.verdict for r in result.checks if r.check == "processors"] == ["skip"]
    assert "does not declare processors" in result.to_dict()["not_covered"]["processors"]
    quiet = run_audit(resolve(f"{path}:quiet_factory"), Context(samples=5000), ["runs", "identity"])
    assert [r.verdict for r in quiet.checks if r.check == "identity"] == ["skip"]   # no counters: says why


def test_an_engine_with_no_applicable_check_is_an_error():
    class Nothing:
        name = "nothing"
        capabilities = {"block"}
    with pytest.raises(AdapterError, match="supports none of the checks"):
        run_audit(Nothing(), Context(samples=1000), ["greedy"])


def test_generate_returning_short_runs_is_garbage():
    class Short:
        name = "short"
        capabilities = {"engine"}

        def generate(self, target, draft, prompt, kappa, transform, seed, n, length):
            out = np.zeros((n, length), np.int64)
            out[:, -1] = -1
            return out
    with pytest.raises(AdapterError, match="fewer than"):
        run_audit(Short(), Context(samples=1000), ["runs"])


@pytest.mark.parametrize("info, message", [
    ([3, 3], "info must be a dict of counters"),
    ("drafted=3", "info must be a dict of counters"),
    (float("nan"), "info must be a dict of counters"),
    ({"num_drafted": -4, "num_accepted": -4}, "info['num_drafted'] must be a non-negative integer count, got -4"),
    ({"num_drafted": 10.5, "num_accepted": 3}, "info['num_drafted'] must be a non-negative integer count, got 10.5"),
    ({"num_drafted": float("nan"), "num_accepted": 3}, "must be a non-negative integer count, got nan"),
    ({"num_drafted": "10", "num_accepted": 3}, "must be a non-negative integer count, got '10'"),
    ({"num_drafted": True, "num_accepted": True}, "must be a non-negative integer count, got True"),
    ({"num_drafted": 10, "num_accepted": 11}, "11 drafts accepted of 10 drafted"),
])
def test_malformed_engine_counters_are_an_adapter_error_not_a_verdict(info, message):
    # negative counters made the identity row FAIL ("biased"), accepted > drafted and fractional ones
    # PASS or FAIL by truncation, a list or a string a traceback: all are the adapter's error
    from specverify.reference.toy_engine import SpecEngine

    class Counts:
        name = "counts"
        capabilities = {"engine"}

        def generate(self, target, draft, prompt, kappa, transform, seed, n, length):
            return SpecEngine().generate(target, draft, prompt, kappa, transform, seed, n, length)[0], info

    with pytest.raises(AdapterError, match=re.escape(message)):
        run_audit(Counts(), Context(samples=1000), ["identity"])


def test_lossy_names_still_fail_with_their_own_message():
    with pytest.raises(InputError, match="unknown lossy rule"):
        factory("lossy:nonsense")


TORCH_ENGINE = """
import torch

class PlainTorchSampler:
    '''Plain autoregressive sampling with a torch causal LM (no drafts): exact, so the run checks pass.'''
    name = "plain-torch"
    capabilities = {"engine"}
    models = "torch"

    def __init__(self, double_temperature=False):
        self.double_temperature = double_temperature

    def generate(self, target, draft, prompt, kappa, transform, seed, n, length):
        g = torch.Generator().manual_seed(seed)
        ids = torch.tensor([list(prompt)] * n, dtype=torch.long)
        for _ in range(length):
            logits = target(ids)[:, -1]
            if transform.temperature == 0:
                nxt = logits.argmax(dim=1)
            else:
                t = transform.temperature * (2 if self.double_temperature else 1)
                logits = logits / t
                if transform.top_k:
                    kth = logits.topk(transform.top_k, dim=1).values[:, -1:]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                probs = torch.softmax(logits, dim=1)
                if transform.top_p < 1:
                    sp, order = probs.sort(dim=1, descending=True, stable=True)
                    keep = torch.cumsum(sp, 1) - sp < transform.top_p
                    probs = torch.zeros_like(probs).scatter(1, order, sp * keep)
                nxt = torch.multinomial(probs, 1, generator=g)[:, 0]
            ids = torch.cat([ids, nxt[:, None]], dim=1)
        return ids[:, len(prompt):].numpy()

def factory():
    return PlainTorchSampler()

def buggy():
    return PlainTorchSampler(double_temperature=True)
"""


def test_a_torch_engine_gets_torch_models_and_is_audited(tmp_path):
    import torch

    from specverify.reference.torch_toy import as_torch
    from specverify.reference.toy import ToyModel

    toy = ToyModel(4, 3, zero_frac=0.2)
    ids = torch.tensor([[1, 2, 0], [3, 3, 1]])
    logits = as_torch(toy)(ids)
    for b in range(2):
        for t in range(3):
            assert np.array_equal(logits[b, t].numpy(), toy.logits(ids[b, :t + 1].tolist()))
    path = tmp_path / "torch_engine.py"
    path.write_text(TORCH_ENGINE)
    good = run_audit(resolve(f"{path}:factory"), Context(samples=20_000), ["runs", "transforms"])
    assert good.verdict == "pass", [(r.name, r.detail) for r in good.checks if r.verdict != "pass"]
    bad = run_audit(resolve(f"{path}:buggy"), Context(samples=20_000), ["transforms"])
    assert any(r.name.startswith("engine.transform[temperature") and r.verdict == "fail" for r in bad.checks)
