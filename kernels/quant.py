"""GGUF block-quantized weights (Q4_1, Q8_0) kept in their blocks: the one weight type besides a
plain fp32 tensor that every backend's `linear` accepts.

A GGUF matrix [N, K] is stored row by row, each row as K / 32 blocks of 32 consecutive weights
along K. The two block types the bundled SmolLM2 file uses (210 tensors Q4_1, the tied embedding
/ head Q8_0):

    Q4_1  20 bytes:  d (fp16) | m (fp16) | 16 bytes of nibbles
          weight i of the block, i in 0..15:  q = byte[i] & 0xF,  i in 16..31: q = byte[i-16] >> 4
          value = fl32(fl32(d * q) + m)                       d, m widened to fp32 exactly
    Q8_0  34 bytes:  d (fp16) | 32 int8 q
          value = fl32(d * q)                                 exact (11 x 8 significant bits)

Worked example (Q4_1): d = 0.5, m = -1.0, byte[0] = 0x3A -> weight 0 = 0.5*10 - 1 = 4.0 and
weight 16 = 0.5*3 - 1 = 0.5. These are exactly the fp32 values `gguf.quants.dequantize` gives
(it computes the same rounded operations in NumPy; `tests/test_kernels_quant.py` checks every
weight of the real model's tensors of both types), so a kernel that dequantizes in registers and
then sums in the fp32 kernel's order gives the fp32-dequantized path's logits bit for bit.

`QuantizedWeight` holds the blocks as the file has them ([N, K/32, block bytes] uint8) plus the
block scales widened to fp32; the kernels' own layouts are derived from it once per backend and
cached on the object (`packed(key, build)`), so the backends share one loaded model.
"""

from __future__ import annotations

import numpy as np

BLOCK = 32
"""Weights per block along K (both types)."""

Q4_1 = "Q4_1"
Q8_0 = "Q8_0"
BLOCK_BYTES = {Q4_1: 20, Q8_0: 34}
"""Bytes per block of each supported type."""
BITS_PER_WEIGHT = {t: 8 * b / BLOCK for t, b in BLOCK_BYTES.items()}


class QuantizedWeight:
    """A [N, K] weight in GGUF blocks (`kind` Q4_1 or Q8_0); see the module docstring.

    blocks  uint8 [N, K/32, BLOCK_BYTES[kind]]  the file's bytes
    d       float32 [N, K/32]                    block scales, widened from fp16 exactly
    m       float32 [N, K/32]                    Q4_1 block minimums (None for Q8_0)
    q       uint8 [N, K] (Q4_1: 0..15) or int8 [N, K] (Q8_0), unpacked, built on first use
    """

    __slots__ = ("kind", "n", "k", "blocks", "d", "m", "_packed", "__weakref__")

    def __init__(self, kind: str, blocks: np.ndarray, n: int, k: int):
        if kind not in BLOCK_BYTES:
            raise ValueError(f"unsupported block type {kind!r} (supported: {', '.join(BLOCK_BYTES)})")
        if k % BLOCK:
            raise ValueError(f"{kind} weight: K = {k} is not a multiple of {BLOCK}")
        blocks = np.ascontiguousarray(blocks, dtype=np.uint8).reshape(n, k // BLOCK, BLOCK_BYTES[kind])
        self.kind, self.n, self.k, self.blocks = kind, int(n), int(k), blocks
        self.d = blocks[:, :, 0:2].copy().view(np.float16)[:, :, 0].astype(np.float32)
        self.m = blocks[:, :, 2:4].copy().view(np.float16)[:, :, 0].astype(np.float32) if kind == Q4_1 else None
        self._packed: dict = {}

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.k)

    @property
    def nbytes(self) -> int:
        """Bytes of the blocks (what a kernel reading them streams per pass)."""
        return int(self.blocks.nbytes)

    def q(self) -> np.ndarray:
        """The unpacked quants [N, K] (cached)."""
        def build():
            if self.kind == Q8_0:
                return self.blocks[:, :, 2:].copy().view(np.int8).reshape(self.n, self.k)
            nib = self.blocks[:, :, 4:]                                          # [N, K/32, 16]
            return np.concatenate([nib & 0x0F, nib >> 4], axis=2).reshape(self.n, self.k)
        return self.packed("q", build)

    def finite(self) -> bool:
        """Whether every scale (and minimum) is finite: a quantized weight is finite iff they are."""
        ok = bool(np.isfinite(self.d).all())
        return ok and (self.m is None or bool(np.isfinite(self.m).all()))

    def dequantize(self, rows=None) -> np.ndarray:
        """fp32 values [N, K] (or of `rows` only), computed as the module docstring says."""
        q = self.q() if rows is None else self.q()[rows]
        d = self.d if rows is None else self.d[rows]
        w = q.reshape(q.shape[0], -1, BLOCK).astype(np.float32) * d[:, :, None]
        if self.m is not None:
            w = w + (self.m if rows is None else self.m[rows])[:, :, None]
        return w.reshape(q.shape[0], self.k)

    def packed(self, key, build):
        """The layout `key` of this weight, built once by `build()` and kept with the weight."""
        hit = self._packed.get(key)
        if hit is None:
            hit = self._packed[key] = build()
        return hit


