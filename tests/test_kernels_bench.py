"""`kerneltools/bench.py` on the tiny model, so that the bench does not rot: it runs the engine's own
Llama on both backends, and the invariant backend's verify row 0 equals its decode logits."""

from specverify.kerneltools import bench


def test_bench_runs_the_engine_model_on_both_backends():
    res = bench.run_bench(context=20, kappas=(3,), rounds=1, steps_per_round=1, triton_small=False, tiny=True)
    assert [s["step"] for s in res.steps] == ["decode", "verify(kappa=3)"]
    assert all(s["ms"]["default"] > 0 and s["ms"]["invariant"] > 0 for s in res.steps)
    assert res.row0_equals_decode["invariant"] == {"3": True}
    assert res.config["model"] == "random-llama(seed=0)" and res.config["context"] == 20
    assert "verify row 0 == decode logits" in bench.format_table(res)
