"""llama.cpp through llama-cpp-python at engine level (capability "engine", `models = "own"`).

What runs: `llama_cpp.Llama.generate(tokens, ...)` -- llama-cpp-python's speculative loop over
llama.cpp's own decode and sampler chain -- on the battery's tiny random Llama models
(`models.tiny_llama.pair_folders`), each exported to an f32 GGUF with llama.cpp's `gguf` package
(`models.gguf.export`). The harness's exact law is the float64 forward of the same weights.
llama.cpp's KV cache defaults to f16 (logits then differ from the f32 weights' by ~1e-4); the
adapter sets `type_k = type_v = F32`, and the logits match the float64 forward to ~3e-7 relative,
far below any row's power.

How llama-cpp-python speculates (llama_cpp/llama.py `Llama.generate`, 0.3.36): a draft model is any
`LlamaDraftModel` (`input_ids -> draft ids`); the loop evaluates the last token plus the drafts in
one batch (`logits_all` is forced on), then at each position *samples the target* with its sampler
chain and keeps going while the sample equals the draft there; at the first mismatch the KV cache
is cut back. That is sample-match verification: every emitted token is the target's own sample, so
the output law is exact whatever the drafts are, and acceptance is P(sample = draft) -- sum_x p(x)
q(x) for a sampled draft, p(draft) for a deterministic one -- not 1 - TV(p, q). The identity row
measures exactly that (`specverify/findings/llamacpp_identity.py` compares it with the prediction).

Methods (`method`):
    lookup   `LlamaPromptLookupDecoding(max_ngram_size=2, num_pred_tokens=kappa)`, llama-cpp-python's
             own n-gram drafter (the battery's draft model is not used)
    draft    `ModelDraft` below: OUR drafter -- a second `Llama` on the draft GGUF sampling kappa
             tokens with the run's transform (greedy at temperature 0). llama-cpp-python ships no
             draft-model drafter (only the abstract class); only the verification is llama.cpp's.
             With the target as its own draft, q = p: the chain rule would accept every draft;
             sample-match accepts with probability sum_x p(x)^2 per position.

Special tokens: the tiny models are built with `extra_tokens=2` ("</s>" = EOS at id V, "<s>" = BOS
at V + 1, zero head rows; the law gives them probability 0). Without them llama.cpp's SentencePiece
vocabulary defaults to BOS 1 and EOS 2 -- ordinary tokens of the law -- and its grammar sampler
never allows an EOS while the grammar cannot end: token 2 was never emitted under a grammar
(measured, the first grammar row failed by that). Every generate call (target and drafter) masks
ids >= V with a logits processor (-inf), as `logit_bias` would.

The battery's inputs:
    prompt         token ids to `generate` (no BOS is added: the tiny GGUF says add_bos = false)
    transform      temp=T, top_k=k (0: off), top_p=P; min_p=0 and typical_p=1 (llama-cpp-python's
                   defaults are min_p 0.05, top_k 40, top_p 0.95: all set explicitly); T = 0 ->
                   llama.cpp's greedy sampler. llama-cpp-python's chain is top_k -> typical -> top_p
                   -> min_p -> temperature -> dist: top-p and min-p see the *untempered*
                   distribution, while the reference tempers first. top-k commutes with temperature;
                   top-p or min-p with a temperature other than 0 or 1 has no faithful mapping and is
                   refused (InputError), never run against the wrong law.
    seed           run i: `Llama.set_seed(seed + i)`; `generate` builds a fresh sampler chain whose
                   dist sampler is seeded with it, so run i is reproducible from seed + i
    n, length      n calls of `generate`, each read for `length` tokens
    info           {"num_drafted", "num_accepted", "num_verifies", "verify_counts"} (method draft):
                   llama-cpp-python does not count them; the adapter records each draft call's
                   proposals (wrapping the drafter: each call is one verify step, made with the accepted
                   context) and counts, per call, the drafts at positions the run reached and how many
                   leading ones the emitted tokens equal (sample-match accepts exactly those): each run's
                   (drafted, accepted) per verify step. The acceptance law (`draft_schedule =
                   "prefill-to-length"`, `verify_rule = "sample-match"`): the prompt's eval samples the
                   first token (no drafts), every later step drafts kappa, of which the run verifies
                   min(kappa, tokens left) (the generator samples lazily and the run stops reading at
                   `length`). Prompt lookup reports
                   the totals as {"ngram_drafted", "ngram_accepted"}: its drafts do not come from the draft
                   model, so the identity rows (q = p) do not apply to it and are skipped; and the same
                   per-step "verify_counts", whose law is that of its own rule
                   (`span_drafter = reference.span_drafters.PromptLookupSpan(2)`, same schedule; a call
                   that proposes nothing is a plain step, not a verify step)

Processors (`processors`): llama.cpp's own sampler stages where they exist, else llama-cpp-python's
`logits_processor` hook (a custom llama.cpp sampler, first in the chain, that calls Python
processors with `(input_ids, logits)`):
    frequency_penalty, presence_penalty   llama.cpp's penalties sampler (`penalty_freq`,
                   `penalty_present`, last 64 tokens the chain accepted = the output tokens): the
                   reference's OpenAI form, stage 2
    logit_bias     a processor adding the biases (what `create_completion(logit_bias=)` does)
    banned_tokens  a processor setting them to -inf
    banned_sequences  a processor reading the end of `input_ids`: the prefix llama-cpp-python
                   passes. (It passes `self._input_ids`, every evaluated token -- under speculation
                   that includes the drafts after the row being sampled.)
    min_tokens     llama-cpp-python's own `MinTokensLogitsProcessor(min_tokens, eos)` (what its
                   server's `min_tokens` uses, server/app.py), with the row's single stop token as
                   eos; it counts
                   `len(input_ids)` minus the prompt
    stop_tokens    the run ends at the first stop token, as create_completion's loop ends at EOS
                   (it stops reading the generator); PAD after it
    min_p          llama.cpp's min-p sampler (at temperature 0 or 1 only, see transform)
    grammar        `LlamaGrammar.from_string(gbnf(dfa))`: llama.cpp's grammar sampler (after the
                   processors and penalties, before top-k; it accepts the sampled tokens only, from
                   the first output on: the reference's "state after out")
Not declared: repetition_penalty. llama-cpp-python builds a fresh sampler chain in every
`generate` and feeds it only the sampled tokens, so llama.cpp's repeat penalty covers the output,
not the prompt (measured: prompt (1, 2), penalty 2, 6000 first tokens match the law without the
prompt's penalty), while the reference's HF/CTRL form covers prompt + output.
"""

