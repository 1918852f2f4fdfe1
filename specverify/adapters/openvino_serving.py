"""OpenVINO GenAI's ContinuousBatchingPipeline with its speculation at the serving engine level
(capability "serving", `adapters/serving_level.py`): what the pipeline returns past its sampler, in
process, without a server -- `specverify audit openvino-serving` (draft model) and
`openvino-lookup-serving` (prompt lookup).

The served model is the tiny random Llama of llamacpp-serving and mlx-serving (`models.tiny.build`, 4
tokens, seed 0, the models cache's `serving-target-V4-s0`) and its noisy draft (seed 1), exported to IR
by `adapters.openvino.export` (optimum-intel, f32, INFERENCE_PRECISION_HINT and KV_CACHE_PRECISION f32)
into `<cache>/openvino/<folder>-pieces`, with a tokenizer IR of the GGUF's one-character pieces
(`models.pieces`: ids 0..3 are "a".."d") instead of the words "t0".."t3": a byte-level BPE without merges
(one piece a token both ways) plus the special token of `openvino.write_tokenizer` at id V (the
converter needs one; never output), converted by openvino_tokenizers. So the pipeline's own tokenizer
matches stop strings and detokenises, and the rows know every id's exact text (serving_codec).

One pipeline serves every request, as a server keeps one engine (prefix caching off: with a draft it
crashes, findings/repro/openvino_prefix_cache_crash.py). A `complete` call is one wave: every request
`add_request`ed at once (continuous batching admits them together), then `step()` until none is
running. A streamed request's handle is `read()` after each step (the tokens that step appended: one
event); any other's is read once at the end (`read_all()`: the whole answer, as generate returns it):

    prompt      the ids as an int64 ov.Tensor (no tokenizer involved)
    sampling    T = 0: do_sample False (greedy); else do_sample, temperature T, top_k 0, top_p 1;
                num_assistant_tokens KAPPA (and max_ngram_size NGRAM for prompt lookup); no EOS
                (`openvino.base_config`: eos = the special id, ignore_eos)
    seed        GenerationConfig.rng_seed per request; an unseeded request keeps the default rng_seed
                (OpenVINO's default is a fixed seed, not a fresh draw)
    stop        stop_strings, include_stop_str_in_output False (OpenVINO's and OpenAI's default: the
                stop string is not in the output) -- OpenVINO then drops the stop string's tokens from
                generated_ids (and their logprobs); the adapter reports the ids as returned
    logprobs    GenerationConfig.logprobs = 1 when asked (OpenVINO computes one a position: "only single
                top logprob can be returned"): GenerationOutput.generated_log_probs, the logprob of each
                returned token. Top entries: for a greedy request {token: its logprob} -- the top-1
                entry, the token being the argmax; none for a sampled one (its token need not be the
                top one, and OpenVINO returns no other entry)
    text        the pipeline's tokenizer's decode(ids) (its detokenizer IR)
    finish      the last GenerationOutput.finish_reason: STOP -> "stop", LENGTH -> "length". Measured:
                a request with a stop string can end FINISHED with fewer than max_new_tokens tokens and
                finish_reason NONE (or with nothing to read at all when the stop string is completed by
                its first token); without EOS only a stop string ends a request early, so the adapter
                reports "stop" there (and counts it, `unreported_stops`) and the rows judge its ids
    usage       the handle's PerfMetrics.get_num_generated_tokens() (the only count the API gives per
                request)
    stream      each step's read() is one event: its ids, their text (decode of those ids)

Prompt lookup (`openvino-lookup-serving`) does not declare stop: with stop strings its pipeline aborts
(step() raises RuntimeError "Cannot remove more tokens than has been generated" for 2 to 7 of 88
stopped requests run alone; the draft-model pipeline for 3 or 4 of them, and both when the 88 run
together: findings/repro/openvino_serving_outputs.py), so its stop row is a SKIP naming that, not an
audit error.

Not declared (SKIPs under not covered, with the API's reason: `serving_skips`): prefix_cache (the count
of cached prompt tokens is reported nowhere, and prefix caching with a draft crashes), preemption
(PipelineMetrics has cache usage, no preemption count), n > 1 (num_return_sequences exists; the
engine-level protocol has no n). The logprobs are float32 (serving_float64_logprobs False: compared
within checks.serving.LOGPROB_ATOL).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specverify.errors import AdapterError
from specverify.models import pieces
from specverify.models import tiny as tiny_llama

from . import openvino as ov_adapter
from .serving_level import ServingOutput

VOCAB = 4
SEED = 0
DRAFT_SEED = 1
KAPPA = 3                    # num_assistant_tokens: drafts a step
TARGET_FOLDER = f"serving-target-V{VOCAB}-s{SEED}"        # the llamacpp-serving / mlx-serving model
DRAFT_FOLDER = f"serving-draft-V{VOCAB}-s{DRAFT_SEED}"
IR_SUFFIX = "-pieces"        # the IR folder: <cache>/openvino/<folder>-pieces
ONE_LOGPROB = 1              # GenerationConfig.logprobs: OpenVINO computes at most one a position
LOOKUP_STOP = ("stop strings with prompt lookup abort the pipeline: step() raises RuntimeError 'Cannot remove more "
               "tokens than has been generated' (sequence_group.hpp), for 2 to 7 of 88 stopped requests even run alone "
               "(findings/repro/openvino_serving_outputs.py)")
MAX_STEPS = 10_000           # a wave that runs longer than this is an engine that never finishes


def model_folders():
    """(target, draft) HF folders of the tiny pair in the models cache (built once)."""
    root = tiny_llama.root()
    target = tiny_llama.build(root / TARGET_FOLDER, VOCAB, SEED)
    draft = tiny_llama.build(root / DRAFT_FOLDER, VOCAB, DRAFT_SEED, draft_of=target)
    return target, draft


def write_piece_tokenizer(out: Path, vocab: int) -> None:
    """openvino_tokenizer.xml / openvino_detokenizer.xml of the `vocab` one-character pieces (a byte-level
    BPE without merges: one piece a token) plus openvino.SPECIAL at id `vocab`."""
    import openvino as ov
    from openvino_tokenizers import convert_tokenizer
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {p: i for i, p in enumerate(pieces.pieces(vocab))}
    words[ov_adapter.SPECIAL] = vocab
    tok = Tokenizer(models.BPE(vocab=words, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(ov_adapter.SPECIAL, special=True)])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=ov_adapter.SPECIAL)
    encoder, decoder = convert_tokenizer(hf, with_detokenizer=True)
    ov.save_model(encoder, str(out / "openvino_tokenizer.xml"))
    ov.save_model(decoder, str(out / "openvino_detokenizer.xml"))


def irs():
    """(target, draft) IR folders with the piece tokenizer (exported once, cached)."""
    root = ov_adapter.cache_root()
    return tuple(ov_adapter.export(f, root / (f.name + IR_SUFFIX), tokenizer=write_piece_tokenizer)
                 for f in model_folders())


def _event(out) -> tuple:
    """A GenerationOutput as (ids, logprobs, finish reason)."""
    return (tuple(int(t) for t in out.generated_ids), tuple(float(x) for x in out.generated_log_probs),
            out.finish_reason)


def finish_name(reason, genai) -> str | None:
    """GenerationFinishReason -> "stop" | "length" | None (NONE: still running)."""
    names = {genai.GenerationFinishReason.STOP: "stop", genai.GenerationFinishReason.LENGTH: "length"}
    return names.get(reason)


class OpenVINOServing:
    capabilities = {"serving"}
    serving_features = ("logprobs", "text", "stop", "seed", "usage", "stream")
    serving_float64_logprobs = False      # OpenVINO's rows are float32
    serving_skips = {
        "prefix_cache": "neither GenerationOutput nor PerfMetrics counts prompt tokens served from a prefix cache, and "
                        "SchedulerConfig.enable_prefix_caching with a draft model crashes "
                        "(findings/repro/openvino_prefix_cache_crash.py): it is off",
        "preemption": "PipelineMetrics (get_metrics) has cache usage and request counts, no preemption count",
    }

    def __init__(self, method: str = ov_adapter.DRAFT):
        self.ov, self.genai = ov_adapter._load()
        self.method = method
        self.name = "openvino-serving" if method == ov_adapter.DRAFT else "openvino-lookup-serving"
        if method == ov_adapter.LOOKUP:       # stop strings abort its pipeline (module docstring)
            self.serving_features = tuple(f for f in self.serving_features if f != "stop")
            self.serving_skips = {**self.serving_skips, "stop": LOOKUP_STOP}
        self.version = ov_adapter.version()
        target_ir, draft_ir = irs()
        self.pipe = ov_adapter.pipeline(self.genai, target_ir, None if method == ov_adapter.LOOKUP else draft_ir,
                                        method)
        self.tokenizer = self.pipe.get_tokenizer()
        self.serving_model = str(target_ir.resolve())
        self.serving_codec = pieces.codec(VOCAB)
        self._next_id = 0
        self.unreported_stops = 0        # requests that ended early with finish_reason NONE (docstring)

    def _decode(self, ids) -> str:
        return self.tokenizer.decode([int(t) for t in ids]) if len(ids) else ""

    def _config(self, r):
        cfg = ov_adapter.base_config(self.genai, VOCAB, int(r.max_tokens))
        cfg.num_assistant_tokens = KAPPA
        if self.method == ov_adapter.LOOKUP:
            cfg.max_ngram_size = ov_adapter.NGRAM
        if r.temperature > 0:
            cfg.do_sample = True
            cfg.temperature = float(r.temperature)
            cfg.top_k = 0
            cfg.top_p = 1.0
        if r.seed is not None:
            cfg.rng_seed = int(r.seed)
        if r.stop:
            cfg.stop_strings = set(r.stop)
            cfg.include_stop_str_in_output = False
        if r.logprobs is not None:
            cfg.logprobs = ONE_LOGPROB
        return cfg

    def complete(self, requests) -> list:
        handles = []
        for r in requests:
            ids = self.ov.Tensor(np.array([list(r.prompt)], np.int64))
            handles.append(self.pipe.add_request(self._next_id, ids, self._config(r)))
            self._next_id += 1
        events = [[] for _ in requests]          # per request: (ids, logprobs, finish reason) of each step
        steps = 0
        while self.pipe.has_non_finished_requests():
            if steps == MAX_STEPS:
                raise AdapterError(f"{self.name}: requests still running after {MAX_STEPS} steps")
            self.pipe.step()
            steps += 1
            for i, (r, h) in enumerate(zip(requests, handles)):
                if r.stream and h.can_read():       # a streamed request: what this step appended
                    events[i] += [_event(out) for out in h.read().values()]
        for r, h, ev in zip(requests, handles, events):
            if not r.stream:                         # the whole answer, read once at the end
                ev += [_event(out) for out in h.read_all()]
        return [self._output(r, h, ev) for r, h, ev in zip(requests, handles, events)]

    def _output(self, r, handle, events):
        events = [e for e in events if e[0] or finish_name(e[2], self.genai)]
        ids = tuple(t for e in events for t in e[0])
        logprobs = tuple(x for e in events for x in e[1])
        finish = finish_name(events[-1][2], self.genai) if events else None
        if finish is None and r.stop and len(ids) < r.max_tokens \
                and handle.get_status() == self.genai.GenerationStatus.FINISHED:
            finish = "stop"       # finished early with no finish reason: only a stop string ends so (docstring)
            self.unreported_stops += 1
        if finish is None:
            raise AdapterError(f"{self.name}: request {r} ended ({handle.get_status()}) without a finish reason "
                               f"({events[-1][2] if events else 'no output read'})")
        asked = r.logprobs is not None
        top = None
        if asked and r.temperature == 0:
            top = tuple({t: lp} if r.logprobs else {} for t, lp in zip(ids, logprobs))
        stepped = [e for e in events if e[0]]
        return ServingOutput(ids, finish, self._decode(ids), logprobs if asked else None, top,
                             completion_tokens=int(handle.get_perf_metrics().get_num_generated_tokens()),
                             deltas=tuple(self._decode(e[0]) for e in stepped) if r.stream else None,
                             delta_ids=tuple(e[0] for e in stepped) if r.stream else None)


def make() -> OpenVINOServing:
    """`openvino-serving`: draft-model speculation."""
    return OpenVINOServing(ov_adapter.DRAFT)


def lookup() -> OpenVINOServing:
    """`openvino-lookup-serving`: prompt lookup."""
    return OpenVINOServing(ov_adapter.LOOKUP)
