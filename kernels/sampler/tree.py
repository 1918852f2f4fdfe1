"""Tree verify (recursive rejection over siblings, SpecInfer), Triton, float64: one program per
tree, bit for bit `reference.tree.tree_rule`.

Tree: node k has token tokens[k] and parent parents[k] (-1 = root, parents[k] < k); siblings are
tried in increasing node index. Rows: target[0] at the root, target[k+1] after node k's path; the
draft rows (if any) have the same layout, draft[r] being what row r's children were drafted from;
no draft rows means one-hot drafts. Coins: coins[k] for node k, one final coin.

    node = -1, row = 0
    repeat:
        r = target[row]                                   (copied to the scratch row R)
        for each child c of node, in index order:
            q = draft[row], or one-hot at tokens[c]
            if coins[c] * q[x] < r[x]:  emit x = tokens[c]; node = c; row = c + 1; next repeat
            w = max(r - q, 0)  (scratch row W);  z = sequential sum of w
            if z > 0:  r = w / z                          (elementwise, IEEE division)
        emit draw(r, final_coin)  (r = target[row] itself at a leaf);  stop

Sums are sequential (k = 0 .. V-1), the weights of each rejected sibling are removed from the
residual before the next sibling is tried, and draw is `draw.draw`. Outputs: the emitted
tokens (-1 padded, at most depth + 1) and the accepted node ids (-1 padded).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..triton_common import CompileSpec
from .draw import MODE_TARGET, draw

BLOCK_V = 1024


@triton.jit
def _tree_kernel(tokens_ptr, parents_ptr, target_ptr, draft_ptr, coins_ptr, final_ptr, r_ptr, w_ptr,
                 out_tokens_ptr, out_path_ptr, N, V, stride_t, stride_q, HAS_Q: tl.constexpr,
                 BLOCK_V: tl.constexpr):
    offs = tl.arange(0, BLOCK_V)
    final_coin = tl.load(final_ptr)
    node = tl.full((), -1, tl.int32)
    row = tl.full((), 0, tl.int32)
    n_emit = tl.full((), 0, tl.int32)
    done = n_emit < 0
    for _depth in range(N + 1):
        if not done:
            p_ptr = target_ptr + row.to(tl.int64) * stride_t
            q_ptr = draft_ptr + row.to(tl.int64) * stride_q
            for v0 in range(0, V, BLOCK_V):                       # r = target[row]
                m = v0 + offs < V
                tl.store(r_ptr + v0 + offs, tl.load(p_ptr + v0 + offs, mask=m), mask=m)
            accepted = done
            for c in range(N):
                if (tl.load(parents_ptr + c) == node) & (not accepted):
                    x = tl.load(tokens_ptr + c)
                    if HAS_Q:
                        qx = tl.load(q_ptr + x)
                    else:
                        qx = tl.full((), 1.0, tl.float64)
                    if tl.load(coins_ptr + c) * qx < tl.load(r_ptr + x):
                        c_t = tl.full((), 0, tl.int32) + c          # a tensor, also in the interpreter
                        tl.store(out_tokens_ptr + n_emit, x.to(tl.int64))
                        tl.store(out_path_ptr + n_emit, c_t.to(tl.int64))
                        n_emit += 1
                        node = c_t
                        row = c_t + 1
                        accepted = n_emit > 0
                    else:
                        for v0 in range(0, V, BLOCK_V):               # w = max(r - q, 0)
                            ks = v0 + offs
                            m = ks < V
                            if HAS_Q:
                                q = tl.load(q_ptr + ks, mask=m, other=0.0)
                            else:
                                q = tl.where(ks == x, 1.0, 0.0).to(tl.float64)
                            rk = tl.load(r_ptr + ks, mask=m, other=0.0)
                            tl.store(w_ptr + ks, tl.maximum(rk - q, 0.0), mask=m)
                        z = tl.full((), 0.0, tl.float64)
                        for j in range(V):                            # sequential, like cumsum
                            z += tl.load(w_ptr + j)
                        if z > 0:
                            for v0 in range(0, V, BLOCK_V):
                                ks = v0 + offs
                                m = ks < V
                                tl.store(r_ptr + ks, tl.load(w_ptr + ks, mask=m, other=0.0) / z, mask=m)
            if not accepted:
                mode = tl.full((), MODE_TARGET, tl.int32)
                token = draw(r_ptr, r_ptr, -1, V, final_coin, mode)
                tl.store(out_tokens_ptr + n_emit, token.to(tl.int64))
                done = n_emit > 0


def tree_verify(tokens, parents, target, draft, coins, final_coin: float, out_tokens, out_path):
    """Launcher: device tensors (tokens, parents int32 [N]; target, draft float64 [N+1, V] or draft
    None; coins float64 [N]); out_tokens int64 [N+1], out_path int64 [N], both filled with -1."""
    import torch
    n, v = tokens.shape[0], target.shape[1]
    has_q = draft is not None
    q = draft if has_q else target
    r = torch.empty(v, dtype=torch.float64, device=target.device)
    w = torch.empty(v, dtype=torch.float64, device=target.device)
    final = torch.tensor([final_coin], dtype=torch.float64, device=target.device)   # a float arg would be fp32
    _tree_kernel[(1,)](tokens, parents, target, q, coins, final, r, w, out_tokens, out_path,
                       n, v, target.stride(0), q.stride(0), HAS_Q=has_q, BLOCK_V=BLOCK_V,
                       enable_fp_fusion=False)
    return out_tokens, out_path


COMPILE = (CompileSpec(
    "sampler_tree", _tree_kernel,
    {"tokens_ptr": "*i32", "parents_ptr": "*i32", "target_ptr": "*fp64", "draft_ptr": "*fp64", "coins_ptr": "*fp64",
     "final_ptr": "*fp64", "r_ptr": "*fp64", "w_ptr": "*fp64", "out_tokens_ptr": "*i64", "out_path_ptr": "*i64"},
    dict(HAS_Q=False, BLOCK_V=BLOCK_V), fp_fusion=False),)