from __future__ import annotations

import numpy as np

from specverify import installed
from specverify.errors import InputError
from specverify.models import gguf
from specverify.models import tiny as tiny_llama
from specverify.reference.batch import PAD
from specverify.reference.span_drafters import PromptLookupSpan

INSTALL = installed.HINTS["llamacpp"]
METHODS = ("lookup", "draft")
N_CTX = 128                  # the tiny models' max positions; runs use under 16
F32 = 0                      # GGML_TYPE_F32, for type_k / type_v (the default KV cache is f16)
NGRAM = 2                    # LlamaPromptLookupDecoding's default max_ngram_size
DRAFT_SEED_STRIDE = 1_000_003
SPECIAL_TOKENS = 2           # "</s>" (EOS, id V) and "<s>" (BOS, id V + 1) after the vocabulary, masked
GREEDY = dict(temp=0.0, top_k=0, top_p=1.0, min_p=0.0, typical_p=1.0, repeat_penalty=1.0, frequency_penalty=0.0,
              presence_penalty=0.0)


class ModelDraft:
    """OUR draft-model drafter for llama-cpp-python (it ships only the abstract `LlamaDraftModel`): a
    second `Llama` on the draft GGUF that proposes `kappa` tokens after the input ids, sampled with
    the run's sampling settings (the same transform as the target: q = the draft's transformed law;
    temperature 0: its greedy continuation). Call c of the run seeded s draws with seed
    (s * DRAFT_SEED_STRIDE + c) mod 2^32, so a run is reproducible from its seed. Only the
    verification of these drafts is llama.cpp's."""

    def __init__(self, llm, kappa: int, sampling: dict | None = None):
        self.llm, self.kappa = llm, int(kappa)
        self.sampling = dict(GREEDY if sampling is None else sampling)
        self.seed, self.calls = 0, 0

    def reseed(self, seed: int) -> None:
        self.seed, self.calls = int(seed), 0

    def __call__(self, input_ids, /, **kwargs):
        self.llm.set_seed((self.seed * DRAFT_SEED_STRIDE + self.calls) % 2**32)
        self.calls += 1
        out = []
        for tok in self.llm.generate([int(t) for t in input_ids], **self.sampling):
            out.append(int(tok))
            if len(out) == self.kappa:
                break
        return np.asarray(out, np.intc)


