"""transformers' rejection rule for assisted generation, sampler level:
`transformers.generation.utils._speculative_sampling` (batch size 1), with injected coins.

The function takes logits and draws its own randomness; the adapter feeds it one request at a time:

    candidate_input_ids [1, kappa]           the request's drafts (the function reads the last kappa ids)
    candidate_logits    [1, kappa, V]        log(q) float32 (it takes softmax again); for a deterministic
                                             draft, log of the one-hot row (0 at x, -inf elsewhere)
    new_logits          [1, kappa + 1, V]    log(p) float32
    accept coins  -> `torch.rand_like` inside the call returns the request's kappa coins (float32)
    final coin    -> `torch.multinomial(p_prime, 1)` returns the inverse-CDF draw of the reference
                     (`reference.sampling.draw`, float64 sequential sum) with the final coin; any row
                     torch itself would refuse (NaN, inf, negative, zero sum) goes to the real
                     torch.multinomial, which raises exactly as it does in transformers

So under shared coins the emitted tokens are the reference's wherever the two rules agree; the only
documented differences are transformers' own: acceptance is `coin <= p/q` (the reference: coin * q < p)
and float32 probabilities.

A padded draft (-1) has no meaning for transformers: a request is cut at its first -1, and the
padded position's target row is then its last row (transformers draws from it with the final coin).

Requests with zero drafts are not something `_speculative_sampling` handles (transformers samples
those in the plain decode path): the adapter emits their token itself (inverse CDF of p with the final
coin; a row that is no distribution goes to the real torch.multinomial of its float32 softmax, as in
that path). Greedy requests take transformers' greedy comparison (argmax of the float32 logits, drafts
accepted while equal), which lives inline in `_assisted_decoding`; the adapter restates those two
lines (`greedy`), so capability "greedy" is not claimed.
"""

from __future__ import annotations

import contextlib

import numpy as np

from specverify import installed
from specverify.reference.batch import PAD
from specverify.reference.sampling import draw


class TransformersSampler:
    name = "transformers"
    capabilities = {"chain"}

    def __init__(self):
        self.utils = installed.load("transformers", "transformers.generation.utils")
        import torch
        self.torch = torch
        torch.set_num_threads(1)          # tiny tensors: intra-op threads only contend
        self.version = installed.engine_version("transformers")
        self._accept = None
        self._final = None
        self._real_rand_like = torch.rand_like
        self._real_multinomial = torch.multinomial

    def _rand_like(self, x, *a, **k):
        coins = self.torch.from_numpy(self._accept.astype(np.float32))
        if coins.shape != x.shape:
            coins = coins.reshape(x.shape)
        return coins

    def _multinomial(self, probs, num_samples, *a, **k):
        row = probs.detach().double().reshape(-1, probs.shape[-1])
        bad = not bool(self.torch.isfinite(row).all()) or bool((row < 0).any()) or not bool((row.sum(-1) > 0).all())
        if bad or row.shape[0] != 1 or num_samples != 1:
            return self._real_multinomial(probs, num_samples, *a, **k)
        tok = draw(row[0].numpy(), self._final)
        return self.torch.tensor([[tok]], dtype=self.torch.long)

    @contextlib.contextmanager
    def injected(self):
        torch = self.torch
        torch.rand_like, torch.multinomial = self._rand_like, self._multinomial
        try:
            yield
        finally:
            torch.rand_like, torch.multinomial = self._real_rand_like, self._real_multinomial

    def one(self, drafts, target, draft, accept, final):
        """One request through _speculative_sampling; returns the emitted token ids."""
        torch = self.torch
        k = drafts.size
        if k == 0:
            return np.array([self.plain(target[0], final)])
        if draft is None:
            draft = np.zeros((k, target.shape[1]))
            draft[np.arange(k), drafts] = 1.0
        with np.errstate(divide="ignore"):
            cand_logits = torch.from_numpy(np.log(draft).astype(np.float32))[None]
            new_logits = torch.from_numpy(np.log(target).astype(np.float32))[None]
        self._accept, self._final = np.asarray(accept, np.float64), float(final)
        with self.injected():
            tokens, _ = self.utils._speculative_sampling(torch.from_numpy(drafts.astype(np.int64))[None], cand_logits,
                                                         k, new_logits)
        return tokens.reshape(-1).numpy()

    def plain(self, row, final):
        """A request without drafts: the inverse-CDF draw of p with the final coin; a row that is no
        distribution (NaN, inf, all zeros) goes where transformers' plain decode sends it,
        torch.multinomial of the float32 softmax of its logits, which raises on it."""
        if np.isfinite(row).all() and (row > 0).any():
            return draw(row, final)
        torch = self.torch
        with np.errstate(divide="ignore", invalid="ignore"):
            probs = torch.softmax(torch.from_numpy(np.log(row).astype(np.float32)), -1)
        return int(self._real_multinomial(probs[None], 1)[0, 0])

    def greedy(self, drafts, target):
        """transformers' greedy assisted path (in _assisted_decoding, not _speculative_sampling):
        selected = new_logits.argmax(-1); n_matches = length of the prefix where drafts == selected."""
        torch = self.torch
        with np.errstate(divide="ignore"):
            selected = torch.from_numpy(np.log(target).astype(np.float32)).argmax(-1).numpy()
        k = drafts.size
        n = int(np.cumprod(drafts == selected[:k]).sum()) if k else 0
        return selected[:n + 1]

    def verify(self, batch, coins):
        out = np.full((batch.batch_size, batch.max_spec_len + 1), PAD, np.int64)
        draft_start = batch.draft_start
        for b in range(batch.batch_size):
            drafts, target, draft, greedy = batch.request(b)
            if greedy:
                tok = self.greedy(drafts, target)
                out[b, :tok.size] = tok
                continue
            if (drafts < 0).any():
                k = int(np.flatnonzero(drafts < 0)[0])
                drafts, target = drafts[:k], target[:k + 1]
                draft = None if draft is None else draft[:k]
            s = int(draft_start[b])
            tok = self.one(drafts, target, draft, coins.accept[s:s + drafts.size], coins.final[b])
            out[b, :tok.size] = tok
        return out


def make():
    return TransformersSampler()
