"""The bitwise level of the protocol: greedy decoding on a model the adapter owns (capability "bitwise").

An adapter at this level has two methods:

    bitwise_info() -> BitwiseInfo
        what it can run: its model's name and vocabulary, its proposers, the layouts and variants it
        offers and, optionally, its own prompt token ids (else the harness makes random ones).
    decode_greedy(request: GreedyRequest) -> GreedyResult
        decode every prompt greedily (argmax, lowest index on ties, no EOS stop) for exactly
        `max_new_tokens` tokens, with the speculation setting and batch layout asked for, and return
        the token ids and -- if it can -- the logits row each token was decided from.

The harness (`specverify.checks.bitwise`) runs plain decode at batch 1 as the baseline and compares
speculative runs (`greedy.bitwise`) and plain runs in other layouts (`batch.invariance`) with it,
token ids and logits bytes.

Worked example: two prompts, three new tokens each, n-gram speculation with kappa 2, both requests
in one batch, logits as digests::

    request = GreedyRequest(prompts=((5, 6, 7), (5, 9)), max_new_tokens=3,
                            spec=Spec("ngram", 2), layout=Layout(batch_size=2), logits=DIGESTS)
    result = adapter.decode_greedy(request)
    result.tokens   == ((8, 8, 3), (1, 4, 4))            # 3 ids per prompt, in prompt order
    result.digests  == ((d00, d01, d02), (d10, d11, d12))  # row_digest(row) of each decided row
    result.logits   is None                              # (or, instead of digests, float rows:
                                                         #  (array [3, V], array [3, V]))

`tokens[i][j]` is the j-th new token of prompt i; `logits[i][j]` the target row (float, any dtype,
as the engine computed it: not converted) it was chosen as the argmax of; `digests[i][j]` is
`row_digest` of that row. An adapter asked for DIGESTS may return rows instead (the harness digests
them); one that cannot expose rows returns neither, and the comparison is then on token ids only
(the row says so).

Drafters the harness drives (`BitwiseInfo.drafted`: an adapter that takes external drafts offers
them). The request then carries, per prompt, the baseline's greedy tokens (`GreedyRequest.drafts`,
max_new_tokens ids), and at every verify step the adapter's engine proposes `drafted_tokens(request,
i, n, k, V)`: the k tokens that follow the n already emitted, as the drafts --

    ORACLE        the target's own greedy tokens: every draft is accepted, so every verify step is a
                  full kappa + 1 chunk, and its rows must equal plain decode's (`verify.width`);
    ADVERSARIAL   the same with the draft at chunk position j = `Spec.wrong_at` replaced by
                  `wrong_token` ((t + 1) mod V, never the greedy token): each step accepts exactly j
                  drafts, emits the target's own token at position j and must roll back the state of
                  positions j .. k-1 exactly (`rollback[j]`).

Worked example: baseline continuation (8, 8, 3, 5, 1) of prompt 0, kappa 3. After the prefill has
emitted 8 (n = 1), the oracle proposes (8, 3, 5); the engine accepts all three and emits (8, 3, 5, 1)
from one 4-row verify chunk. The adversarial drafter with j = 1 proposes (8, 4, 5): 8 is accepted,
4 is rejected, the engine emits (8, 3) and must forget the K/V (or recurrent state) of 4 and 5; the
next step, at n = 3, proposes (5, 2) (k capped by the tokens left). An adapter may report, per prompt,
the tokens emitted at each step in `GreedyResult.info[STEPS]` (a list of lists of ints): the harness
then names the verify step and chunk position of a first difference, and checks that every step took
the width the drafter forces.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from specverify.errors import AdapterError, InputError

NO_SPEC = "none"                 # Spec.proposer for plain decode
ROWS, DIGESTS = "rows", "digests"  # GreedyRequest.logits: what to return for each decided row
LOGITS_MODES = (ROWS, DIGESTS)
SUBJECT, NEGATIVE_CONTROL = "subject", "negative-control"   # roles of BitwiseInfo.variants
ROLES = (SUBJECT, NEGATIVE_CONTROL)
BATCH, RAGGED = "batch", "ragged"   # BitwiseInfo.layouts: beyond batch 1, what the adapter can lay out
LAYOUT_KINDS = (BATCH, RAGGED)
DIGEST_BYTES = 16
ORACLE, ADVERSARIAL = "oracle", "adversarial"   # the harness-driven drafters (module docstring)
DRAFTED = (ORACLE, ADVERSARIAL)
STEPS = "emitted_per_step"        # GreedyResult.info key: per prompt, the tokens emitted at each step


def row_digest(row) -> bytes:
    """The digest of one logits row: BLAKE2b-128 of its C-contiguous bytes (dtype as computed)."""
    return hashlib.blake2b(np.ascontiguousarray(row).tobytes(), digest_size=DIGEST_BYTES).digest()


@dataclass(frozen=True)
class Spec:
    """The speculation setting: `proposer` is NO_SPEC (plain decode; kappa 0) or one of the adapter's
    `BitwiseInfo.proposers`, proposing `kappa` >= 1 drafts per step."""

    proposer: str = NO_SPEC
    kappa: int = 0
    wrong_at: int | None = None      # ADVERSARIAL only: the chunk position of the wrong draft, 0 .. kappa-1

    def __str__(self):
        if self.proposer == NO_SPEC:
            return "plain"
        at = "" if self.wrong_at is None else f"[j={self.wrong_at}]"
        return f"{self.proposer}{at},kappa={self.kappa}"


@dataclass(frozen=True)
class Layout:
    """How the requests run together. batch_size: at most this many requests in one launch (1 = one
    at a time). ragged: requests are admitted as others finish, so launches mix prefills, plain decodes
    and verifies of different lengths; where the engine supports it, request i also speculates at most
    i % (kappa + 1) drafts a step. A padded engine (one forward over a rectangular batch) supports
    only ragged=False and pads the prompts of one batch to a common length as it does in production."""

    batch_size: int = 1
    ragged: bool = False

    def __str__(self):
        return f"ragged{self.batch_size}" if self.ragged else str(self.batch_size)


@dataclass(frozen=True)
class GreedyRequest:
    prompts: tuple                   # tuple of prompts, each a tuple of token ids in [0, vocab_size)
    max_new_tokens: int              # exactly this many new tokens per prompt (no EOS stop)
    spec: Spec = Spec()
    layout: Layout = Layout()
    variant: str | None = None       # one of BitwiseInfo.variants (None: the adapter's only one)
    logits: str = DIGESTS            # ROWS or DIGESTS: what to return for each decided row
    drafts: tuple | None = None      # ORACLE / ADVERSARIAL only: per prompt, the baseline's max_new_tokens
                                     # greedy ids the drafter proposes from (`drafted_tokens`)


@dataclass
class GreedyResult:
    tokens: tuple                    # per prompt, max_new_tokens ids
    logits: tuple | None = None      # per prompt, a float array [max_new_tokens, V], or None
    digests: tuple | None = None     # per prompt, max_new_tokens row_digest values, or None
    info: dict = field(default_factory=dict)   # optional: e.g. {"mean_accepted": 2.4}


@dataclass(frozen=True)
class BitwiseInfo:
    model: str                       # the model's name, shown in every row ("SmolLM2-135M")
    vocab_size: int
    proposers: tuple = ()            # the speculation methods decode_greedy takes besides NO_SPEC
    layouts: tuple = (BATCH, RAGGED)  # which of LAYOUT_KINDS it supports beyond batch 1
    max_batch_size: int = 64
    spec_max_batch_size: int | None = None   # the largest batch it speculates in (None: max_batch_size;
                                             # 1 for an engine that speculates one request at a time)
    variants: dict = field(default_factory=lambda: {None: SUBJECT})   # name -> SUBJECT or NEGATIVE_CONTROL
    prompts: tuple = ()              # optional: its own prompts (token ids), used first
    note: str | None = None          # shown in every row (e.g. "real model not installed")
    drafted: tuple = ()              # which of DRAFTED it takes (needs external drafts in its engine)


def names_of(value, field: str, what: str, known=None) -> tuple:
    """`value` as a tuple of distinct non-empty strings (from `known` where given), or AdapterError. A
    string is not a collection of names: `("lookup")` is the string "lookup", and splitting it into
    l, o, o, k, u, p would run (or skip) other things than the adapter meant."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list, set, frozenset)):
        raise AdapterError(f"{what}: {field} must be a tuple of names, got {type(value).__name__} {value!r:.80}"
                           + (" (a missing comma? write (name,))" if isinstance(value, str) else ""))
    names = tuple(value)
    bad = [v for v in names if not isinstance(v, str) or not v]
    if bad:
        raise AdapterError(f"{what}: {field} must hold non-empty strings, got {bad[0]!r:.80}")
    dup = sorted({v for v in names if names.count(v) > 1})
    if dup:
        raise AdapterError(f"{what}: {field} lists {', '.join(map(repr, dup))} more than once")
    if known is not None:
        unknown = [v for v in names if v not in known]
        if unknown:
            raise AdapterError(f"{what}: unknown {field.rstrip('s')} kind(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return names


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_info(info, what: str) -> BitwiseInfo:
    """AdapterError unless `info` is a well-formed BitwiseInfo (unknown layouts or roles are errors:
    a gate must not pass because it ran less than the user thinks; strings where collections are
    expected are errors, not collections of letters)."""
    if not isinstance(info, BitwiseInfo):
        raise AdapterError(f"{what}: bitwise_info() must return a BitwiseInfo, got {type(info).__name__}")
    if not isinstance(info.model, str) or not info.model:
        raise AdapterError(f"{what}: model must be a non-empty string (the model's name), got {info.model!r:.80}")
    if not _is_int(info.vocab_size) or info.vocab_size < 2:
        raise AdapterError(f"{what}: vocab_size {info.vocab_size!r:.80} must be an integer >= 2")
    names_of(info.layouts, "layouts", what, LAYOUT_KINDS)
    proposers = names_of(info.proposers, "proposers", what)
    if not isinstance(info.variants, dict):
        raise AdapterError(f"{what}: variants must be a dict mapping names to {' or '.join(ROLES)}, got "
                           f"{type(info.variants).__name__} {info.variants!r:.80}")
    bad = [f"{k}={v}" for k, v in info.variants.items() if not isinstance(v, str) or v not in ROLES
           or not (k is None or isinstance(k, str))]
    if bad or not info.variants:
        raise AdapterError(f"{what}: variants must map names to {' or '.join(ROLES)}, got {info.variants!r:.200}")
    drafted = names_of(info.drafted, "drafted", what)
    bad = [d for d in drafted if d not in DRAFTED]
    if bad:
        raise AdapterError(f"{what}: unknown drafter(s) {', '.join(bad)}; known: {', '.join(DRAFTED)}")
    if NO_SPEC in proposers:
        raise AdapterError(f"{what}: proposers lists {NO_SPEC!r}: plain decode is always asked for, list only speculators")
    for key in ("max_batch_size", "spec_max_batch_size"):
        value = getattr(info, key)
        if (value is not None or key == "max_batch_size") and (not _is_int(value) or value < 1):
            raise AdapterError(f"{what}: {key} {value!r:.80} must be an integer >= 1")
    if isinstance(info.prompts, (str, bytes)) or not isinstance(info.prompts, (tuple, list)):
        raise AdapterError(f"{what}: prompts must be a tuple of prompts (each a tuple of token ids), got "
                           f"{type(info.prompts).__name__} {info.prompts!r:.80}")
    for p in info.prompts:
        if isinstance(p, (str, bytes)) or not isinstance(p, (tuple, list, np.ndarray)) or not all(_is_int(t) for t in p):
            raise AdapterError(f"{what}: a prompt of bitwise_info() must be a tuple of integer token ids, got {p!r:.80}")
        if not len(p) or min(p) < 0 or max(p) >= info.vocab_size:
            raise AdapterError(f"{what}: a prompt of bitwise_info() is empty or has ids outside [0, {info.vocab_size})")
    if info.note is not None and not isinstance(info.note, str):
        raise AdapterError(f"{what}: note must be a string or None, got {type(info.note).__name__}")
    return info


def check_request(request: GreedyRequest, info: BitwiseInfo, what: str) -> GreedyRequest:
    """InputError unless `request` asks only for what `info` (the adapter's own `bitwise_info()`)
    offers: a proposer of `info.proposers` (or plain decode) or a drafter of `info.drafted` with its
    drafts (one continuation per prompt; wrong_at in [0, kappa) for ADVERSARIAL), a variant of `info.variants`, a batch no
    larger than `info.max_batch_size` (`spec_max_batch_size` when speculating; 1 without BATCH in
    `info.layouts`), ragged only with RAGGED. The one request validation of every adapter's
    decode_greedy; `what` names the adapter in the message."""
    spec, layout = request.spec, request.layout
    if spec.proposer != NO_SPEC and spec.proposer not in info.proposers + tuple(info.drafted):
        offered = ", ".join(info.proposers + tuple(info.drafted)) or f"plain decode only ({NO_SPEC})"
        raise InputError(f"unknown proposer {spec.proposer!r}; {what} offers {offered}")
    if spec.proposer in DRAFTED and spec.proposer not in info.proposers:
        _check_drafted(request, info)
    elif request.drafts is not None or spec.wrong_at is not None:
        raise InputError(f"drafts and wrong_at go with the {' and '.join(DRAFTED)} drafters only, not {spec}")
    if request.variant not in info.variants:
        offered = ", ".join("one (None)" if v is None else str(v) for v in info.variants)
        raise InputError(f"unknown variant {request.variant!r}; {what} offers {offered}")
    plain_max = info.max_batch_size if BATCH in info.layouts else 1
    spec_max = min(plain_max, info.spec_max_batch_size or plain_max)
    limit = plain_max if spec.proposer == NO_SPEC else spec_max
    if layout.batch_size < 1 or layout.batch_size > limit or (layout.ragged and RAGGED not in info.layouts):
        if plain_max == 1:
            offered = "decodes one sequence at a time"
        else:
            offered = f"runs batches of up to {plain_max} for plain decode"
            if spec_max != plain_max:
                offered += " and one sequence at a time with speculation" if spec_max == 1 else f" and up to {spec_max} with speculation"
            offered += ", ragged too" if RAGGED in info.layouts else ", not ragged"
        raise InputError(f"layout {layout} with {spec}: {what} {offered}")
    return request


def _check_drafted(request: GreedyRequest, info: BitwiseInfo) -> None:
    """InputError unless a drafted request carries one continuation of max_new_tokens ids in [0, V) per
    prompt, kappa >= 1, and (ADVERSARIAL only) a wrong_at in [0, kappa)."""
    spec = request.spec
    if spec.kappa < 1:
        raise InputError(f"{spec}: the {spec.proposer} drafter needs kappa >= 1")
    if spec.proposer == ADVERSARIAL:
        if not isinstance(spec.wrong_at, (int, np.integer)) or not 0 <= spec.wrong_at < spec.kappa:
            raise InputError(f"{spec}: wrong_at {spec.wrong_at!r} must be an integer in [0, {spec.kappa})")
    elif spec.wrong_at is not None:
        raise InputError(f"{spec}: wrong_at goes with the {ADVERSARIAL} drafter only")
    drafts = request.drafts
    if drafts is None or len(drafts) != len(request.prompts) or any(
            len(c) != request.max_new_tokens or any(not 0 <= int(t) < info.vocab_size for t in c) for c in drafts):
        raise InputError(f"{spec}: drafts must hold, per prompt, {request.max_new_tokens} ids in [0, {info.vocab_size})")


def wrong_token(token: int, vocab_size: int) -> int:
    """The adversarial drafter's wrong guess for a position whose greedy token is `token`."""
    return (int(token) + 1) % int(vocab_size)


def drafted_tokens(request: GreedyRequest, prompt: int, n_output: int, k: int, vocab_size: int) -> list:
    """The drafts of a drafted request (`Spec.proposer` ORACLE or ADVERSARIAL) for prompt index `prompt`
    after `n_output` emitted tokens, at most k: the baseline's next tokens, the one at chunk position
    `spec.wrong_at` replaced by `wrong_token` (ADVERSARIAL). Fewer than k near the end of the run."""
    drafts = [int(t) for t in request.drafts[prompt][n_output:n_output + k]]
    j = request.spec.wrong_at
    if request.spec.proposer == ADVERSARIAL and j is not None and j < len(drafts):
        drafts[j] = wrong_token(drafts[j], vocab_size)
    return drafts


def _rows_of(value, field: str, n: int, what: str) -> tuple:
    """`value` as a tuple of n per-prompt entries, or AdapterError (None, a scalar, a string or an
    array of another length is not one entry per prompt)."""
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, (tuple, list, np.ndarray)) or (isinstance(value, np.ndarray) and value.ndim == 0):
        raise AdapterError(f"{what}: {field} must hold one entry per prompt ({n}), got {type(value).__name__} {value!r:.80}")
    if len(value) != n:
        raise AdapterError(f"{what}: {len(value)} {field} rows for {n} prompts")
    return tuple(value)


