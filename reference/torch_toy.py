"""A toy model as a small torch causal LM, for engine-level adapters that run torch models.

`TorchToy(toy)` is a `torch.nn.Module`: forward(input_ids int64 [B, T]) -> logits float64 [B, T, V],
row t the toy model's logits after input_ids[:, :t + 1] (-inf where the probability is 0) -- what a
causal LM returns, every position scored in one call. It has no weights and no KV cache; `vocab_size`
and `toy` (the wrapped `reference.toy.ToyModel`) are attributes. An engine adapter that declares
`models = "torch"` receives its target and draft in this form (the prompt must not be empty: position
0 needs a token to condition on).
"""

from __future__ import annotations

import numpy as np


def as_torch(toy):
    import torch

    class TorchToy(torch.nn.Module):
        def __init__(self, toy):
            super().__init__()
            self.toy = toy
            self.vocab_size = int(toy.vocab_size)

        def forward(self, input_ids):
            ids = np.asarray(input_ids.detach().cpu().numpy(), np.int64)
            b, t = ids.shape
            vocab = self.vocab_size
            rank = np.zeros(b, np.int64)
            index = np.empty((b, t), np.int64)
            for j in range(t):                      # prefix index of ids[:, :j + 1] (reference.toy)
                rank = rank * vocab + ids[:, j]
                index[:, j] = (vocab ** (j + 1) - 1) // (vocab - 1) + rank
            logits = self.toy.logits_at(index.reshape(-1)).reshape(b, t, vocab)
            return torch.from_numpy(logits)

    return TorchToy(toy)
