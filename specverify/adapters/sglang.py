"""SGLang's Triton verify kernels, on CPU: the chain sampler (classic and block verification) and the
greedy tree verify. `tree_speculative_sampling_target_only` (SGLang's default sampling path) is a
CUDA kernel in the compiled sgl_kernel wheel and cannot be audited on CPU.

What runs is SGLang's own code from the installed package, under TRITON_INTERPRET=1:

    sglang-chain   sglang/kernels/ops/speculative/reject_sampling.py::chain_speculative_sampling_triton
    sglang-block   the same with block_verification=True (Sun et al. 2403.10444)
    sglang-tree-greedy  sglang/kernels/ops/speculative/spec_tree.py::verify_tree_greedy_triton

Layout translation for the chain kernel (one launch per distinct draft count kappa in the batch;
SGLang's chain layout has a fixed number of slots per launch):

    candidates       int64 [B, kappa + 1]     slot 0 is the last verified token (any id), then drafts
    retrive_index    int64 [B, kappa + 1]     b * (kappa + 1) + j: where slot j's output goes in predicts
    uniform_samples  float32 [B, kappa]       the accept coins (SGLang's coins are float32)
    uniform_samples_for_final_sampling float32 [B]   the final coin (recovered or bonus token)
    target_probs     float32 [B, kappa + 1, V]
    draft_probs      float32 [B, kappa, V]    one-hot rows for a deterministic draft (SGLang's n-gram
                                              convention: q = delta_x)
    output: predicts[accept_index[b, 0..accept_token_num[b]]] are the emitted tokens in order.

Coins: float64 coins are rounded *down* to float32 so that [0, 1) stays [0, 1) (round-to-nearest
would turn coins >= 1 - 2**-25 into 1.0); values exactly representable in float32 (0.0, 1 - 2**-24,
1.0) pass unchanged. Under shared coins the emitted tokens equal the reference's except where the
float32 coin or float32 probabilities move a comparison (measure-zero for random coins; documented).
Padded drafts (-1, "never accepted"): SGLang's chain layout has no such id, so a request is cut at
its first -1 -- the kernel sees the drafts before it, and the padded position's target row becomes
that launch's last row, from which the final coin draws (a draw from p, the exact rule's answer).
"""

from __future__ import annotations

import numpy as np

from specverify import installed
from specverify.errors import AdapterError
from specverify.installed import coins32
from specverify.reference.sampling import argmax_lowest

CHAIN = "sglang.kernels.ops.speculative.reject_sampling"
TREE = "sglang.kernels.ops.speculative.spec_tree"


def unpadded_counts(batch) -> np.ndarray:
    """Per request, the number of drafts before its first padded (-1) draft."""
    kept = batch.num_draft_tokens.copy()
    for b in np.flatnonzero([(batch.request(b)[0] < 0).any() for b in range(batch.batch_size)]):
        kept[b] = int(np.flatnonzero(batch.request(b)[0] < 0)[0])
    return kept


class SglangChain:
    capabilities = {"chain"}

    def __init__(self, block: bool = False):
        installed.interpreted()
        self.mod = installed.load("sglang", CHAIN)
        import torch
        self.torch = torch
        torch.set_num_threads(1)          # tiny tensors: intra-op threads only contend
        self.block = block
        self.name = "sglang-block" if block else "sglang"
        self.capabilities = {"block"} if block else {"chain"}
        self.version = installed.engine_version("sglang")
        self.threshold_single, self.threshold_acc = 1.0, 1.0   # SGLang's defaults (exact)

    def _launch(self, drafts, target, draft, accept, final):
        """One kernel launch; drafts [B, k], target [B, k+1, V], draft [B, k, V]. Returns [B, k+1] -1 padded."""
        torch = self.torch
        b, k = drafts.shape
        slots = k + 1
        cand = np.zeros((b, slots), np.int64)
        cand[:, 1:] = drafts
        retrive = np.arange(b * slots, dtype=np.int64).reshape(b, slots)
        predicts = torch.full((b * slots,), -1, dtype=torch.int32)
        accept_index = torch.full((b, slots), -1, dtype=torch.int32)
        accept_num = torch.zeros(b, dtype=torch.int32)
        if k == 0:
            draft = np.zeros((b, 1, target.shape[-1]))
        self.mod.chain_speculative_sampling_triton(
            predicts, accept_index, accept_num, torch.from_numpy(cand), torch.from_numpy(retrive),
            torch.full((b, slots), -1, dtype=torch.int64), torch.full((b, slots), -1, dtype=torch.int64),
            torch.from_numpy(coins32(accept).reshape(b, max(k, 1)) if k else np.zeros((b, 1), np.float32)),
            torch.from_numpy(coins32(final)),
            torch.from_numpy(np.ascontiguousarray(target, np.float32)),
            torch.from_numpy(np.ascontiguousarray(draft, np.float32)),
            self.threshold_single, self.threshold_acc, True, block_verification=self.block)
        pred, idx, num = predicts.numpy(), accept_index.numpy(), accept_num.numpy()
        out = np.full((b, slots), -1, np.int64)
        for r in range(b):
            out[r, :num[r] + 1] = pred[idx[r, :num[r] + 1]]
        return out

    def _verify(self, batch, coins):
        out = np.full((batch.batch_size, batch.max_spec_len + 1), -1, np.int64)
        vocab = batch.vocab_size
        kept = unpadded_counts(batch)
        for k in np.unique(kept):
            rows = np.flatnonzero(kept == k)
            d0 = batch.draft_start[rows][:, None] + np.arange(k)
            t0 = batch.target_row_start[rows][:, None] + np.arange(k + 1)
            drafts = batch.draft_token_ids[d0]
            if batch.draft_probs is None:
                draft = np.zeros((rows.size, k, vocab))
                np.put_along_axis(draft, drafts[..., None], 1.0, axis=2)
            else:
                draft = batch.draft_probs[d0]
            out[rows, :k + 1] = self._launch(drafts, batch.target_probs[t0], draft, coins.accept[d0], coins.final[rows])
        return out

    def verify(self, batch, coins):
        """Greedy requests go where SGLang sends them (eagle_sample: an all-greedy batch takes
        verify_tree_greedy): to the greedy tree kernel, posed as one-child-per-node trees."""
        if not batch.greedy.any():
            return self._verify(batch, coins)
        from specverify.reference.batch import VerifyBatch
        out = np.full((batch.batch_size, batch.max_spec_len + 1), -1, np.int64)
        for flag in (False, True):
            idx = np.flatnonzero(batch.greedy == flag)
            if not idx.size:
                continue
            sub = VerifyBatch.from_requests([batch.request(int(b)) for b in idx])
            starts = batch.draft_start[idx]
            acc = np.concatenate([coins.accept[s:s + k] for s, k in zip(starts, batch.num_draft_tokens[idx])] + [np.zeros(0)])
            part = type(coins)(acc, coins.final[idx])
            if flag:
                self._greedy = getattr(self, "_greedy", None) or SglangTreeGreedy()
                res = self._greedy.verify(sub, part)
            else:
                res = self._verify(sub, part)
            out[idx, :res.shape[1]] = res
        return out

    def verify_block(self, batch, coins):
        return self._verify(batch, coins)


