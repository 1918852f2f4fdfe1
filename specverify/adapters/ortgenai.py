"""ONNX Runtime GenAI (`onnxruntime-genai`, CPU wheel) at engine level (capability "engine") and on the
bitwise level, on models exported by its own model builder.

What runs. `own_models(vocab, seed)` builds the tiny random Llama pair of `models.tiny` with one
special token after the vocabulary ("</s>", id V, a zero head row: the export's EOS and, by the builder's
default, its pad id) and exports each with ONNX Runtime GenAI's model builder
(`python -m onnxruntime_genai.models.builder -i HF -o OUT -p fp32 -e cpu`, in a subprocess; the export is
kept in the HF folder, `ortgenai-<version>-fp32-cpu/`). The exact law is the float64 forward of the same
weights over the V real tokens (`tiny_llama.tabulated`: the special token has probability 0); the engine
computes in float32 (logits within ~1e-6 of it, far below any row's power). `generate` drives the
engine's own Python API, one `og.Generator` per run:

    og.Config(target export) [+ overlay {"model": {"draft": <the draft export's decoder block>}}]
    og.GeneratorParams.set_search_options(...) / set_speculative_options(...)
    Generator.append_tokens(prompt ids); generate_next_token() until is_done(); get_sequence(0)

How the battery's inputs map to the engine's API:

    method "draft"   draft-model speculation (PRs #2233, #2287): the draft's decoder block from its own
                     export's genai_config.json as `model.draft`; `max_draft_tokens = kappa` (fixed width:
                     `min_adaptive_k = 0`, no cooldown). The identity rows (`draft is target`) point the
                     draft block at the target's own ONNX file (a second session of the same weights).
    method "ngram"   n-gram decoding (PRs #2314, #2315): `ngram_size = NGRAM_SIZE` (the smallest it takes:
                     the last token is looked up in the committed history), `max_draft_tokens = kappa`;
                     the battery's draft model is not used. Its verifier samples the target at every
                     position and keeps the drafts while they equal the samples (`VerifyDeterministicProposal`):
                     exact in law by construction, so the rows test it as a sampler. Its counts say
                     nothing about a draft model: the identity rows skip.
    n-gram acceptance  the rule (src/n_gram_lookup.h `NGramLookup::Propose`, onnxruntime-genai master of
                     2026-08-22 as stored): the latest earlier occurrence of the last ngram_size - 1 tokens
                     that has a continuation (a key is registered once the token after it is appended,
                     later ones overwrite), the up to K tokens after it -- `span_drafter =
                     RecentNgramSpan(1, 1)` at NGRAM_SIZE 2; an empty proposal is a standard decoding step,
                     not a round (RunRound). Schedule `to-length` (K = min(K, max_length - seed_length)),
                     `verify_rule = "sample-match"`. Tokens come out one per generate_next_token(), so no
                     per-round chunks are visible; each run's trace is built from its tokens and the rule
                     (`ngram_trace`: a round keeps the span's common prefix with the next tokens) and
                     checked against the run's own get_speculative_stats() rounds, draft_tokens_proposed and
                     draft_tokens_accepted ("counter_mismatches": a failing counters row when any differ).
    transform        temperature 0 -> do_sample=False (greedy); else do_sample=True, temperature=T,
                     top_k = Transform.top_k (0 = off), top_p = Transform.top_p (1.0 = off). The engine
                     applies them to draft and target rows alike (`ComputeSampledCategorical`).
    seed             run i: search option random_seed = (seed + i) mod 2^31 (the engine's mt19937 seed).
    length           max_length = min_length = len(prompt) + length: while the sequence is shorter than
                     min_length the engine sets the EOS logit to the lowest float on every row, draft and
                     target (`ApplyMinLengthToLogits`), so EOS has probability exactly 0 and every run has
                     `length` tokens of the V real ones -- the law's support.
    info             {"num_drafted", "num_accepted", "num_verifies"}: the sums over runs of the generator's
                     own `get_speculative_stats()` counters `draft_tokens_proposed`, `draft_tokens_accepted`
                     and `rounds` (verify rounds; no per-round counts are exposed).
    acceptance       `draft_schedule = "to-length"`: every round, the first one included (the prompt's
                     prefill is verified with the first drafts), drafts min(kappa, tokens left to
                     max_length). Measured (greedy, draft = target, kappa 2, lengths 1..8): drafted per
                     run 1, 2, 2, 3, 4, 4, 5, 6, exactly what `to-length` predicts and no other schedule
                     does. `verify_rule = "chain"`: with a sampled draft the proposal carries the draft's
                     rows (ProposalMode::kDraftSampling) and a draft is kept with min(1, p/q)
                     (`ComputeAcceptProb`), a rejection replaced from max(0, p - q) renormalised
                     (`SampleCorrectionToken`), src/decoding/speculative_sampling.h.

Processors (`processors`, `reference.processors`): `repetition_penalty=r` -> the search option of that
name, HF/CTRL form over the whole sequence (prompt + output), each token once -- the reference's stage 1.
The engine applies it to the target's verify rows and the draft's rows with the prefix prompt + output +
drafts 0..i-1 (`LogitsPenaltyProcessor`, sampling_distribution.h).

Not declared, so listed as not covered: stop_tokens and min_tokens (the engine's stop is its EOS: it is
*not* appended to the sequence when it ends a run, while the reference emits the stop token; and the
battery's stop and min_tokens rows also need logit_bias), frequency_penalty, presence_penalty,
logit_bias, min_p, banned_tokens / banned_sequences (the engine has none of them; its
`no_repeat_ngram_size` bans repeats of the sequence's own n-grams, which no reference processor models),
and grammar (the engine's guidance takes a JSON schema, regex or Lark grammar over decoded text through
llguidance; the battery's DFA over token ids has no faithful translation here). Batch > 1, beams and the
continuous-batching `Engine` do not speculate in 0.18.0 (docs/SpeculativeDecoding.md, "Supported
scope"): the engine-level rows run batch 1.

The bitwise level (`OrtGenAIGreedy`, module functions `tiny` and `smollm2`): greedy decode with
`do_sample=False`, max_length = min_length = prompt + n (EOS masked: no stop), plain, with the model as
its own draft ("draft") and with n-gram lookup ("ngram"), one request at a time; plain decode also in
padded batches (`search.batch_size = N`, prompts padded on the RIGHT with the export's pad id: that is
how the engine's own `Tokenizer.encode_batch` pads; left padding gives other logits, see
`findings/repro/ortgenai_leading_pad.py`). Logits: `Generator.get_logits()` before each
`generate_next_token()` in plain decode (the row the token is the argmax of); with speculation one verify
pass emits several tokens and the row the generator exposes is not each token's own, so speculative
results carry token ids only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from specverify import installed
from specverify.errors import AdapterError, InputError
from specverify.models import cache, smollm2
from specverify.models import tiny as tiny_llama
from specverify.models.prompts import chat_prompts
from specverify.reference.acceptance import SAMPLE_MATCH
from specverify.reference.batch import PAD
from specverify.reference.span_drafters import RecentNgramSpan

from .bitwise_level import BATCH, NO_SPEC, BitwiseInfo, GreedyResult, check_request

DRAFT, NGRAM = "draft", "ngram"
METHODS = (DRAFT, NGRAM)
NGRAM_SIZE = 2               # the engine's minimum ("NGramLookup requires ngram_size >= 2")
SEED_MOD = 2**31             # random_seed is a non-negative int; mt19937 takes 32 bits
EXTRA_TOKENS = 1             # tiny_llama's "</s>" after the vocabulary: the export's EOS (masked, below)
PLACEHOLDER_EOS = 0          # written into the staged config.json only: the builder refuses a model
                             # without eos_token_id; every og.Model here overrides it (overlay)
EXPORT_TIMEOUT = 1800.0      # seconds for one builder run (SmolLM2-135M: minutes on 2 cores)
INSTALL = "bash specverify/findings/install_ortgenai.sh (pip install onnxruntime-genai==0.18.0 onnx onnx_ir)"


def _og():
    """The engine's module, or InputError with the install command (one line)."""
    if not installed.available("onnxruntime_genai"):
        raise InputError(f"onnxruntime-genai is not installed; to audit it: {INSTALL}")
    try:
        import onnxruntime_genai
    except ImportError as exc:
        raise InputError(f"onnxruntime-genai is installed but does not import ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0]}); {INSTALL}") from None
    return onnxruntime_genai


