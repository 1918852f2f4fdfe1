"""Mutants of the serving path (45-51, 54, 55): our engine with one bug downstream of its sampler, audited at the
serving engine level (`adapters/specverify_serving.py`, check `engine_serving`, whose rows are the server
level's `checks/serving.py` run without HTTP).

Each is one of the broken engines `specverify serve --variant NAME` serves (`server/variants.py`, where the
bug is written), here in process: the zoo's time goal leaves no room for a server a mutant (a child
process, its imports and HTTP for ~500 requests take longer than a mutant's whole budget of 10 s on 2
shared cores), and the engine level reaches the same fields. The row meant to catch each is `ROW[name]`;
tests/test_serving.py runs the same variants as servers against the server rows. Threads from
../shared/BUGCLASSES.md, "The serving path".
"""

from __future__ import annotations

from specverify.adapters.specverify_serving import SpecverifyServing

from .registry import mutant

TARGET = ("engine_serving",)
ROW: dict = {}                 # mutant name -> the engine_serving row meant to catch it


def _row(name: str, row: str):
    def note(cls):
        ROW[name] = row
        return cls
    return note


@mutant(45, "stop-per-step", targets=TARGET)
@_row("stop-per-step", "engine.stop")
class StopPerStep(SpecverifyServing):
    """Stop strings matched once a step, not per token (vllm-project/vllm PR #47616, sgl-project/sglang PR
    #23802, snowflakedb/ArcticInference #161, microsoft/onnxruntime-genai PR #2528): the text is cut at the
    match, the ids and logprobs of the step's tokens past the completing one are kept."""

    variant = "stop-per-step"


@mutant(46, "cap-crossed", targets=TARGET)
@_row("cap-crossed", "engine.length")
class CapCrossed(SpecverifyServing):
    """The length cap crossed by an accepted run (sgl-project/sglang #31599 / PR #33758): drafts not limited
    to the tokens left and max_tokens checked once a step, so a run returns more than max_tokens ids."""

    variant = "cap-crossed"


@mutant(47, "usage-charges-drafts", targets=TARGET)
@_row("usage-charges-drafts", "engine.length")
class UsageChargesDrafts(SpecverifyServing):
    """Usage charging the whole block (sgl-project/sglang #39826, ik_llama.cpp PR #2358): every step adds
    its drafted tokens plus one to completion_tokens, rejected drafts included."""

    variant = "usage-charges-drafts"


@mutant(48, "logprobs-from-draft", targets=TARGET)
@_row("logprobs-from-draft", "engine.logprobs")
class LogprobsFromDraft(SpecverifyServing):
    """Logprobs read from the wrong tensor (vllm-project/vllm PRs #30846, #33391, #44727): an accepted
    draft's logprob is the draft's row q, not the target row it was verified against; tokens exact."""

    variant = "logprobs-from-draft"


@mutant(49, "stream-last-token", targets=TARGET)
@_row("stream-last-token", "engine.stream")
class StreamLastToken(SpecverifyServing):
    """A stream that assumes one token a step (vllm-project/vllm PR #26027, #52469; alibaba/rtp-llm PR
    #1285): each step's event carries only its last token, so the deltas lose the others."""

    variant = "stream-last-token"


@mutant(50, "seed-offset-by-steps", targets=TARGET)
@_row("seed-offset-by-steps", "engine.seeds")
class SeedOffsetBySteps(SpecverifyServing):
    """A seeded request's generator offset by the engine's step count (NVIDIA/TensorRT-LLM PRs #17599,
    #17172): the same seeded request gives other tokens after other traffic."""

    variant = "seed-offset-by-steps"


@mutant(51, "preempt-keeps-draft-state", targets=TARGET)
@_row("preempt-keeps-draft-state", "engine.preemption")
class PreemptKeepsDraftState(SpecverifyServing):
    """Preemption out of step with the draft state (vllm-project/vllm #52071, PRs #40768, #46066, #49620):
    a request preempted while decoding is recomputed with a stale KV tail (its last token's slot holds the
    token before it); exact without preemption -- the adapter's KV budget preempts every wave."""

    variant = "preempt-keeps-draft-state"


@mutant(54, "preempt-accepts-stale-drafts", targets=TARGET)
@_row("preempt-accepts-stale-drafts", "engine.preemption.law")
class PreemptAcceptsStaleDrafts(SpecverifyServing):
    """Preemption that keeps stale draft state in a law-changing way (vllm-project/vllm #52071, PRs #40768,
    #46066): an unseeded sampled request preempted while decoding takes its resumed step's drafts as
    accepted, unverified -- its run law there is the draft's. Greedy and seeded requests are exact, so the
    exact comparisons of engine.preemption pass; only the run law under preemption (engine.preemption.law)
    sees it."""

    variant = "preempt-accepts-stale-drafts"


@mutant(55, "stream-splits-characters", targets=TARGET)
@_row("stream-splits-characters", "engine.stream")
class StreamSplitsCharacters(SpecverifyServing):
    """A stream that sends an unfinished UTF-8 sequence (vllm-project/vllm PR #26027's incremental
    detokenizer; byte-fallback tokens, ../shared/BUGCLASSES.md "The serving path"): a step ending inside a
    multi-byte character streams U+FFFD at once, so the deltas differ from the text. On the toy's
    multi-byte text (a byte pair forming "€", an emoji): words would never show it."""

    variant = "stream-splits-characters"
    text = "multibyte"
