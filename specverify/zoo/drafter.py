"""Mutants of our own engine's drafter (`specverify.engine`, through its adapter at engine level only):
the drafter's state out of sync with the committed sequence. The output law stays exact (every draft is
verified with the q it was drawn from); acceptance falls, which only the acceptance law
(`engine_acceptance`) and the metamorphic acceptance rows (`acceptance_invariance`) see.
"""

from __future__ import annotations

from specverify.adapters.specverify_engine import SpecverifyEngine

from .registry import mutant


@mutant(42, "draft-kv-not-ingested-after-k0", targets=("engine_acceptance", "acceptance_invariance"))
class DraftKvNotIngestedAfterK0Adapter(SpecverifyEngine):
    """Our engine whose drafter ingests committed tokens only when asked for drafts, so the token of a
    step without drafts (the prefill's, a plain decode's) never reaches its KV (vllm-metal PR #716: with
    dynamic K, `propose()` returned before ingesting committed tokens when K was 0, and acceptance fell
    "even though the target-model output remained correct"; `zoo.our_engine.DraftKvNotIngestedAfterK0`).
    Engine level only (its sampler is the exact one)."""

    capabilities = {"engine"}
    processors: set = set()

    @property
    def engine_class(self):
        from .our_engine import DraftKvNotIngestedAfterK0
        return DraftKvNotIngestedAfterK0