class SglangTreeGreedy:
    """verify_tree_greedy_triton. `verify` poses each request's chain as a one-child-per-node tree
    (greedy requests only); `verify_tree_greedy(tokens, parents, target_predict)` takes real trees."""

    name = "sglang-tree-greedy"
    capabilities = {"greedy"}

    def __init__(self):
        installed.interpreted()
        self.mod = installed.load("sglang", TREE)
        import torch
        self.torch = torch
        torch.set_num_threads(1)          # tiny tensors: intra-op threads only contend
        self.version = installed.engine_version("sglang")

    def verify_trees(self, tokens, parents, target_predict, depth: int):
        """B trees of N nodes each (node 0 the root): tokens [B, N], parents [B, N] (-1 for the root,
        parents precede children, siblings in index order), target_predict [B, N] (the target's argmax
        at each node). Returns the emitted tokens [B, depth + 1], -1 padded."""
        torch = self.torch
        tokens, parents = np.asarray(tokens, np.int64), np.asarray(parents, np.int64)
        b, n = tokens.shape
        next_token = np.full((b, n), -1, np.int64)
        next_sibling = np.full((b, n), -1, np.int64)
        for r in range(b):
            last_child = {}
            for j in range(1, n):
                par = parents[r, j]
                if par in last_child:
                    next_sibling[r, last_child[par]] = j
                else:
                    next_token[r, par] = j
                last_child[par] = j
        slots = depth + 1
        predicts = torch.full((b * n,), -1, dtype=torch.int32)
        accept_index = torch.full((b, slots), -1, dtype=torch.int32)
        accept_num = torch.zeros(b, dtype=torch.int32)
        self.mod.verify_tree_greedy_triton(
            predicts, accept_index, accept_num, torch.from_numpy(tokens),
            torch.from_numpy(np.arange(b * n, dtype=np.int64).reshape(b, n)), torch.from_numpy(next_token),
            torch.from_numpy(next_sibling), torch.from_numpy(np.asarray(target_predict, np.int64)))
        pred, idx, num = predicts.numpy(), accept_index.numpy(), accept_num.numpy()
        out = np.full((b, slots), -1, np.int64)
        for r in range(b):
            out[r, :num[r] + 1] = pred[idx[r, :num[r] + 1]]
        return out

    def verify(self, batch, coins):
        if not batch.greedy.all():
            raise AdapterError("sglang-tree-greedy verifies greedy requests only")
        out = np.full((batch.batch_size, batch.max_spec_len + 1), -1, np.int64)
        kept = unpadded_counts(batch)
        for k in np.unique(kept):
            rows = np.flatnonzero(kept == k)
            d0 = batch.draft_start[rows][:, None] + np.arange(k)
            t0 = batch.target_row_start[rows][:, None] + np.arange(k + 1)
            tokens = np.zeros((rows.size, k + 1), np.int64)
            tokens[:, 1:] = batch.draft_token_ids[d0]
            parents = np.broadcast_to(np.arange(-1, k), (rows.size, k + 1))
            target_predict = np.array([[argmax_lowest(batch.target_probs[t]) for t in row] for row in t0], np.int64)
            out[rows, :k + 1] = self.verify_trees(tokens, parents, target_predict, depth=int(k))
        return out


def chain():
    return SglangChain(block=False)


def block():
    return SglangChain(block=True)


def tree_greedy():
    return SglangTreeGreedy()