def export_dir(hf_folder) -> Path:
    """Where the export of an HF folder lives: inside it, named by the engine's version."""
    return Path(hf_folder) / f"ortgenai-{_og().__version__}-fp32-cpu"


def export(hf_folder, out=None) -> Path:
    """Export an HF Llama folder with the engine's model builder (fp32, CPU); return the ONNX folder
    (kept: a folder with a genai_config.json is reused). The builder runs on a staged copy whose
    config.json has an eos_token_id (PLACEHOLDER_EOS where it has none); weights and tokenizer are
    links to the originals."""
    _og()
    hf_folder = Path(hf_folder)
    out = Path(out) if out is not None else export_dir(hf_folder)
    if (out / "genai_config.json").exists():
        return out
    with cache.atomic_folder(out, built="onnx") as work:
        stage = work / "hf"
        stage.mkdir()
        for f in hf_folder.iterdir():
            if f.is_file() and f.name != "config.json":
                os.symlink(f.resolve(), stage / f.name)
        config = json.loads((hf_folder / "config.json").read_text())
        if config.get("eos_token_id") is None:
            config["eos_token_id"] = PLACEHOLDER_EOS
        (stage / "config.json").write_text(json.dumps(config))
        cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(stage), "-o", str(work / "onnx"),
               "-p", "fp32", "-e", "cpu", "-c", str(work / "cache")]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=EXPORT_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise AdapterError(f"ortgenai: the model builder did not finish within {EXPORT_TIMEOUT:.0f} s on {hf_folder}")
        if res.returncode != 0 or not (work / "onnx" / "genai_config.json").exists():
            tail = " | ".join((res.stdout + res.stderr).strip().splitlines()[-3:])
            raise AdapterError(f"ortgenai: the model builder failed on {hf_folder} (exit {res.returncode}): {tail}")
    return out


