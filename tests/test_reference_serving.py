"""reference/serving.py: the completion plain decode returns from a token stream, and logprobs.

The worked example is the one in docs/serving-path.md (the toy tokenizer: token i is the text " t{i}")."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specverify.errors import InputError
from specverify.reference import serving
from specverify.reference.transforms import Transform


def detok(ids):
    return "".join(f" t{t}" for t in ids)


STREAM = (2, 0, 3, 1, 3, 0, 2)


def test_worked_example_stop_string_spanning_two_tokens():
    c = serving.finish(STREAM, max_tokens=6, detokenize=detok, stop=(" t3 t1",))
    assert c.ids == (2, 0, 3, 1) and c.text == " t2 t0" and c.finish_reason == "stop"
    assert c.stopped_by == "stop_string"
    assert c.logprobs([-1.0, -2.0, -3.0, -4.0, -5.0, -6.0]) == (-1.0, -2.0, -3.0, -4.0)


def test_earliest_match_wins_among_stop_strings():
    # after token 3 the text " t2 t0 t3 t1" holds " t1" (start 9) and " t0 t3" (start 3): cut at 3 --
    # but " t0 t3" completes already at token 2, so the run ends there
    c = serving.finish(STREAM, max_tokens=6, detokenize=detok, stop=(" t1", " t0 t3"))
    assert c.ids == (2, 0, 3) and c.text == " t2"
    # two strings completed by the same token: the earlier start
    c = serving.finish(STREAM, max_tokens=6, detokenize=detok, stop=(" t1", " t3 t1"))
    assert c.ids == (2, 0, 3, 1) and c.text == " t2 t0"


def test_the_length_cap_and_eos():
    c = serving.finish(STREAM, max_tokens=3, detokenize=detok)
    assert c.ids == (2, 0, 3) and c.finish_reason == "length" and c.text == " t2 t0 t3"
    c = serving.finish(STREAM, max_tokens=6, eos_id=3)
    assert c.ids == (2, 0, 3) and c.finish_reason == "stop" and c.stopped_by == "eos" and c.text is None
    assert serving.finish(STREAM, max_tokens=6, eos_id=3, ignore_eos=True).ids == STREAM[:6]
    # EOS exactly at the cap: "stop", not "length"
    assert serving.finish(STREAM, max_tokens=3, eos_id=3).finish_reason == "stop"
    assert serving.finish(STREAM, max_tokens=6, stop_token_ids=(1,)).stopped_by == "stop_token"
    assert serving.finish(STREAM[:2], max_tokens=6) is None          # a stream that ended early


def test_the_step_boundaries_do_not_matter():
    """finish() sees tokens, not steps: any split of the stream into multi-token steps gives one answer."""
    rng = np.random.default_rng(0)
    stream = rng.integers(0, 4, size=40).tolist()
    for stop in ((" t3 t3",), (" t1 t2 t0",), (" t0", " t2 t2")):
        want = serving.finish(stream, max_tokens=30, detokenize=detok, stop=stop)
        assert want is not None
        got = []
        for step in np.split(np.array(stream), np.sort(rng.choice(np.arange(1, 40), 12, replace=False))):
            got += step.tolist()
            c = serving.finish(got, max_tokens=30, detokenize=detok, stop=stop)
            if c is not None:
                break
        assert c == want


def test_usage_counts_kept_ids_and_prompts_once():
    a = serving.finish(STREAM, max_tokens=6, detokenize=detok, stop=(" t3 t1",))
    b = serving.finish(STREAM, max_tokens=2)
    assert serving.usage([5], [a, b]) == {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}
    assert serving.stream_text([" t2", "", " t0"]) == " t2 t0"


def test_logprobs_raw_and_processed():
    row = np.log([1.0, 2.0, 1.0])
    assert serving.token_logprob(row, 1) == pytest.approx(math.log(0.5), abs=1e-15)
    assert serving.token_logprob(row, 0) == pytest.approx(math.log(0.25), abs=1e-15)
    # temperature 0.5 squares the odds: 1 : 4 : 1
    t = Transform(temperature=0.5)
    assert serving.token_logprob(row, 1, serving.PROCESSED, t) == pytest.approx(math.log(4 / 6), abs=1e-15)
    # top-k 1 keeps the argmax alone: the others are -inf
    assert serving.token_logprob(row, 0, serving.PROCESSED, Transform(top_k=1)) == -math.inf
    lsm = serving.log_softmax(np.array([0.0, 1.0, 1.0, -np.inf]))
    assert serving.top_logprobs(lsm, 4) == [(1, lsm[1]), (2, lsm[2]), (0, lsm[0])]    # ties by id; -inf out
    # the server's batcher computes the same bits (the definition is a function of the row alone)
    from specverify.server.batching import log_softmax as server_lsm
    x = np.random.default_rng(1).normal(size=257) * 7
    assert serving.log_softmax(x).tobytes() == server_lsm(x).tobytes()


def test_bad_input_is_one_clear_error():
    with pytest.raises(InputError, match="detokenizer"):
        serving.finish(STREAM, max_tokens=3, stop=("x",))
    with pytest.raises(InputError, match="non-empty"):
        serving.finish(STREAM, max_tokens=3, detokenize=detok, stop=("",))
    with pytest.raises(InputError, match="mode"):
        serving.token_logprob([0.0, 1.0], 0, "logits")
    with pytest.raises(InputError, match="outside"):
        serving.token_logprob([0.0, 1.0], 2)
