"""`kerneltools/gpu_check.py` on tiny shapes under the interpreter (--smoke), so that the GPU script
does not rot while CI has no GPU: every check runs, the Triton kernels pass, and the negative
control (the default backend's matmul) is seen failing in the same report."""

import json

import pytest

pytest.importorskip("triton")


def test_gpu_check_smoke_runs_and_passes(capsys):
    from specverify.kerneltools import gpu_check
    rc = gpu_check.main(["--smoke"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and report["ok"] is True
    from specverify.kernels.registry import OPS
    tri = [r for r in report["invariance"] if r["backend"] == "triton"]
    small_cases = sum(len(shape.dtypes) for op in OPS.values() for shape in op.small)
    assert len(tri) == small_cases and all(r["ok"] for r in tri)
    assert {"linear[64->40,Q4_1,float32]", "linear[64->40,Q8_0,float32]"} <= {r["op"] for r in tri}
    assert {r["op"].split("[")[0] for r in tri} >= {"linear", "rms_norm", "softmax", "log_softmax", "silu_mul",
                                                     "rotary", "attention"}
    default_linear = [r for r in report["invariance"] if r["backend"] == "default" and r["op"] == "linear[40->40,float32]"]
    assert default_linear and not default_linear[0]["ok"]
    assert report["sampler_exact"]["ok"] and report["sampler_exact"]["runs"] >= 6
    assert report["linear_accuracy"]["float32"]["max_err_over_sum_abs"] < 40 * 2 ** -24
    assert any(k.startswith("attention[") for k in report["bench"])


def test_gpu_check_without_a_gpu_says_so(capsys):
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    from specverify.kerneltools import gpu_check
    assert gpu_check.main([]) == 2
    assert "no CUDA device" in json.loads(capsys.readouterr().out)["error"]