def load(onnx_dir, draft_dir=None):
    """An og.Model of an export, with the draft export's decoder block as `model.draft` (a Config overlay)
    when `draft_dir` is given."""
    og = _og()
    onnx_dir = Path(onnx_dir)
    model = {}
    if draft_dir is not None:
        draft_dir = Path(draft_dir)
        block = json.loads((draft_dir / "genai_config.json").read_text())["model"]["decoder"]
        # the engine joins the config folder and this name: a relative path
        block["filename"] = os.path.relpath(draft_dir / block["filename"], onnx_dir)
        model["draft"] = block
    config = og.Config(str(onnx_dir))
    if model:
        config.overlay(json.dumps({"model": model}))
    return og.Model(config)


def search_options(prompt_len: int, length: int, transform, seed: int, processors=None) -> dict:
    """The engine's search options for one run (module docstring: the mapping). min_length = max_length:
    the export's EOS (a special token outside the law's vocabulary) is masked at every position."""
    opts = dict(max_length=prompt_len + length, min_length=prompt_len + length, random_seed=int(seed) % SEED_MOD,
                num_beams=1)
    if transform.temperature == 0:
        opts["do_sample"] = False
    else:
        opts.update(do_sample=True, temperature=float(transform.temperature), top_k=int(transform.top_k or 0),
                    top_p=float(transform.top_p if transform.top_p is not None else 1.0))
    if processors is not None and processors.repetition_penalty != 1.0:
        opts["repetition_penalty"] = float(processors.repetition_penalty)
    return opts


def run_one(model, prompt, opts: dict, spec: dict | None):
    """One run through the engine's API: (new token ids, the generator's speculative stats or {})."""
    og = _og()
    params = og.GeneratorParams(model)
    params.set_search_options(**opts)
    if spec:
        params.set_speculative_options(**spec)
    gen = og.Generator(model, params)
    gen.append_tokens(np.asarray(prompt, dtype=np.int32))
    while not gen.is_done():
        gen.generate_next_token()
    seq = np.asarray(gen.get_sequence(0), dtype=np.int64)[len(prompt):]
    return seq, (gen.get_speculative_stats() if spec else {})


