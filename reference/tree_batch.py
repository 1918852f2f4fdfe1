"""A batch of draft trees of one shape: the layout of `verify_trees` (batched tree verification).

SGLang verifies a tree of `num_draft_tokens` nodes per request with the same tree shape for every
request of a batch (topk and num_steps are server settings); this layout does the same, so that a
whole batch is one call and the arrays are dense:

    parents       int64   [N]            the shared tree shape: parents[k] < k, -1 = the root (the
                                          last committed position); siblings are tried in node order
    tokens        int64   [B, N]         request b's token at node k
    target_probs  float64 [B, N + 1, V]  row 0: the target at the root; row k + 1: after node k's path
    draft_probs   float64 [B, N + 1, V]  or None. Row r: the distribution the children of row r's node
                                          were drafted from (i.i.d.); None = deterministic drafts (q
                                          one-hot at each sibling's token)
    coins         TreeCoins: accept [B, N] (node k's acceptance coin), final [B]

Worked example, branching (2, 1): N = 4 nodes, parents = [-1, -1, 0, 1] (nodes 0 and 1 are the
root's children, node 2 is node 0's child, node 3 node 1's). Request b with tokens [5, 2, 7, 7]
first tries 5 against target row 0; if accepted it tries 7 (node 2) against row 1 (after "5"); if 5 is
refused, the refused mass is removed from row 0 and 2 (node 1) is tried against the remainder, and
so on (`specverify.reference.tree` states the rule). The output is int64 [B, depth + 1] (here
depth = 2), each row the emitted tokens left-aligned, -1 padded: the accepted path, then one token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specverify.errors import InputError

from . import validate
from .tree import DraftTree


def shape_of(branching) -> np.ndarray:
    """`parents` of a tree with branching[d] children per node at depth d (breadth-first order)."""
    parents, frontier = [], [-1]
    for k in branching:
        nxt = []
        for parent in frontier:
            for _ in range(int(k)):
                parents.append(parent)
                nxt.append(len(parents) - 1)
        frontier = nxt
    return np.array(parents, np.int64)


@dataclass(frozen=True)
class TreeBatch:
    parents: np.ndarray
    tokens: np.ndarray
    target_probs: np.ndarray
    draft_probs: np.ndarray | None = None

    def __post_init__(self):
        parents = np.asarray(self.parents, np.int64).reshape(-1)
        DraftTree(np.zeros(parents.size, np.int64), parents)      # validates the shape
        tokens = np.asarray(self.tokens)
        if tokens.ndim != 2 or tokens.shape[1] != parents.size:
            raise InputError(f"tree tokens: expected [B, {parents.size}], got shape {tokens.shape}")
        target = np.asarray(self.target_probs, np.float64)
        if target.ndim != 3 or target.shape[:2] != (tokens.shape[0], parents.size + 1):
            raise InputError(f"tree target_probs: expected [{tokens.shape[0]}, {parents.size + 1}, V], got {target.shape}")
        vocab = target.shape[2]
        validate.prob_rows(target.reshape(-1, vocab), "tree target_probs")
        tokens = validate.token_ids(tokens, "tree tokens", vocab)
        draft = None
        if self.draft_probs is not None:
            draft = np.asarray(self.draft_probs, np.float64)
            if draft.shape != target.shape:
                raise InputError(f"tree draft_probs: expected shape {target.shape}, got {draft.shape}")
            validate.prob_rows(draft.reshape(-1, vocab), "tree draft_probs")
            rows = np.where(parents < 0, 0, parents + 1)               # the row each node was drafted from
            qx = np.take_along_axis(draft[:, rows, :], tokens[:, :, None], axis=2)[:, :, 0]
            if (qx <= 0).any():
                b, k = np.argwhere(qx <= 0)[0]
                raise InputError(f"tree tokens: request {b} node {k} drafted token {tokens[b, k]} of draft probability 0")
            draft = np.ascontiguousarray(draft)
        object.__setattr__(self, "parents", parents)
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "target_probs", np.ascontiguousarray(target))
        object.__setattr__(self, "draft_probs", draft)

    @property
    def batch_size(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def num_nodes(self) -> int:
        return int(self.parents.size)

    @property
    def vocab_size(self) -> int:
        return int(self.target_probs.shape[2])

    @property
    def depth(self) -> int:
        d = np.zeros(self.num_nodes + 1, np.int64)            # d[k + 1]: depth of node k
        for k, parent in enumerate(self.parents):
            d[k + 1] = d[parent + 1] + 1
        return int(d.max()) if self.num_nodes else 0

    def children(self, node: int) -> np.ndarray:
        return np.flatnonzero(self.parents == node)

    def request(self, b: int):
        """(DraftTree, target rows [N+1, V], draft rows or None) of request b: the arguments of the
        one-request form `verify_tree(tree, target_probs, draft_probs, coins, final_coin)`."""
        draft = None if self.draft_probs is None else self.draft_probs[b]
        return DraftTree(self.tokens[b], self.parents), self.target_probs[b], draft


@dataclass(frozen=True)
class TreeCoins:
    """Injected randomness for a TreeBatch: accept [B, N] (one per node), final [B]."""

    accept: np.ndarray
    final: np.ndarray

    @classmethod
    def random(cls, batch: TreeBatch, rng: np.random.Generator) -> "TreeCoins":
        return cls(rng.random((batch.batch_size, batch.num_nodes)), rng.random(batch.batch_size))