class Recorder:
    """Wraps a drafter: keeps (start position, drafts) of every call, for the draft / accept counts."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def __call__(self, input_ids, /, **kwargs):
        drafts = np.asarray(self.inner(input_ids), np.intc)
        self.calls.append((len(input_ids), drafts.tolist()))
        return drafts


def load(module: str):
    """Import `module` of llama-cpp-python, or InputError with the install command (one line)."""
    return installed.load("llamacpp", module)


def steps(calls, sequence, stop: int) -> list:
    """(drafted, accepted) of each draft call, i.e. each verify step: the call's drafts at positions <
    `stop` (where the run went on sampling: llama-cpp-python samples lazily, so a draft past the run's
    last token is never verified) and how many leading ones equal the emitted sequence there
    (sample-match accepts exactly those)."""
    out = []
    for start, drafts in calls:
        live = [d for j, d in enumerate(drafts) if start + j < stop]
        kept = 0
        for j, d in enumerate(live):
            if sequence[start + j] != d:
                break
            kept += 1
        if live:
            out.append((len(live), kept))
    return out


def counts(calls, sequence, stop: int) -> tuple[int, int]:
    """(drafted, accepted) over draft calls (`steps`, summed)."""
    per_step = steps(calls, sequence, stop)
    return sum(k for k, _ in per_step), sum(m for _, m in per_step)


def special_mask(vocab: int):
    """The logits processor that gives the special tokens after the vocabulary (ids >= vocab) -inf."""
    def mask(input_ids, scores):
        scores[vocab:] = -np.inf
        return scores
    return mask


def _processors(llama_mod, grammar_mod, settings, prompt_len: int, vocab: int):
    """(generate kwargs, stop tokens) for `settings` (reference.processors.Processors) as the module
    docstring maps them; the special tokens (ids >= vocab) always masked first."""
    if settings is None:
        return {"logits_processor": llama_mod.LogitsProcessorList([special_mask(vocab)])}, ()
    s = settings
    unsupported = []
    if s.repetition_penalty != 1.0:
        unsupported.append("repetition_penalty")
    if s.min_tokens and len(s.stop_tokens) != 1:
        unsupported.append("min_tokens with other than one stop token")
    if unsupported:
        raise InputError(f"llamacpp: processors {', '.join(unsupported)} are not mapped (not declared)")
    kw: dict = dict(frequency_penalty=float(s.frequency_penalty), presence_penalty=float(s.presence_penalty),
                    min_p=float(s.min_p))
    procs = [special_mask(vocab)]
    bias = {int(t): float(b) for t, b in s.logit_bias}
    banned = [int(t) for t in s.banned_tokens]
    seqs = [tuple(int(x) for x in q) for q in s.banned_sequences]
    if bias:
        def add_bias(input_ids, scores):
            for t, b in bias.items():
                scores[t] += b
            return scores
        procs.append(add_bias)
    if banned or seqs:
        def ban(input_ids, scores):
            for t in banned:
                scores[t] = -np.inf
            ids = [int(x) for x in input_ids]
            for q in seqs:
                head = list(q[:-1])
                if not head or ids[len(ids) - len(head):] == head:
                    scores[q[-1]] = -np.inf
            return scores
        procs.append(ban)
    if s.min_tokens:
        procs.append(llama_mod.MinTokensLogitsProcessor(int(s.min_tokens), int(s.stop_tokens[0])))
    kw["logits_processor"] = llama_mod.LogitsProcessorList(procs)
    if s.grammar is not None:
        kw["grammar"] = grammar_mod.LlamaGrammar.from_string(gbnf(s.grammar), verbose=False)
    return kw, tuple(int(t) for t in s.stop_tokens)


def gbnf(grammar) -> str:
    """The reference's DFA (`reference.processors.Grammar`) as a GBNF grammar over the tiny model's token
    strings: one rule per state, an alternative per allowed token ("t<id>" then the next state's rule).
    Every token string is "t" + digits and no two ids share a string, so a token's text matches exactly
    one literal and llama.cpp's grammar sampler allows exactly the DFA's tokens."""
    lines = ["root ::= s0"]
    for state, row in enumerate(grammar.table):
        alts = [f'"t{tok}" s{nxt}' for tok, nxt in enumerate(row) if nxt >= 0]
        lines.append(f"s{state} ::= " + " | ".join(alts))
    return "\n".join(lines) + "\n"


class LlamaCpp:
    """llama-cpp-python's speculative `generate` at engine level; `method` in METHODS."""

    capabilities = {"engine"}
    models = "own"
    processors = {"frequency_penalty", "presence_penalty", "logit_bias", "banned_tokens", "banned_sequences",
                  "min_tokens", "stop_tokens", "min_p", "grammar"}
    row_dtype = "float32"
    # ~3 ms a run of 4 tokens on a quiet core (~18 CPU-s per 1000 runs a row over the battery): the
    # reports' 5,000 runs a row
    audit_defaults = {"samples": 5_000, "timeout": 1800.0}

    verify_rule = "sample-match"

    def __init__(self, method: str = "lookup", threads: int = 1):
        if method not in METHODS:
            raise InputError(f"llamacpp: method {method!r} not in {METHODS}")
        self.method = method
        if method == "draft":
            # the prefill samples the first token; each later step's drafts are verified up to the run's
            # last token only (lazy sampling, `steps`): min(kappa, tokens left) visible drafts a step
            self.draft_schedule = "prefill-to-length"
        else:
            # the same schedule, the drafts a span of LlamaPromptLookupDecoding's own rule: a call that proposes
            # nothing is a plain step; the law is that of the rule (reference.span_drafters.PromptLookupSpan)
            self.draft_schedule = "prefill-to-length"
            self.span_drafter = PromptLookupSpan(NGRAM)
        self.name = f"llamacpp-{method}"
        self.threads = int(threads)
        self.llama = load("llama_cpp.llama")
        self.spec = load("llama_cpp.llama_speculative")
        self.grammar = load("llama_cpp.llama_grammar")
        self.version = installed.version("llama_cpp_python") or "unknown"
        self._llms: dict = {}
        self.trace = None            # a list: each run appends (prompt + output, its draft calls)

    def own_models(self, vocab: int, seed: int):
        """(target, draft) folders of two tiny Llamas (`models.tiny_llama.pair_folders`), each exported to an
        f32 GGUF beside its weights once (the harness computes the laws from the folders)."""
        folders = tiny_llama.pair_folders(None, int(vocab), int(seed), extra_tokens=SPECIAL_TOKENS)
        for f in folders:
            gguf.export(f)
        return folders

    def _llm(self, model, role: str):
        """One `Llama` per (GGUF, role): the target's (logits of every position, for the verify
        batches) and a drafter's (its own KV cache, even when it is the target's file)."""
        path = str(gguf.export(model.handle))
        key = (path, role)
        if key not in self._llms:
            self._llms[key] = self.llama.Llama(path, n_ctx=N_CTX, n_threads=self.threads, n_threads_batch=self.threads,
                                               logits_all=True, type_k=F32, type_v=F32, seed=0, verbose=False)
        return self._llms[key]

    def _drafter(self, draft, kappa: int, sampling: dict):
        if self.method == "lookup":
            return self.spec.LlamaPromptLookupDecoding(max_ngram_size=NGRAM, num_pred_tokens=int(kappa))
        cls = type("ModelDraftModel", (ModelDraft, self.spec.LlamaDraftModel), {})
        return cls(self._llm(draft, "draft"), kappa, sampling)

    def sampling(self, transform) -> dict:
        """generate kwargs for a Transform (module docstring); InputError where none is faithful."""
        t = transform
        if t.temperature not in (0.0, 1.0) and t.top_p < 1.0:
            raise InputError(f"llamacpp: top_p {t.top_p} at temperature {t.temperature}: llama.cpp applies top-p "
                             f"before temperature, the reference after (no faithful mapping)")
        return dict(temp=float(t.temperature), top_k=int(t.top_k), top_p=float(t.top_p), min_p=0.0, typical_p=1.0,
                    repeat_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0)

    def generate(self, target, draft, prompt, kappa, transform, seed, n, length, processors=None):
        kw = self.sampling(transform)
        proc_kw, stops = _processors(self.llama, self.grammar, processors, len(prompt), target.vocab_size)
        if proc_kw.get("min_p") and transform.temperature not in (0.0, 1.0):
            raise InputError(f"llamacpp: min_p at temperature {transform.temperature}: llama.cpp applies min-p "
                             f"before temperature, the reference after (no faithful mapping)")
        llm = self._llm(target, "target")
        mask = self.llama.LogitsProcessorList([special_mask(target.vocab_size)])
        drafter = self._drafter(draft, kappa, {**kw, "logits_processor": mask})
        recorder = Recorder(drafter)
        llm.draft_model = recorder
        prompt = [int(t) for t in prompt]
        out = np.full((int(n), int(length)), PAD, np.int64)
        drafted = accepted = 0
        traces: list = []             # per run: (drafted, accepted) of each verify step (`steps`)
        try:
            for i in range(int(n)):
                llm.set_seed(int(seed) + i)
                if isinstance(drafter, ModelDraft):
                    drafter.reseed(int(seed) + i)
                if processors is not None:         # MinTokensLogitsProcessor keeps state: a fresh one per run
                    proc_kw, _ = _processors(self.llama, self.grammar, processors, len(prompt), target.vocab_size)
                recorder.calls = []
                row = []
                for tok in llm.generate(prompt, **{**kw, **proc_kw}):
                    row.append(int(tok))
                    if len(row) == int(length) or int(tok) in stops:
                        break
                out[i, :len(row)] = row
                per_step = steps(recorder.calls, prompt + row, len(prompt) + len(row))
                traces.append(per_step)
                if self.trace is not None:
                    self.trace.append((prompt + row, list(recorder.calls)))
                drafted += sum(k for k, _ in per_step)
                accepted += sum(m for _, m in per_step)
        finally:
            llm.draft_model = None
        if self.method == "lookup":         # n-gram drafts ignore the draft model: the identity premise (q = p)
            # does not apply, so no num_* totals; the per-step traces are for the span drafter's acceptance law
            return out, {"ngram_drafted": drafted, "ngram_accepted": accepted, "verify_counts": traces}
        return out, {"num_drafted": drafted, "num_accepted": accepted, "num_verifies": sum(len(t) for t in traces),
                     "verify_counts": traces}


def lookup():
    return LlamaCpp("lookup")


def draft():
    return LlamaCpp("draft")
