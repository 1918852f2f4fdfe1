"""The engine's logits processors, applied to one logits row with the prefix that row conditions on.

An implementation independent of `specverify.reference.processors` (the audit compares the two
through the laws of whole runs); the same semantics and the same order:

    1. repetition_penalty r   each distinct token of prompt + output: l / r if l > 0, else l * r
    2. frequency f, presence  over the output tokens: l[t] -= f * count(t) + pr * (count(t) > 0)
    3. logit_bias             l[t] += b
    4. bad_token_ids          l[t] = -inf
       bad_sequences          (s_1..s_k): if prompt + output ends with s_1..s_{k-1}, l[s_k] = -inf
    5. min_tokens n           while fewer than n output tokens, every stop id (EOS, stop_token_ids): -inf
       grammar                a DFA table[state][token] -> next state or -1 (start state 0), walked over
                              the output: every token its state does not allow: -inf
    then the transform (temperature, top-k, top-p: `sampler.transform_probs`), then
    6. min_p m                keep p >= m * max(p), renormalised (`min_p_filter`)

The row at draft position i of a speculative step is processed with output = the request's output
+ drafts 0..i-1 (the target's rows in `Engine.step`, the draft's rows in `DraftModelProposer`), so
speculative decoding samples the same law as plain decoding with the same processors. Token ids of
the prompt outside the vocabulary (a toy model's sentinel) are not penalised.
"""

from __future__ import annotations

from collections import Counter

import numpy as np


def active(params) -> bool:
    """Whether any logits processor of `params` (a SamplingParams) changes a row."""
    return (params.repetition_penalty != 1.0 or params.frequency_penalty != 0.0 or params.presence_penalty != 0.0
            or bool(params.logit_bias) or bool(params.bad_token_ids) or params.min_tokens > 0
            or bool(params.bad_sequences) or params.grammar is not None)


def process_row(logits, prompt, output, params, stop_ids) -> np.ndarray:
    """Stages 1-5 on one float64 row [V]; `stop_ids` the ids min_tokens masks."""
    row = np.array(logits, dtype=np.float64, copy=True).reshape(-1)
    vocab = row.shape[0]
    counts = Counter(int(t) for t in output)
    r = params.repetition_penalty
    if r != 1.0:
        for t in set(int(x) for x in prompt) | set(counts):
            if 0 <= t < vocab:
                row[t] = row[t] / r if row[t] > 0 else row[t] * r
    f, pr = params.frequency_penalty, params.presence_penalty
    if f or pr:
        for t, c in counts.items():
            row[t] -= f * c + pr
    for t, b in params.logit_bias:
        row[int(t)] += float(b)
    for t in params.bad_token_ids:
        row[int(t)] = -np.inf
    context = [int(t) for t in prompt] + [int(t) for t in output]
    for seq in params.bad_sequences:
        head = [int(t) for t in seq[:-1]]
        if len(context) >= len(head) and context[len(context) - len(head):] == head:
            row[int(seq[-1])] = -np.inf
    if len(output) < params.min_tokens:
        for t in stop_ids:
            if 0 <= t < vocab:
                row[t] = -np.inf
    if params.grammar is not None:
        state = 0
        for t in output:
            state = params.grammar[state][int(t)] if state >= 0 else -1
        allowed = np.array([state >= 0 and params.grammar[state][t] >= 0 for t in range(vocab)])
        row[~allowed] = -np.inf
    return row


def process_rows(rows, prompt, output, drafts, params, stop_ids) -> np.ndarray:
    """Rows [k + 1, V] of one verify step: row i processed with output + drafts[:i]."""
    rows = np.asarray(rows, dtype=np.float64)
    out = np.empty_like(rows)
    for i in range(rows.shape[0]):
        out[i] = process_row(rows[i], prompt, list(output) + list(drafts[:i]), params, stop_ids)
    return out


def min_p_filter(p: np.ndarray, min_p: float) -> np.ndarray:
    """Keep p >= min_p * max(p) per row of p [R, V], renormalised by a sequential sum."""
    if not min_p:
        return p
    kept = np.where(p >= min_p * p.max(axis=1, keepdims=True), p, 0.0)
    return kept / np.cumsum(kept, axis=1)[:, -1:]