class OrtGenAI:
    """ONNX Runtime GenAI's speculative decoding on tiny Llamas it exported itself (module docstring)."""

    capabilities = {"engine"}
    models = "own"
    processors = {"repetition_penalty"}
    # engine_acceptance (module docstring, "acceptance"): every round drafts min(kappa, tokens left), the
    # first included (measured), verified by the chain rule (speculative_sampling.h: ComputeAcceptProb,
    # SampleCorrectionToken); drafts sampled from the draft's transformed row
    draft_schedule = "to-length"
    verify_rule = "chain"
    # ~1,200 runs of 4 tokens a second (draft model), ~2,000 (n-gram): 50,000 runs a row is ~40 s
    audit_defaults = {"samples": 50_000, "timeout": 1800.0}

    def __init__(self, method: str = DRAFT, root=None):
        if method not in METHODS:
            raise InputError(f"ortgenai: unknown speculation method {method!r}; known: {', '.join(METHODS)}")
        og = _og()
        self.method = method
        self.name = "ortgenai" if method == DRAFT else f"ortgenai-{method}"
        if method == NGRAM:               # its own rule's spans, kept while they equal the target's samples
            self.span_drafter = RecentNgramSpan(NGRAM_SIZE - 1, NGRAM_SIZE - 1)
            self.verify_rule = SAMPLE_MATCH
        self.version = og.__version__
        self.root = root
        self._models = {}

    def own_models(self, vocab: int, seed: int):
        """(target, draft) folders of tiny_llama.pair_folders, each exported here (the harness loads
        their float64 laws and passes them back as TabulatedModels whose handle is the folder)."""
        from specverify.models import tiny as tiny_llama
        folders = tiny_llama.pair_folders(self.root, int(vocab), int(seed), extra_tokens=EXTRA_TOKENS)
        for folder in folders:
            export(folder)
        return tuple(folders)

    def _model(self, target, draft):
        identity = draft is target or (draft is not None and Path(draft.handle) == Path(target.handle))
        key = (str(target.handle), None if draft is None else ("self" if identity else str(draft.handle)))
        if key not in self._models:
            t_dir = export(target.handle)
            d_dir = None if draft is None else (t_dir if identity else export(draft.handle))
            self._models[key] = load(t_dir, draft_dir=d_dir)
        return self._models[key]

    def generate(self, target, draft, prompt, kappa, transform, seed, n, length, processors=None):
        if getattr(target, "handle", None) is None:
            raise InputError("ortgenai runs its own models (models = 'own'): the target has no exported folder")
        model = self._model(target, draft if self.method == DRAFT else None)
        spec = {"max_draft_tokens": int(kappa), "min_adaptive_k": 0, "cooldown": False}
        if self.method == NGRAM:
            spec["ngram_size"] = NGRAM_SIZE
        out = np.full((n, length), PAD, dtype=np.int64)
        drafted = accepted = verifies = 0
        traces, mismatches, example = [], 0, None
        for i in range(n):
            opts = search_options(len(prompt), length, transform, int(seed) + i, processors)
            seq, stats = run_one(model, prompt, opts, spec)
            if len(seq) > length:
                raise AdapterError(f"ortgenai: a run returned {len(seq)} new tokens for max_length {len(prompt) + length}")
            out[i, :len(seq)] = seq
            drafted += int(stats.get("draft_tokens_proposed", 0))
            accepted += int(stats.get("draft_tokens_accepted", 0))
            verifies += int(stats.get("rounds", 0))
            if self.method == NGRAM and processors is None:
                trace = ngram_trace(self.span_drafter, prompt, seq, int(kappa), length)
                traces.append(trace)
                got = tuple(int(stats.get(key, -1))
                            for key in ("rounds", "draft_tokens_proposed", "draft_tokens_accepted"))
                want = (len(trace), sum(k for k, _ in trace), sum(m for _, m in trace))
                if got != want:
                    mismatches += 1
                    if example is None:
                        example = {"run": i, "tokens": [int(t) for t in seq], "trace": [list(t) for t in trace],
                                   "counters": list(got), "expected": list(want)}
        if self.method == NGRAM:          # the n-gram proposer never uses the battery's draft model (the
            if processors is not None:    # identity rows skip); traces only without processors
                return out, {}
            return out, {"num_drafted": drafted, "num_accepted": accepted, "num_verifies": verifies,
                         "verify_counts": traces, "counter_mismatches": {
                             "runs": mismatches, "example": example,
                             "what": "the engine's own round counters (rounds, draft_tokens_proposed, "
                                     "draft_tokens_accepted) disagree with the trace its n-gram rule gives"}}
        return out, {"num_drafted": drafted, "num_accepted": accepted, "num_verifies": verifies}


