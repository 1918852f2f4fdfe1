"""transformers' assisted generation end to end (a black box): `model.generate(..., assistant_model=...,
do_sample=True)` on tiny seeded Llama models, whose exact joint law the harness computes in float64.

    target, assistant   `LlamaForCausalLM` built from a seeded config (vocab V, one layer, hidden 16,
                        initializer_range 1.0 so that the next-token distributions are far from
                        uniform); no weights are downloaded
    exact law           run the target itself in float64 over every continuation of the prompt:
                        P(x_1..x_L) = prod_i softmax(logits(prompt, x_<i) / T)[x_i] (top-k/top-p off),
                        V**L sequences
    samples             n runs of `generate(prompt, max_new_tokens=L, min_new_tokens=L,
                        num_assistant_tokens=kappa, do_sample=True, temperature=T)`, run i seeded
                        with torch.manual_seed(seed + i)
    acceptance          counted by observing transformers' own `_speculative_sampling` (its
                        arguments and return value are recorded, nothing is changed): drafted =
                        sum of candidate lengths, accepted = sum of n_matches

With the target as its own assistant (`identity=True`, a deep copy of the target) q = p at every
position, so an exact verifier with identical transforms accepts every draft.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field

import numpy as np

from specverify import installed
from specverify.models.tiny import seeded_llama


@dataclass
class Runs:
    tokens: np.ndarray                  # int64 [n, L]
    drafted: int = 0
    accepted: int = 0
    calls: list = field(default_factory=list)   # per verify call: (candidate_length, n_matches)


def tiny_llama(seed: int, vocab: int = 6, hidden: int = 16, layers: int = 1, init: float = 1.0):
    """A seeded LlamaForCausalLM over `vocab` tokens (CPU, float32, eager attention)."""
    installed.load("transformers", "transformers")
    import torch
    torch.set_num_threads(1)        # tiny matrices: intra-op threads only contend
    model = seeded_llama(seed, vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=64, initializer_range=init, bos_token_id=None, eos_token_id=None,
                         pad_token_id=0, tie_word_embeddings=False, attn_implementation="eager")
    model.generation_config.pad_token_id = 0
    model.generation_config.eos_token_id = None
    model.generation_config.bos_token_id = None
    return model


def exact_law(model, prompt, length: int, temperature: float = 1.0) -> tuple[list, np.ndarray]:
    """(sequences, probabilities) of the first `length` tokens after `prompt`: the target's own
    autoregressive law at `temperature`, computed in float64."""
    import torch
    m64 = copy.deepcopy(model).double()
    vocab = model.config.vocab_size
    seqs = list(itertools.product(range(vocab), repeat=length))
    probs = np.ones(len(seqs))
    with torch.no_grad():
        for i in range(length):
            prefixes = sorted({s[:i] for s in seqs})
            ids = torch.tensor([list(prompt) + list(p) for p in prefixes])
            logits = m64(ids).logits[:, -1, :] / temperature
            rows = dict(zip(prefixes, torch.softmax(logits, dim=-1).numpy()))
            probs *= np.array([rows[s[:i]][s[i]] for s in seqs])
    return seqs, probs


def generate(target, assistant, prompt, length: int, kappa: int, temperature: float, n: int, seed: int,
             top_k=None) -> Runs:
    """n assisted-generation runs of `length` new tokens; counts drafts and acceptances."""
    import torch
    utils = installed.load("transformers", "transformers.generation.utils")
    real = utils._speculative_sampling
    runs = Runs(tokens=np.empty((n, length), np.int64))

    def observed(candidate_input_ids, candidate_logits, candidate_length, new_logits, *a, **k):
        tokens, n_matches = real(candidate_input_ids, candidate_logits, candidate_length, new_logits, *a, **k)
        runs.calls.append((int(candidate_length), int(n_matches)))
        return tokens, n_matches

    utils._speculative_sampling = observed
    try:
        ids = torch.tensor([list(prompt)])
        for i in range(n):
            torch.manual_seed(seed + i)
            out = target.generate(ids, assistant_model=assistant, do_sample=True, temperature=temperature,
                                  top_k=top_k, top_p=None, max_new_tokens=length, min_new_tokens=length,
                                  num_assistant_tokens=kappa, num_assistant_tokens_schedule="constant",
                                  attention_mask=torch.ones_like(ids))
            runs.tokens[i] = out[0, len(prompt):].numpy()
    finally:
        utils._speculative_sampling = real
    runs.drafted = sum(c for c, _ in runs.calls)
    runs.accepted = sum(m for _, m in runs.calls)
    return runs


def identity_pair(seed: int = 0, vocab: int = 6):
    """(target, assistant) with the assistant a deep copy of the target."""
    target = tiny_llama(seed, vocab)
    return target, copy.deepcopy(target)
