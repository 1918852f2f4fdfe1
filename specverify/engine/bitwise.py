"""Greedy speculative decoding vs plain greedy decoding, bit for bit, on the real model.

For every prompt the baseline is plain decode (kappa 0) at batch size 1. Each configuration
(kappa, batch) runs the same prompts greedily with speculation and records, for every emitted
token, the target logits row it was decided from. A prompt is *identical* when its token ids and
every logits row (compared as bytes) equal the baseline's. With a batch-invariant backend that must
hold for 100% of prompts; with the default backend the first differing logit and token are
reported (the negative control).

Batch shapes: "1" (one request at a time), "8" (eight at a time), "mixed" (a ragged batch: up to
8 requests, request i capped at i % (kappa + 1) drafts, admitted as others finish, so prefills,
plain decodes and verifies of every length share launches).

Rows are compared through 128-bit BLAKE2b digests of their bytes; the first differing row is then
recomputed (baseline, same prompt) to report the differing vocabulary entry and values.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from importlib import resources

import torch

from specverify.errors import InputError

from .api import RunOptions, SpecOptions, generate
from .engine import SamplingParams

CI_KAPPAS = (1, 3, 7)
CI_BATCHES = ("1", "8", "mixed")
FULL_KAPPAS = (1, 2, 3, 4, 5, 6, 7)
FULL_BATCHES = ("1", "2", "4", "8", "16", "32", "64", "mixed")


def load_prompts(n: int | None = None, *, full: bool = False, categories=None) -> list:
    """The repo's prompt set as (category, chat, text) tuples; `full` adds the style variants."""
    data = json.loads(resources.files("specverify.engine").joinpath("prompts.json").read_text())
    base = [p for p in data["prompts"] if categories is None or p["category"] in categories]
    prefixes = data["style_prefixes"] if full else [""]
    out = [(p["category"], p["chat"], pre + p["text"] if p["chat"] else p["text"])
           for pre in prefixes for p in base]
    if not full:
        out = out[:len(base)]
    # drop duplicates (non-chat prompts get no prefix)
    seen, uniq = set(), []
    for p in out:
        if p not in seen:
            seen.add(p)
            uniq.append(p)
    return uniq if n is None else uniq[:n]


def encode_prompts(tokenizer, prompts) -> list:
    return [tokenizer.encode_chat([{"role": "user", "content": text}]) if chat else tokenizer.encode(text)
            for _, chat, text in prompts]


def _digest(row: torch.Tensor) -> bytes:
    return hashlib.blake2b(row.detach().contiguous().numpy().tobytes(), digest_size=16).digest()


@dataclass
class Divergence:
    prompt: int
    first_logit_token_index: int | None     # output index of the first row that differs
    vocab_id: int | None = None             # first vocabulary entry that differs there
    baseline_logit: float | None = None
    spec_logit: float | None = None
    max_abs_diff: float | None = None
    first_token_index: int | None = None    # output index of the first differing token id
    baseline_token: int | None = None
    spec_token: int | None = None


@dataclass
class RunResult:
    kappa: int
    batch: str
    n_prompts: int
    n_identical: int                        # token ids and every logits row identical
    n_tokens_identical: int                 # token ids identical
    n_tokens: int                           # tokens compared
    E: float
    wall_time_s: float
    first_divergence: Divergence | None = None


@dataclass
class BitwiseResult:
    backend: str
    spec: str
    n_prompts: int
    max_tokens: int
    kappas: list
    batches: list
    runs: list = field(default_factory=list)
    baseline_time_s: float = 0.0
    wall_time_s: float = 0.0
    min_top2_margin: float | None = None    # smallest top-1 minus top-2 logit over the baseline's rows:
                                            # a logit perturbation below it cannot flip a greedy token

    @property
    def n_comparisons(self) -> int:
        return sum(r.n_prompts for r in self.runs)

    @property
    def n_identical(self) -> int:
        return sum(r.n_identical for r in self.runs)

    @property
    def passed(self) -> bool:
        return self.n_comparisons > 0 and self.n_identical == self.n_comparisons

    @property
    def first_divergence(self):
        for r in self.runs:
            if r.first_divergence is not None:
                return r, r.first_divergence
        return None

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(n_comparisons=self.n_comparisons, n_identical=self.n_identical, passed=self.passed)
        return d


def _run(model, tokenizer, prompt_ids, *, backend, kappa, batch, spec, max_tokens, record):
    if batch == "mixed":
        params = [SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, kappa=i % (kappa + 1))
                  for i in range(len(prompt_ids))]
        bsz = 8
    else:
        params = [SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)] * len(prompt_ids)
        bsz = int(batch)
    return generate(model, None, prompt_ids, sampling=params, spec=SpecOptions(spec if kappa else "none", kappa=kappa),
                    run=RunOptions(backend=backend, max_batch_size=bsz, record_logits=record))