def from_gguf_tensor(tensor) -> QuantizedWeight | None:
    """A gguf ReaderTensor of a supported block type as a QuantizedWeight (None for other types)."""
    from gguf import GGMLQuantizationType
    kinds = {GGMLQuantizationType.Q4_1: Q4_1, GGMLQuantizationType.Q8_0: Q8_0}
    kind = kinds.get(tensor.tensor_type)
    if kind is None or len(tensor.shape) != 2:
        return None
    k, n = (int(s) for s in tensor.shape.tolist())          # GGUF lists the fastest dimension first
    return QuantizedWeight(kind, np.asarray(tensor.data), n, k)


def concat_rows(weights: list[QuantizedWeight]) -> QuantizedWeight:
    """Stack weights of one kind and K along N (the q, k, v projections as one linear)."""
    kind, k = weights[0].kind, weights[0].k
    if any(w.kind != kind or w.k != k for w in weights):
        raise ValueError("concat_rows: weights of different kinds or K")
    return QuantizedWeight(kind, np.concatenate([w.blocks for w in weights]), sum(w.n for w in weights), k)


def embedding_rows(weight, ids):
    """Rows `ids` of an embedding table (fp32 torch tensor or QuantizedWeight) as fp32 [T, K]."""
    import torch
    if isinstance(weight, QuantizedWeight):
        return torch.from_numpy(weight.dequantize(ids.detach().cpu().numpy()))
    return weight[ids]


def dequantized(weight):
    """An fp32 torch tensor of `weight` ([N, K]); a QuantizedWeight is dequantized once and cached."""
    import torch
    if isinstance(weight, QuantizedWeight):
        return weight.packed("fp32", lambda: torch.from_numpy(weight.dequantize()))
    return weight


QMAX = 127
"""Largest |int8| an activation is rounded to (`quantize_activations`)."""


def quantize_activations(x):
    """Rows of x [M, K] (fp32 torch tensor) as 8-bit blocks of 32, each row alone: (qx int8 [M, K],
    dx fp32 [M, K/32], sx fp32 [M, K/32]), the rule `cpu_linear_q8` spells out (amax = max |x| of
    the block, dx = amax / 127, qx = x * (127 / amax) rounded to nearest, ties away from 0,
    sx = dx * sum(qx); a block with a NaN or inf gets dx = sx = NaN, qx = 0). Torch ops, for the
    Triton and default backends; the numba kernel computes the same values in its own loop."""
    import torch
    m, k = x.shape
    if k % BLOCK:
        raise ValueError(f"quantize_activations: K = {k} is not a multiple of {BLOCK}")
    xb = x.float().reshape(m, k // BLOCK, BLOCK)                           # [M, K/32, 32]
    amax = xb.abs().amax(-1)                                               # [M, K/32], exact
    finite = torch.isfinite(amax)
    qmax = torch.tensor(float(QMAX), dtype=torch.float32, device=x.device)
    dx = torch.where(finite, amax / qmax, torch.full_like(amax, float("nan")))
    inv = torch.where(finite & (amax > 0), qmax / torch.where(amax > 0, amax, qmax), torch.zeros_like(amax))
    v = xb * inv[:, :, None]
    q = torch.where(v >= 0, torch.trunc(v + 0.5), -torch.trunc(0.5 - v))
    q = torch.where(finite[:, :, None], q, torch.zeros_like(q)).to(torch.int8)
    sx = dx * q.to(torch.int32).sum(-1).to(torch.float32)
    return q.reshape(m, k), dx, sx


def linear_q8_emulated(x, weight):
    """x @ W.T with x replaced by its 8-bit blocks' values (dx * qx) when W is GGUF-quantized
    (Q4_1 or Q8_0), in torch's default fp32 matmul (NOT batch-invariant: the default backend's
    `linear_q8`)."""
    import torch
    if not isinstance(weight, QuantizedWeight):
        return x @ dequantized(weight).T
    qx, dx, _ = quantize_activations(x)
    xq = (qx.reshape(x.shape[0], -1, BLOCK).to(torch.float32) * dx[:, :, None]).reshape(x.shape)
    return xq @ dequantized(weight).T
