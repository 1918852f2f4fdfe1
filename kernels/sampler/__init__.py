"""The sampler kernels as an engine: the same contracts as the float64 reference, on Triton.

    verify(batch: VerifyBatch, coins: Coins | None = None) -> np.ndarray int64 [B, max_spec_len + 1]
        = `reference.chain.verify_batch(batch, coins)` token for token (greedy requests by the
        greedy rule, the others by the chain rule; rows -1 padded)
    tree_verify(tree: DraftTree, target_probs, draft_probs=None, coins=None, final_coin=None)
        -> (emitted token ids, accepted node ids)  = `reference.tree.tree_verify(...)`

The kernels (one a module of this package, launcher beside it): `greedy` (greedy verify), `recovered`
(the residual draw of every draft position), `bonus` (the bonus draw), `chain` (the acceptance walk
that picks among them), `tree`; `draw` holds the shared device functions (weights, sequential inverse-CDF draw, argmax). Everything is float64 with sequential
sums in token order, so given the same rows and coins the tokens equal the reference's exactly,
endpoint coins (0.0, 5e-324, 1 - 2^-53, 1 - 2^-24, 1.0) included.

Ragged layout (`reference.batch`; worked example there): request b's kappa_b drafts are
draft_token_ids[draft_start[b] : draft_start[b] + kappa_b], its target rows
target_probs[row_start[b] : row_start[b] + kappa_b + 1] (row_start[b] = draft_start[b] + b), its
acceptance coins aligned with its drafts, its final coin final[b]. A greedy request uses no coin.

Inputs are validated as the reference validates them (InputError, one line). The kernels run on a
CUDA GPU when there is one, otherwise under TRITON_INTERPRET=1 (set before Python starts). They are
launched with enable_fp_fusion=False: no multiply-add is contracted to an FMA on a GPU, so every
operation rounds exactly as NumPy's does.
"""

from __future__ import annotations

import numpy as np

from specverify.errors import InputError
from specverify.reference import validate
from specverify.reference.batch import Coins, VerifyBatch
from specverify.reference import tree as reference_tree
from specverify.reference.tree import DraftTree


def _device():
    from ..triton_common import require_triton
    require_triton()
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


def verify(batch: VerifyBatch, coins: Coins | None = None) -> np.ndarray:
    """Verify a ragged batch on the kernels; int64 [B, max_spec_len + 1], -1 padded."""
    import torch

    from .bonus import bonus_tokens
    from .chain import chain_verify
    from .greedy import greedy_verify
    from .recovered import recovered_tokens
    if not isinstance(batch, VerifyBatch):
        raise InputError(f"verify: expected a VerifyBatch, got {type(batch).__name__}")
    if coins is None and not batch.greedy.all():
        raise InputError("a batch with non-greedy requests needs coins")
    dev = _device()
    B = batch.batch_size
    n_total = int(batch.num_draft_tokens.sum())

    def i32(a):
        return torch.as_tensor(np.asarray(a, np.int64).astype(np.int32), device=dev)

    target = torch.as_tensor(batch.target_probs, dtype=torch.float64, device=dev)
    draft = None if batch.draft_probs is None else torch.as_tensor(batch.draft_probs, dtype=torch.float64, device=dev)
    draft_ids = i32(batch.draft_token_ids)
    num_draft = i32(batch.num_draft_tokens)
    draft_start = i32(batch.draft_start)
    row_start = i32(batch.target_row_start)
    greedy = i32(batch.greedy.astype(np.int64))
    out = torch.full((B, batch.max_spec_len + 1), -1, dtype=torch.int64, device=dev)

    if batch.greedy.any():
        greedy_verify(target, draft_ids, num_draft, draft_start, row_start, greedy, out)
    if not batch.greedy.all():
        accept = validate.coins(coins.accept, "accept coins", n_total)
        final = validate.coins(coins.final, "final coins", B)
        accept_t = torch.as_tensor(accept, dtype=torch.float64, device=dev)
        final_t = torch.as_tensor(final, dtype=torch.float64, device=dev)
        req = np.repeat(np.arange(B), batch.num_draft_tokens)
        local = np.arange(n_total) - batch.draft_start[req]
        recovered = torch.full((n_total,), -1, dtype=torch.int64, device=dev)
        bonus = torch.full((B,), -1, dtype=torch.int64, device=dev)
        recovered_tokens(target, draft, draft_ids, i32(req), i32(local), row_start, greedy, final_t, recovered)
        bonus_tokens(target, num_draft, row_start, greedy, final_t, bonus)
        chain_verify(target, draft, draft_ids, num_draft, draft_start, row_start, greedy, accept_t,
                     recovered, bonus, out)
    return out.cpu().numpy()


def tree_verify(tree: DraftTree, target_probs, draft_probs=None, coins=None, final_coin=None):
    """Recursive rejection over a draft tree on the kernel; (emitted token ids, accepted node ids)."""
    import torch

    from .tree import tree_verify as tree_kernel
    target, draft, c, f = reference_tree.validated(tree, target_probs, draft_probs, coins, final_coin)
    n = tree.size
    dev = _device()
    out_tokens = torch.full((n + 1,), -1, dtype=torch.int64, device=dev)
    out_path = torch.full((max(n, 1),), -1, dtype=torch.int64, device=dev)
    tree_kernel(
        torch.as_tensor(tree.tokens.astype(np.int32), device=dev),
        torch.as_tensor(tree.parents.astype(np.int32), device=dev),
        torch.as_tensor(target, device=dev), None if draft is None else torch.as_tensor(draft, device=dev),
        torch.as_tensor(c, device=dev), f, out_tokens, out_path)
    toks = out_tokens.cpu().numpy()
    path = out_path.cpu().numpy()
    return toks[toks >= 0].astype(np.int64), path[path >= 0].astype(np.int64)