def check_result(result, request: GreedyRequest, vocab_size: int, what: str) -> GreedyResult:
    """AdapterError unless `result` answers `request`: one row of max_new_tokens ids in [0, V) per
    prompt, logits [max_new_tokens, V] float (each row with a finite entry: an all-NaN or all-inf row
    decides no argmax) or digests of DIGEST_BYTES bytes where given."""
    if not isinstance(result, GreedyResult):
        raise AdapterError(f"{what}: decode_greedy must return a GreedyResult, got {type(result).__name__}")
    n, L = len(request.prompts), request.max_new_tokens
    for i, row in enumerate(_rows_of(result.tokens, "token", n, what)):
        try:
            ids = np.asarray(row)
        except (ValueError, TypeError):
            ids = np.asarray(None)
        if ids.shape != (L,) or not np.issubdtype(ids.dtype, np.integer) or (ids.size and (ids.min() < 0 or ids.max() >= vocab_size)):
            raise AdapterError(f"{what}: prompt {i}: tokens must be {L} integer ids in [0, {vocab_size}), got {row!r:.80}")
    if result.logits is not None:
        for i, rows in enumerate(_rows_of(result.logits, "logits", n, what)):
            try:
                a = np.asarray(rows)
            except (ValueError, TypeError):
                a = np.asarray(None)
            if a.shape != (L, vocab_size) or not np.issubdtype(a.dtype, np.floating):
                raise AdapterError(f"{what}: prompt {i}: logits must be float [{L}, {vocab_size}], got {a.dtype} {a.shape}")
            dead = ~np.isfinite(a).any(axis=1)
            if dead.any():
                raise AdapterError(f"{what}: prompt {i}: logits row {int(np.argmax(dead))} has no finite entry (all NaN "
                                   "or inf): no token can be its argmax")
    if result.digests is not None:
        digests = _rows_of(result.digests, "digests", n, what)
        if any(isinstance(d, (str, bytes)) or not isinstance(d, (tuple, list)) or len(d) != L
               or any(not isinstance(x, bytes) or len(x) != DIGEST_BYTES for x in d) for d in digests):
            raise AdapterError(f"{what}: digests must be {L} row_digest values ({DIGEST_BYTES} bytes) per prompt")
    if result.info is not None and not isinstance(result.info, dict):
        raise AdapterError(f"{what}: info must be a dict or None, got {type(result.info).__name__}")
    return result


def digests_of(result: GreedyResult):
    """Per prompt, the tuple of row digests (computed from rows where the adapter gave rows), or None."""
    if result.logits is not None:
        return tuple(tuple(row_digest(r) for r in np.asarray(rows)) for rows in result.logits)
    return None if result.digests is None else tuple(tuple(d) for d in result.digests)
