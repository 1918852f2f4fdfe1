"""llama-cpp-python's completion API at the serving engine level (capability "serving",
`adapters/serving_level.py`): what `Llama.create_completion` returns past its sampler, in process,
without a server -- `specverify audit llamacpp-serving`.

The served model is the tiny random Llama of `specverify models write tiny-llama DEST --vocab 4 --seed 0
--format gguf` (`models.tiny.build`, exported by `models.gguf.export(folder, text=True)`): f32 weights,
4 tokens whose text is one character each ("a".."d", `models.pieces`), no BOS, no EOS. The adapter
names it by its GGUF path (serving_model) and gives the rows its pieces (serving_codec), so every id
has an exact text and every text an exact id sequence. One `Llama` serves every request, as a server
keeps one engine: `n_ctx` N_CTX, an f32 KV cache (type_k = type_v = F32: the f16 default moves logits
by ~1e-4), `logits_all` (forced on by a draft model anyway), and llama-cpp-python's own prompt-lookup
speculation `LlamaPromptLookupDecoding(max_ngram_size=NGRAM, num_pred_tokens=KAPPA)` as `draft_model`
(llama_cpp/llama_speculative.py): `generate` evaluates the drafts in one batch and keeps them while its
sampler's draw equals them (sample-match), so accepted runs of several tokens do occur.

Each request is one `create_completion` call, in order (a `Llama` decodes one sequence at a time):

    prompt      the token ids (the completion API takes a list of ints in process; no BOS is added:
                the GGUF says add_bos = false)
    sampling    temperature (0: llama.cpp's greedy sampler) with NEUTRAL (top_p 1, top_k 0, min_p 0,
                typical_p 1, repeat_penalty 1, no penalties), as `specverify serve-audit llamacpp` sends
                them: llama-cpp-python's defaults (top_k 40, top_p 0.95, min_p 0.05, repeat_penalty 1.1)
                are not OpenAI's
    seed        `seed=` of the call (`Llama.set_seed`, then a fresh sampler chain); unseeded requests get
                llama-cpp-python's own stream (a draw from random.Random(the previous seed))
    stop        `stop=` strings, matched on the detokenised bytes after each token
    logprobs    always asked (k = the request's, else 0): the returned `logprobs.tokens` are the only
                place the completion API names the tokens it kept, read back to ids through the pieces;
                a token's logprob is llama-cpp-python's log-softmax of the raw float32 logits row it was
                sampled from (`Llama.logits_to_logprobs`); top entries by piece -> id. Reported only
                when the request asked for them
    usage       `usage.completion_tokens` (non-streamed responses; the stream carries no usage)
    stream      `stream=True`: every chunk with text or a token is one event (its text the delta, the
                ids its `logprobs.tokens`, or its text's pieces where it has none); the last chunk's
                finish_reason

Not declared (SKIPs under not covered): a prefix cache with a count of the prompt tokens it served
(llama-cpp-python reuses the previous call's KV prefix, but reports nothing of it; `cached_tokens`
unknown), preemption (one sequence, no KV budget), n > 1 (the engine-level protocol has none).
The logprobs are float32 (serving_float64_logprobs False: compared within checks.serving.LOGPROB_ATOL).
"""

from __future__ import annotations

from specverify import installed
from specverify.models import gguf, pieces
from specverify.models import tiny as tiny_llama

VOCAB = 4
SEED = 0
KAPPA = 4                    # num_pred_tokens: drafts a step (the server report's lookup:4)
NGRAM = 2                    # LlamaPromptLookupDecoding's default max_ngram_size
N_CTX = 128                  # the tiny model's max positions; the rows use under 32
F32 = 0                      # GGML_TYPE_F32 for type_k / type_v
NEUTRAL = dict(top_p=1.0, top_k=0, min_p=0.0, typical_p=1.0, repeat_penalty=1.0, frequency_penalty=0.0,
               presence_penalty=0.0)
FOLDER = f"serving-target-V{VOCAB}-s{SEED}"   # its own cache folder: the text GGUF is written beside the weights


def model_path():
    """The tiny Llama's text-vocabulary GGUF (built and exported once, in the models cache)."""
    folder = tiny_llama.build(tiny_llama.root() / FOLDER, VOCAB, SEED)
    return gguf.export(folder, text=True)


class LlamaCppServing:
    name = "llamacpp-serving"
    capabilities = {"serving"}
    serving_features = ("logprobs", "text", "stop", "seed", "usage", "stream")
    serving_float64_logprobs = False      # llama.cpp's logits rows are float32

    def __init__(self):
        llama_cpp = installed.load("llamacpp", "llama_cpp")
        spec = installed.load("llamacpp", "llama_cpp.llama_speculative")
        self.version = installed.version("llama_cpp_python") or "unknown"
        path = model_path()
        self.serving_model = str(path.resolve())
        self.serving_codec = pieces.codec(VOCAB)
        self.llm = llama_cpp.Llama(str(path), n_ctx=N_CTX, n_threads=1, n_threads_batch=1, logits_all=True,
                                   type_k=F32, type_v=F32, seed=0, verbose=False,
                                   draft_model=spec.LlamaPromptLookupDecoding(max_ngram_size=NGRAM,
                                                                             num_pred_tokens=KAPPA))

    def _ids(self, tokens) -> tuple:
        """Token texts (logprobs.tokens) -> ids through the pieces (one character a token)."""
        return self.serving_codec.decode("".join(tokens))

    def _top(self, entries) -> tuple:
        codec = self.serving_codec
        return tuple({codec.decode(k)[0]: float(v) for k, v in (e or {}).items() if k} for e in entries)

    def _plain(self, r, res):
        from .serving_level import ServingOutput
        c = res["choices"][0]
        lp = c["logprobs"]
        ids = self._ids(lp["tokens"])
        asked = r.logprobs is not None
        return ServingOutput(ids, c["finish_reason"], c["text"],
                             tuple(float(x) for x in lp["token_logprobs"]) if asked else None,
                             self._top(lp["top_logprobs"]) if asked else None,
                             completion_tokens=int(res["usage"]["completion_tokens"]))

    def _streamed(self, r, chunks):
        from .serving_level import ServingOutput
        deltas, delta_ids, logprobs, top, finish = [], [], [], [], None
        for chunk in chunks:
            c = chunk["choices"][0]
            finish = c.get("finish_reason") or finish
            lp = c.get("logprobs")
            if not c["text"] and not (lp and lp.get("tokens")):
                continue
            deltas.append(c["text"])
            delta_ids.append(self._ids(lp["tokens"]) if lp else self.serving_codec.decode(c["text"]))
            if lp:
                logprobs += [float(x) for x in lp["token_logprobs"]]
                top += list(self._top(lp["top_logprobs"]))
        ids = tuple(t for d in delta_ids for t in d)
        asked = r.logprobs is not None
        return ServingOutput(ids, finish, "".join(deltas), tuple(logprobs) if asked else None,
                             tuple(top) if asked else None, deltas=tuple(deltas), delta_ids=tuple(delta_ids))

    def complete(self, requests) -> list:
        out = []
        for r in requests:
            res = self.llm.create_completion(list(r.prompt), max_tokens=int(r.max_tokens),
                                             temperature=float(r.temperature), seed=r.seed,
                                             stop=list(r.stop) or None,
                                             logprobs=int(r.logprobs) if r.logprobs is not None else 0,
                                             stream=bool(r.stream), **NEUTRAL)
            out.append(self._streamed(r, res) if r.stream else self._plain(r, res))
        return out


def make() -> LlamaCppServing:
    return LlamaCppServing()
