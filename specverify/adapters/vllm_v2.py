"""vLLM's model-runner-v2 rejection sampler (`vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py::
rejection_sample`), the standard rule and block verification (`use_block_verification=True`, vLLM's
`rejection_sample_method="block"`), on CPU under TRITON_INTERPRET=1.

What runs is vLLM's code: the logits-statistics, cumulative-ratio, residual-mass, rejection, resample
and insert kernels, bonus and recovered tokens included (its own seeded Gumbel race). Layout:

    target_logits   float64 [T + B, V]   log(p), every row of every request (draft rows and bonus row);
                                          p itself for greedy requests (argmax only: float64 ties kept)
    draft_logits    float32 [B, max_k, V] log(q) (vLLM keeps draft logits pre-temperature; temperature 1
                                          here) or None for deterministic drafts (one-hot q)
    draft_sampled   int64 [T + B]        request b's logit rows start..start+k; draft j sits at start+j+1
    cu_num_logits   int32 [B + 1];  pos int64 [T + B] = the row's position within its request (vLLM: the
                                          token position, an RNG offset intrinsic to the request)
    temperature [B] 1 (sampled) or 0 (greedy);  seed [B]: a 32-bit hash of request b's own coins

Coins. vLLM draws the acceptance coin in the kernel, `u = tl_rand32(seed, pos, includes_zero=False)`
(Philox, u in (0, 1]). The adapter replaces the module's `tl_rand32` by a lookup: (seed, pos) --
or, in block verification, (seed ^ step << 32, pos) -- names the request and draft position, and
u = that position's injected coin, in float32 rounded down (the coin 0.0,
outside vLLM's domain, becomes the smallest positive float32). Recovered and bonus tokens come from
vLLM's own Gumbel race seeded by `seed` (not injectable): their law is checked, not their ids.
One substitution: the residual's `tldevice.log1p` (libdevice, which the interpreter does not provide)
is numpy's log1p on the same float32 values. Hence
under shared coins the accepted prefix is the reference's except at the coins' endpoints (vLLM's block
test is `u <= h`, the reference's `coin < h`; the standard test is `log p > log u + log q`).
"""

from __future__ import annotations

import hashlib

import numpy as np

from specverify import installed
from specverify.reference.batch import PAD

MODULE = "vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils"
TINY = np.float32(2.0**-149)


def seed_of(coins) -> int:
    """A request's seed, from its own coins only (so its Gumbel noise does not depend on the batch)."""
    data = np.ascontiguousarray(coins, np.float64).tobytes()
    return int.from_bytes(hashlib.blake2b(data, digest_size=4).digest(), "little")


class VllmV2Sampler:
    def __init__(self, block: bool = False):
        installed.interpreted()
        self.mod = installed.load("vllm", MODULE)
        import torch
        import triton.language as tl
        self.torch, self.tl = torch, tl
        torch.set_num_threads(1)          # tiny tensors: intra-op threads only contend
        self.block = block
        self.name = "vllm-block" if block else "vllm-v2"
        self.capabilities = {"block"} if block else {"chain", "greedy"}
        self.row_dtype = "float32"          # vLLM samples from float32 rows: the greedy check's near ties
                                            # are then spaced in float32 ulps
        self.version = installed.engine_version("vllm")
        self._u = None

    def _log1p(self, x):
        """libdevice log1p, which the Triton interpreter lacks: numpy's log1p on the same float32 data."""
        from triton.runtime.interpreter import TensorHandle
        data = np.log1p(x.handle.data).astype(x.handle.data.dtype)
        return self.tl.tensor(TensorHandle(data, x.handle.dtype), x.type)

    def _rand32(self, seed, offset, includes_zero=False):
        """Replaces tl_rand32 inside the interpreted kernel: the coin of the draft named by (seed, pos)."""
        tl = self.tl
        key = (int(np.asarray(seed.handle.data).reshape(-1)[0]), int(np.asarray(offset.handle.data).reshape(-1)[0]))
        return tl.full((), float(self._u[key]), tl.float32)

    def _run(self, batch, coins):
        torch = self.torch
        b, vocab, k = batch.batch_size, batch.vocab_size, batch.max_spec_len
        n_rows = batch.target_probs.shape[0]
        start = batch.target_row_start
        with np.errstate(divide="ignore"):
            target_logits = np.log(batch.target_probs)
        # greedy requests only take the argmax: their rows carry p itself (float64 ties and near ties kept)
        greedy_row = np.repeat(batch.greedy, batch.num_draft_tokens + 1)
        target_logits[greedy_row] = batch.target_probs[greedy_row]
        draft_sampled = np.zeros(n_rows, np.int64)
        drafts_np = batch.draft_token_ids
        seeds = np.zeros(b, np.int64)
        self._u = {}
        draft_start = batch.draft_start
        for r in range(b):
            kb, d0 = int(batch.num_draft_tokens[r]), int(draft_start[r])
            draft_sampled[start[r] + 1:start[r] + 1 + kb] = drafts_np[d0:d0 + kb]
            c = np.asarray(coins.accept[d0:d0 + kb], np.float64)
            seeds[r] = seed_of(np.concatenate([[coins.final[r]], c]))
            c32 = np.maximum(installed.coins32(c), TINY)
            for j in range(kb):             # the kernel asks for (seed, pos) or (seed ^ j << 32, pos)
                self._u[(int(seeds[r]), j)] = c32[j]
                self._u[(int(seeds[r]) ^ (j << 32), j)] = c32[j]
        draft = None
        if batch.draft_probs is not None:
            dl = np.full((b, max(k, 1), vocab), -np.inf, np.float32)
            for r in range(b):
                kb, d0 = int(batch.num_draft_tokens[r]), int(draft_start[r])
                with np.errstate(divide="ignore"):
                    dl[r, :kb] = np.log(batch.draft_probs[d0:d0 + kb])
            draft = torch.from_numpy(dl)
        cu = np.concatenate([[0], np.cumsum(batch.num_draft_tokens + 1)]).astype(np.int32)
        owner = np.repeat(np.arange(b), batch.num_draft_tokens + 1)
        local = np.concatenate([np.arange(kb + 1) for kb in batch.num_draft_tokens])
        real, real_dev = self.mod.tl_rand32, self.mod.tldevice
        self.mod.tl_rand32 = self._rand32
        self.mod.tldevice = type("LibdeviceShim", (), {"log1p": staticmethod(self._log1p)})
        try:
            with np.errstate(invalid="ignore", divide="ignore"):     # -inf - -inf in masked lanes, as on GPU
                sampled, num = self.mod.rejection_sample(
                    torch.from_numpy(target_logits), draft, torch.from_numpy(draft_sampled), torch.from_numpy(cu),
                    torch.from_numpy(local.astype(np.int64)), torch.arange(b, dtype=torch.int32),
                    torch.from_numpy(owner.astype(np.int32)), torch.from_numpy(local.astype(np.int32)),
                    torch.from_numpy(np.where(batch.greedy, 0.0, 1.0).astype(np.float32)),
                    torch.from_numpy(seeds), max(k, 1),
                    use_block_verification=self.block)
        finally:
            self.mod.tl_rand32, self.mod.tldevice = real, real_dev
        sampled, num = sampled.numpy(), num.numpy()
        out = np.full((b, k + 1), PAD, np.int64)
        for r in range(b):
            out[r, :num[r]] = sampled[r, :num[r]]
        return out

    def verify(self, batch, coins):
        return self._run(batch, coins)

    def verify_block(self, batch, coins):
        return self._run(batch, coins)


def standard():
    return VllmV2Sampler(block=False)


def block():
    return VllmV2Sampler(block=True)