def run_bitwise(*, backend: str = "invariant", n_prompts: int | None = None, max_tokens: int | None = None,
                kappas=None, batches=None, spec: str = "ngram", full: bool = False, model=None, tokenizer=None,
                progress=None) -> BitwiseResult:
    """Greedy bitwise audit on the real model (or `model` + `tokenizer`).

    CI size (defaults): 32 prompts x 64 tokens, kappa in {1, 3, 7}, batch 1, 8 and mixed: 288
    comparisons, ~16 min measured on the shared 2 cores under heavy load (invariant backend).
    full=True: 256 prompts (the set with style variants) x 256 tokens, kappa 1..7, batch 1..64 and
    mixed -- hours on 2 cores. Any explicit argument overrides the mode's value.
    `progress(str)` is called after each configuration."""
    from .loader import load_smollm2
    n_prompts = n_prompts or (256 if full else 32)
    max_tokens = max_tokens or (256 if full else 64)
    kappas = kappas or (FULL_KAPPAS if full else CI_KAPPAS)
    batches = batches or (FULL_BATCHES if full else CI_BATCHES)
    if model is None:
        model, tokenizer = load_smollm2(backend)
    prompts = load_prompts(n_prompts, full=full)
    if len(prompts) < n_prompts:
        raise InputError(f"the prompt set has {len(prompts)} prompts, fewer than {n_prompts}")
    prompt_ids = encode_prompts(tokenizer, prompts)
    result = BitwiseResult(backend, spec, len(prompts), max_tokens, list(kappas), [str(b) for b in batches])
    t_all = time.perf_counter()

    base_digests: dict = {}
    margins = []

    def record_base(rid, j, row):
        base_digests[(rid, j)] = _digest(row)
        top2 = torch.topk(row.float(), 2).values
        margins.append(float(top2[0] - top2[1]))
    t0 = time.perf_counter()
    base = _run(model, tokenizer, prompt_ids, backend=backend, kappa=0, batch="1", spec="none",
                max_tokens=max_tokens, record=record_base)
    result.min_top2_margin = min(margins) if margins else None
    result.baseline_time_s = time.perf_counter() - t0
    if progress:
        progress(f"baseline: {len(prompts)} prompts x {max_tokens} tokens in {result.baseline_time_s:.1f}s")

    for kappa in kappas:
        for batch in batches:
            first_bad_row: dict = {}            # prompt -> (index, row)

            def record(rid, j, row):
                if rid not in first_bad_row and base_digests.get((rid, j)) != _digest(row):
                    first_bad_row[rid] = (j, row.clone())

            t0 = time.perf_counter()
            out = _run(model, tokenizer, prompt_ids, backend=backend, kappa=kappa, batch=str(batch), spec=spec,
                       max_tokens=max_tokens, record=record)
            wall = time.perf_counter() - t0
            n_tok_same = n_same = n_tok = 0
            first = None
            for i, (a, b) in enumerate(zip(base.tokens, out.tokens)):
                n_tok += len(a)
                tokens_same = a == b
                n_tok_same += tokens_same
                n_same += tokens_same and i not in first_bad_row
                if first is None and (not tokens_same or i in first_bad_row):
                    first = _describe(model, prompt_ids[i], i, a, b, first_bad_row.get(i), backend, max_tokens)
            rr = RunResult(kappa, str(batch), len(prompts), n_same, n_tok_same, n_tok,
                           out.metrics.mean_acceptance_length, wall, first)
            result.runs.append(rr)
            if progress:
                progress(f"kappa={kappa} batch={batch}: {n_same}/{len(prompts)} identical "
                         f"(tokens {n_tok_same}/{len(prompts)}), E={rr.E:.2f}, {wall:.1f}s")
    result.wall_time_s = time.perf_counter() - t_all
    return result


def _describe(model, prompt, i, base_tokens, spec_tokens, bad, backend, max_tokens) -> Divergence:
    d = Divergence(prompt=i, first_logit_token_index=None)
    for j, (x, y) in enumerate(zip(base_tokens, spec_tokens)):
        if x != y:
            d.first_token_index, d.baseline_token, d.spec_token = j, x, y
            break
    if bad is not None:
        j, row = bad
        d.first_logit_token_index = j
        rows = {}
        _run(model, None, [prompt], backend=backend, kappa=0, batch="1", spec="none", max_tokens=j + 1,
             record=lambda rid, jj, r: rows.__setitem__(jj, r.clone()))
        base_row = rows[j]
        diff = (base_row != row).nonzero()
        if diff.numel():
            v = int(diff[0, 0])
            d.vocab_id, d.baseline_logit, d.spec_logit = v, float(base_row[v]), float(row[v])
            d.max_abs_diff = float((base_row.double() - row.double()).abs().max())
    return d


def backend_available(name: str) -> bool:
    from specverify.kernels.backend import backend_names
    return name in backend_names()
