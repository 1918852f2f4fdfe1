"""The exact seeded sampler, except that in a Ray actor it kills that actor (its worker's parent
process) on its first seeded call, as often as a test allows: tests/test_ray.py loses actors mid-audit
with it. Outside a cluster started with SPECVERIFY_TEST_DIE_DIR in its environment it is exact and
never kills anything.

SPECVERIFY_TEST_DIE_DIR/times holds how many actors may die in all; each death first creates
died.<i> there (exclusively), so two actors never both take the same death.
"""

from __future__ import annotations

import os
import signal

from specverify.reference.vector import VectorSampler

DIE_DIR = "SPECVERIFY_TEST_DIE_DIR"


def _take_a_death() -> bool:
    folder = os.environ.get(DIE_DIR)
    if not folder:
        return False
    try:
        with open(os.path.join(folder, "times")) as f:
            times = int(f.read().strip() or 0)
    except FileNotFoundError:
        return False
    for i in range(times):
        try:
            os.close(os.open(os.path.join(folder, f"died.{i}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return True
        except FileExistsError:
            continue
    return False


class DiesInRay(VectorSampler):
    name = "dies-in-ray"

    def verify_seeded(self, batch, seeds):
        if _take_a_death():
            os.kill(os.getppid(), signal.SIGKILL)        # the actor process that runs this adapter's worker
            signal.pause()
        return super().verify_seeded(batch, seeds)