def ngram_trace(drafter, prompt, tokens, kappa: int, length: int) -> list:
    """A run's (drafted, accepted) per round under n-gram decoding (module docstring, "n-gram acceptance"):
    a round after e tokens proposes `drafter`'s span of prompt + the e tokens cut to min(kappa, length - e)
    (RunRound: K = min(K, max_length - seed_length)); an empty span is a standard step (1 token, no round).
    Drafts are kept while they equal the target's samples, so the round keeps m = the span's common
    prefix with the run's next tokens, then emits one more (a correction, or the bonus, which is
    discarded past the length).

    Worked example (RecentNgramSpan(1, 1), prompt (1, 2, 3, 1, 2, 0, 1, 2), kappa 3, greedy tokens
    (3, 3, 3, 3, 3, 3), length 6 -- measured: 4 rounds, 8 proposed, 2 accepted): the last 2 occurs latest at
    4: span (0, 1, 2), 3 is not 0: (3, 0); the last 3 at 2: (1, 2, 0): (3, 0); after (.., 3, 3) the
    latest 3 with a continuation is at 8: span (3,), kept, bonus 3: (1, 1); again (1, 1).
    [(3, 0), (3, 0), (1, 1), (1, 1)]."""
    prompt, tokens = tuple(int(t) for t in prompt), [int(t) for t in tokens]
    emitted, trace = 0, []
    while emitted < length:
        k = min(int(kappa), length - emitted)
        span = tuple(drafter.propose(prompt + tuple(tokens[:emitted]), k))[:k]
        if not span:
            emitted += 1
            continue
        m = 0
        while m < len(span) and emitted + m < len(tokens) and tokens[emitted + m] == span[m]:
            m += 1
        trace.append((len(span), m))
        emitted += m + 1
    return trace


def make():
    """`ortgenai`: draft-model speculation."""
    return OrtGenAI(DRAFT)


def ngram():
    """`ortgenai-ngram`: n-gram decoding."""
    return OrtGenAI(NGRAM)


# ---------------------------------------------------------------------------------------------- bitwise level

SELF_DRAFT = "draft"          # bitwise proposers: the model as its own draft (a second session) ...
PROPOSERS = (SELF_DRAFT, NGRAM)   # ... and n-gram lookup
MAX_BATCH = 8
TINY_VOCAB = 128              # the CI model: tiny_llama's architecture over 128 tokens + 4 special ones
TINY_EXTRA = 4                # "</s>", "<s>", "<unk>", "<pad>": a real pad id (V + 3) for padded batches
TINY_PROMPTS = 32
TINY_PROMPT_LENGTHS = (5, 24)


