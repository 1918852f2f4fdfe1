"""vLLM's v1 rejection sampler (`vllm/v1/sample/rejection_sampler.py::rejection_sample`), on CPU.

What runs is vLLM's own code from the installed wheel: `rejection_sample`, its greedy and random
Triton kernels and its recovered-token kernel, under TRITON_INTERPRET=1. The adapter only translates
the layout and injects the randomness:

    ours (specverify.reference.batch)          vLLM
    draft_token_ids [T], -1 padded         ->  draft_token_ids int32 [T]         (same layout)
    num_draft_tokens [B]                   ->  num_draft_tokens list, cu_num_draft_tokens int32 [B]
    target_probs [T + B, V]                ->  target_logits [T, V] float64 (draft rows only): log(p) for
                                               sampled requests (vLLM's softmax(dtype=float32) gives p up to
                                               float32 rounding); p itself for greedy requests, which only
                                               take its argmax (keeps float64 ties and near ties)
    draft_probs [T, V] | None              ->  draft_probs float32 [T, V] | None (NO_DRAFT_PROBS)
    greedy [B]                             ->  sampling_metadata.temperature 0 (greedy) / 1
    accept coins [T]                       ->  returned by a replaced `generate_uniform_probs`
    final coin [B]                         ->  the bonus token, drawn here from p_kappa by the reference's
                                               inverse CDF (vLLM samples bonus tokens in its main
                                               Sampler and passes them in: `bonus_token_ids`; a row
                                               that is no distribution gets the placeholder 0)

Recovered tokens come from vLLM's own Exp(1) race (`sample_recovered_tokens_kernel`: argmax of
max(0, p - q) / E). Request b's exponentials are drawn here from a generator seeded by its own final
coin, so a call is reproducible and a request's tokens do not depend on its neighbours; `exponentials` can be set to inject them. The kernel is launched with a vocab
tile of min(8192, next_pow2(V)): vLLM's own 8192 for V > 8192 (its tiles and its last partial tile,
which the real-vocabulary rows test), and for V <= 8192 one tile as in vLLM, the same reduction (in
the interpreter the smaller tile is ~2x faster). Set `stock_recovered = True` to call vLLM's own
`sample_recovered_tokens` unchanged instead (torch's global RNG, seeded the same way).

Hence the documented difference from the reference under shared coins: the acceptance decisions and
the bonus token are the reference's, token for token; a recovered token is drawn from the same
residual law by a different mechanism (Exp race instead of inverse CDF).
"""

from __future__ import annotations

import hashlib

import numpy as np

from specverify import installed
from specverify.reference.sampling import argmax_lowest, draw

MODULE = "vllm.v1.sample.rejection_sampler"
VLLM_TILE = 8192                  # the vocab tile of vLLM's `_sample_recovered_tokens` launch


NO_BONUS = 0                      # the bonus id passed for a row that is no distribution (below)


def bonus_token(row: np.ndarray, greedy: bool, coin: float) -> int:
    """The bonus token the adapter passes in (vLLM's main Sampler draws it, outside rejection_sample):
    the argmax for a greedy request, else the reference's inverse-CDF draw with the final coin. A row
    with no positive finite mass (NaN, inf, all zeros: the hostile rows) has no draw; it gets the
    placeholder NO_BONUS, so that vLLM's rejection sampler still sees the request's draft rows (the
    bonus id of such a row is the adapter's, not vLLM's)."""
    if not (np.isfinite(row).all() and (row > 0).any()):
        return NO_BONUS
    return argmax_lowest(row) if greedy else draw(row, coin)


