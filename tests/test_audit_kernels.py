"""`specverify audit kernels`: the Triton sampler kernels pass the exact checks of the battery
(under the interpreter on a CPU, with the adapter's CPU-sized defaults)."""

import json
import subprocess
import sys

import pytest

pytest.importorskip("triton")


@pytest.mark.slow
def test_audit_kernels_passes_its_cpu_battery(tmp_path):
    out = tmp_path / "k.json"
    proc = subprocess.run([sys.executable, "-m", "specverify", "audit", "kernels", "--json", str(out), "--quiet"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    names = {c["name"] for c in data["checks"]}
    assert any(n.startswith("chain.zero_prob") for n in names) and "chain.composition" in names
    assert all(c["verdict"] == "pass" for c in data["checks"])


def test_kernels_adapter_states_cpu_defaults_and_matches_the_reference():
    import numpy as np

    from specverify.adapters.kernels import KernelsEngine
    from specverify.reference import chain
    from specverify.reference.batch import Coins, VerifyBatch

    engine = KernelsEngine()
    assert {"chain", "greedy"} <= engine.capabilities
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(5), size=4)
    q = rng.dirichlet(np.ones(5), size=3)
    batch = VerifyBatch.from_requests([([1, 2, 0], p, q, False), ([], p[:1], q[:0], False)])
    coins = Coins.for_batch(batch, [0.0, 0.3, 0.99], [1.0, 0.2])
    np.testing.assert_array_equal(engine.verify(batch, coins), chain.verify_batch(batch, coins))