class OrtGenAIGreedy:
    """ONNX Runtime GenAI's greedy decode on the bitwise level (module docstring)."""

    name = "ortgenai-bitwise"
    capabilities = {"bitwise"}
    audit_defaults = {"timeout": 3600.0}

    def __init__(self, onnx_dir, label: str, prompts=(), note=None):
        og = _og()
        self.version = og.__version__
        self.onnx_dir = Path(onnx_dir)
        self.label, self.prompts, self.note = label, tuple(tuple(p) for p in prompts), note
        config = json.loads((self.onnx_dir / "genai_config.json").read_text())["model"]
        self.vocab_size = int(config["vocab_size"])
        self.pad = int(config["pad_token_id"])
        self._plain = load(self.onnx_dir)
        self._self_draft = None

    def bitwise_info(self):
        return BitwiseInfo(model=self.label, vocab_size=self.vocab_size, proposers=PROPOSERS, layouts=(BATCH,),
                           max_batch_size=MAX_BATCH, spec_max_batch_size=1, prompts=self.prompts, note=self.note)

    def _decode_plain(self, prompts, n: int):
        """Plain greedy decode of one padded batch: (ids [B, n], logits rows [B, n, V] float32). Prompts are
        padded on the right with the export's pad id, as the engine's own `Tokenizer.encode_batch` pads."""
        og = _og()
        width = max(len(p) for p in prompts)
        ids = np.full((len(prompts), width), self.pad, dtype=np.int32)
        for i, p in enumerate(prompts):
            ids[i, :len(p)] = p
        params = og.GeneratorParams(self._plain)
        params.set_search_options(do_sample=False, max_length=width + n, min_length=width + n, batch_size=len(prompts),
                                  num_beams=1)
        gen = og.Generator(self._plain, params)
        gen.append_tokens(ids)
        rows = []
        while not gen.is_done():
            rows.append(np.array(gen.get_logits(), dtype=np.float32).reshape(len(prompts), -1)[:, :self.vocab_size])
            gen.generate_next_token()
        out = np.stack([np.asarray(gen.get_sequence(i), dtype=np.int64)[width:] for i in range(len(prompts))])
        return out, np.stack(rows, axis=1)

    def _decode_spec(self, prompt, n: int, spec):
        if spec.proposer == SELF_DRAFT:
            if self._self_draft is None:
                self._self_draft = load(self.onnx_dir, draft_dir=self.onnx_dir)
            model, opts = self._self_draft, {"max_draft_tokens": int(spec.kappa)}
        else:
            model, opts = self._plain, {"max_draft_tokens": int(spec.kappa), "ngram_size": NGRAM_SIZE}
        opts.update(min_adaptive_k=0, cooldown=False)
        total = len(prompt) + n
        seq, stats = run_one(model, prompt, dict(do_sample=False, max_length=total, min_length=total, num_beams=1), opts)
        return seq, stats

    def decode_greedy(self, request):
        check_request(request, self.bitwise_info(), "ortgenai")
        spec, layout = request.spec, request.layout
        n = int(request.max_new_tokens)
        prompts = list(request.prompts)
        if spec.proposer == NO_SPEC:
            tokens, logits = [], []
            for i in range(0, len(prompts), layout.batch_size):
                ids, rows = self._decode_plain(prompts[i:i + layout.batch_size], n)
                tokens += [tuple(int(t) for t in r) for r in ids]
                logits += [np.ascontiguousarray(r) for r in rows]
            return GreedyResult(tokens=tuple(tokens), logits=tuple(logits))
        tokens, drafted, accepted = [], 0, 0
        for p in prompts:
            seq, stats = self._decode_spec(p, n, spec)
            tokens.append(tuple(int(t) for t in seq))
            drafted += int(stats.get("draft_tokens_proposed", 0))
            accepted += int(stats.get("draft_tokens_accepted", 0))
        return GreedyResult(tokens=tuple(tokens), info={"num_drafted": drafted, "num_accepted": accepted})


def tiny():
    """`ortgenai-bitwise-tiny`: tiny_llama's architecture over TINY_VOCAB tokens (+ 4 special ones, so
    padded batches have a pad id that no prompt holds), exported by the builder; prompts of real tokens
    drawn with a fixed seed. The CI form: no download, seconds to build."""
    from specverify.models import tiny as tiny_llama
    folder = tiny_llama.build(tiny_llama.root() / f"bitwise-V{TINY_VOCAB}-x{TINY_EXTRA}", TINY_VOCAB, 0,
                              extra_tokens=TINY_EXTRA)
    rng = np.random.default_rng(0)
    prompts = [tuple(int(t) for t in rng.integers(0, TINY_VOCAB, int(rng.integers(*TINY_PROMPT_LENGTHS))))
               for _ in range(TINY_PROMPTS)]
    return OrtGenAIGreedy(export(folder), f"tiny-random-llama-ortgenai-V{TINY_VOCAB}", prompts)


def smollm2():
    """`ortgenai-bitwise`: SmolLM2-135M-Instruct (GGUF -> transformers -> the builder), the repo's prompts."""
    installed.load("transformers", "transformers")
    from transformers import AutoTokenizer

    smollm2.require("ortgenai-bitwise")
    folder = smollm2.hf_folder()
    tok = AutoTokenizer.from_pretrained(str(folder))
    prompts = chat_prompts(tok)
    return OrtGenAIGreedy(export(folder), "SmolLM2-135M-ortgenai", prompts)