class VllmSampler:
    name = "vllm"
    capabilities = {"chain", "greedy"}

    def __init__(self):
        installed.interpreted()
        self.rs = installed.load("vllm", MODULE)
        self.metadata_cls = installed.load("vllm", "vllm.v1.sample.metadata").SamplingMetadata
        import torch
        import triton
        self.torch, self.triton = torch, triton
        torch.set_num_threads(1)          # tiny tensors: intra-op threads only contend
        self.version = installed.engine_version("vllm")
        self.exponentials = None          # callable (batch_size, V) -> float32 ndarray, or None
        self.stock_recovered = False
        self._orig_recovered = self.rs.sample_recovered_tokens
        self._coins = None

    # -- injected randomness ------------------------------------------------------------------
    def _uniform(self, num_tokens, num_draft_tokens, generators, device):
        return self._coins

    def _exp(self, shape):
        """Exp(1) variables [B, V]: row b from a generator seeded by request b's own final coin, so a
        request's recovered token does not depend on its neighbours (as with vLLM's per-request
        generators)."""
        if self.exponentials is not None:
            return self.torch.as_tensor(np.asarray(self.exponentials(*shape), np.float32))
        rows = []
        for c in self._final:
            seed = int.from_bytes(hashlib.blake2b(np.float64(c).tobytes(), digest_size=8).digest(), "little") >> 1
            g = self.torch.Generator().manual_seed(seed)
            rows.append(self.torch.empty(shape[1], dtype=self.torch.float32).exponential_(generator=g))
        return self.torch.stack(rows) if rows else self.torch.empty(shape, dtype=self.torch.float32)

    def _recovered(self, max_spec_len, num_draft_tokens, cu_num_draft_tokens, draft_token_ids, draft_probs,
                   target_probs, sampling_metadata, device, use_fp64_gumbel=False):
        torch = self.torch
        vocab = target_probs.shape[-1]
        inv_q = self._exp((len(num_draft_tokens), vocab)).reciprocal()
        out = torch.empty_like(draft_token_ids)
        if max_spec_len == 0:
            return out
        self.rs.sample_recovered_tokens_kernel[(len(num_draft_tokens), max_spec_len)](
            out, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, inv_q, vocab,
            BLOCK_SIZE=min(VLLM_TILE, self.triton.next_power_of_2(vocab)), NO_DRAFT_PROBS=draft_probs is None,
            USE_FP64_GUMBEL=False)
        return out

    # -- the protocol -------------------------------------------------------------------------
    def verify(self, batch, coins):
        torch = self.torch
        b = batch.batch_size
        is_draft_row = np.ones(batch.target_probs.shape[0], bool)
        bonus_rows = batch.target_row_start + batch.num_draft_tokens
        is_draft_row[bonus_rows] = False
        greedy = batch.greedy
        rows = batch.target_probs[is_draft_row]
        with np.errstate(divide="ignore"):
            logits = np.log(rows)
        # greedy requests only take target_logits.argmax(): their rows carry p itself in float64, so
        # that ties and one-ulp near ties order as in the reference (log p in float32 would merge them)
        greedy_row = np.repeat(greedy, batch.num_draft_tokens)
        logits[greedy_row] = rows[greedy_row]
        logits = torch.from_numpy(np.ascontiguousarray(logits, np.float64))
        bonus = np.array([bonus_token(batch.target_probs[r], bool(g), float(c))
                          for r, g, c in zip(bonus_rows, greedy, coins.final)], np.int64)
        metadata = self.metadata_cls(
            temperature=torch.from_numpy(np.where(greedy, 0.0, 1.0).astype(np.float32)),
            all_greedy=bool(greedy.all()), all_random=bool((~greedy).all()), top_p=None, top_k=None,
            generators={}, max_num_logprobs=None, no_penalties=True, prompt_token_ids=None,
            frequency_penalties=None, presence_penalties=None, repetition_penalties=None, output_token_ids=[],
            allowed_token_ids_mask=None, bad_words_token_ids={}, logitsprocs=None)
        draft = None if batch.draft_probs is None else torch.from_numpy(batch.draft_probs.astype(np.float32))
        self._coins = torch.from_numpy(np.ascontiguousarray(coins.accept, np.float64))
        self._final = np.asarray(coins.final, np.float64)
        self._seed = int.from_bytes(hashlib.blake2b(self._final.tobytes(), digest_size=8).digest(), "little") >> 1
        saved = self.rs.generate_uniform_probs, self.rs.sample_recovered_tokens
        self.rs.generate_uniform_probs = self._uniform
        if self.stock_recovered:
            torch.manual_seed(self._seed)
        else:
            self.rs.sample_recovered_tokens = self._recovered
        try:
            out = self.rs.rejection_sample(
                torch.from_numpy(batch.draft_token_ids.astype(np.int32)), [int(k) for k in batch.num_draft_tokens],
                batch.max_spec_len, torch.from_numpy(batch.cu_num_draft_tokens.astype(np.int32)), draft, logits,
                torch.from_numpy(bonus.reshape(b, 1)), metadata)
        finally:
            self.rs.generate_uniform_probs, self.rs.sample_recovered_tokens = saved
        return out.numpy().astype(np.int64)


def make():
    return VllmSampler()
