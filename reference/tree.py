"""Tree verification: recursive rejection sampling over sibling candidates (SpecInfer; the rule
SGLang's default tree sampler implements for deterministic drafts).

A draft tree of N nodes: `tokens[k]` is node k's token, `parents[k]` its parent (-1 = the root, the
last committed position), with parents[k] < k. Siblings are tried in increasing node index.
Rows: target_probs[0] is the target's distribution at the root, target_probs[k + 1] its distribution
after node k's path. draft_probs, if given, has the same row layout: draft_probs[r] is the
distribution the children of row r's node were drafted from (i.i.d.); None means deterministic
drafts, q one-hot at each sibling's token. Coins: one per node (that sibling's acceptance coin),
and one final coin.

    node = root; r = P[node]
    loop:
        for each child c of node, in order:
            q = Q[node] (or one-hot at tokens[c])
            if coins[c] * q[tokens[c]] < r[tokens[c]]:       # accept: descend
                emit tokens[c]; node = c; r = P[node]; next loop
            w = max(r - q, 0); Z = sum(w) (sequential)       # remove the refused mass
            r = w / Z   (r unchanged if Z == 0)
        if node had no children: emit draw(P[node], final_coin)   # bonus at a leaf
        else:                    emit draw(r, final_coin)         # residual after all siblings
        stop
The token emitted at every depth is distributed exactly as the target's row for the path taken.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specverify.errors import InputError

from . import validate
from .sampling import draw


@dataclass(frozen=True)
class DraftTree:
    tokens: np.ndarray
    parents: np.ndarray

    def __post_init__(self):
        tokens = np.asarray(self.tokens, np.int64).reshape(-1)
        parents = np.asarray(self.parents, np.int64).reshape(-1)
        if tokens.size != parents.size:
            raise InputError(f"draft tree: {tokens.size} tokens but {parents.size} parents")
        bad = (parents < -1) | (parents >= np.arange(parents.size))
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise InputError(f"draft tree: node {k} has parent {parents[k]}; parents must precede their children")
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "parents", parents)

    @property
    def size(self) -> int:
        return int(self.tokens.size)

    def children(self, node: int) -> np.ndarray:
        """Node ids whose parent is `node` (-1 = root), in sibling order."""
        return np.flatnonzero(self.parents == node)


def tree_rule(tree: DraftTree, target: np.ndarray, draft, coins, final: float):
    """Recursive rejection over the tree; returns (emitted token ids, accepted node ids)."""
    node, row = -1, 0
    emitted, path = [], []
    while True:
        r = target[row]
        kids = tree.children(node)
        accepted = False
        for c in kids:
            x = int(tree.tokens[c])
            if draft is None:
                q = np.zeros_like(r)
                q[x] = 1.0
            else:
                q = draft[row]
                if not q[x] > 0:
                    raise InputError(f"draft tree: node {c} drafted token {x} whose draft probability is 0")
            if coins[c] * q[x] < r[x]:
                emitted.append(x)
                path.append(int(c))
                node, row = int(c), int(c) + 1
                accepted = True
                break
            w = np.maximum(r - q, 0.0)
            z = np.cumsum(w)[-1]
            if z > 0:
                r = w / z
        if accepted:
            continue
        emitted.append(draw(target[row] if kids.size == 0 else r, final))
        return np.array(emitted, np.int64), np.array(path, np.int64)


def validated(tree: DraftTree, target_probs, draft_probs=None, coins=None, final_coin=None):
    """Check one tree-verify call's arguments; return (target [N+1, V], draft or None, coins [N], final)."""
    if not isinstance(tree, DraftTree):
        raise InputError(f"tree verify: expected a DraftTree, got {type(tree).__name__}")
    n = tree.size
    target = validate.prob_rows(target_probs, "target_probs", n_rows=n + 1)
    vocab = target.shape[1]
    validate.token_ids(tree.tokens, "draft tree tokens", vocab)
    draft = None
    if draft_probs is not None:
        draft = validate.prob_rows(draft_probs, "draft_probs", vocab_size=vocab, n_rows=n + 1)
        rows = np.where(tree.parents < 0, 0, tree.parents + 1)
        zero = draft[rows, tree.tokens] <= 0
        if zero.any():
            c = int(np.flatnonzero(zero)[0])
            raise InputError(f"draft tree: node {c} drafted token {tree.tokens[c]} whose draft probability is 0")
    if coins is None or final_coin is None:
        raise InputError("tree verify needs one coin per node and a final coin")
    c = validate.coins(coins, "tree coins", n)
    f = float(validate.coins([final_coin], "final_coin", 1)[0])
    return target, draft, c, f


def tree_verify(tree: DraftTree, target_probs, draft_probs=None, coins=None, final_coin=None):
    """Validated entry point: returns (emitted token ids, accepted node ids)."""
    return tree_rule(tree, *validated(tree, target_probs, draft_probs, coins, final_coin))
