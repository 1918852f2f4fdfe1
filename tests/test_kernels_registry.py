"""The op registry (`kernels/registry.py`): every op of the backend interface has an entry, every
entry's small shapes pass the invariance harness and the accuracy check on the "invariant" backend
(so a new op is checked as soon as its entry exists), and both checks can fail."""

import pytest
import torch

from specverify.kernels.backend import DefaultBackend, get_backend
from specverify.kernels.registry import OPS
from specverify.kerneltools import accuracy_check, invariance

SMALL = [(op.name, shape, dt) for op in OPS.values() for shape in op.small for dt in shape.dtypes]


@pytest.fixture(scope="module")
def inv():
    return get_backend("invariant")


def test_every_op_of_the_interface_has_an_entry():
    methods = {n for n, v in vars(DefaultBackend).items() if callable(v) and not n.startswith("_")}
    assert methods == set(OPS)


@pytest.mark.parametrize("name,shape,dtype", SMALL, ids=[f"{n}-{str(d)[6:]}" for n, _, d in SMALL])
def test_small_shapes_are_invariant_and_accurate(inv, name, shape, dtype):
    r = invariance.check(inv, name, dtype=dtype, sizes=shape.sizes(invariance.QUICK_SIZES), **shape.args)
    assert r.ok and r.rows_compared >= r.launches, r.first
    a = accuracy_check.case_accuracy(inv, name, OPS[name].case(0, dtype, **shape.args))
    assert a.ok and a.max_err_over_bound > 0, a


def test_both_checks_catch_a_wrong_op(inv):
    """An rms_norm that moves one element by an ulp in launches of 5 rows fails the harness at 5
    only; a silu_mul 0.1% off fails the accuracy check."""
    class Wrong:
        name = "wrong"

        def rms_norm(self, x, w, eps):
            y = inv.rms_norm(x, w, eps)
            if x.shape[0] == 5:
                y[2, 0] = torch.nextafter(y[2, 0], torch.tensor(float("inf")))
            return y

        def silu_mul(self, gate, up):
            return inv.silu_mul(gate, up) * 1.001

    r = invariance.check(Wrong(), "rms_norm", d=32, sizes=(1, 4, 5, 6), pool=8)
    assert r.diff_sizes == (5,) and r.mismatches == 2
    a = accuracy_check.case_accuracy(Wrong(), "silu_mul", OPS["silu_mul"].case(0, d=32))
    assert not a.ok


def test_attention_batch_is_one_request_then_spills_over():
    case = OPS["attention"].case(0, n_requests=3, max_ctx=5, launches=1)
    assert case.batch(1) == [(0, 4, 1)]
    assert case.batch(7) == [(0, 0, 5), (1, 3, 2)]
    assert case.rows(case.batch(7))[5:] == [(1, 3), (1, 4)]
