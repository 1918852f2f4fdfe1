"""MLX-LM's `stream_generate` with a draft model at the serving engine level (capability "serving",
`adapters/serving_level.py`): what MLX-LM returns past its sampler, in process, without a server --
`specverify audit mlx-serving`.

The served model is the tiny random Llama the llamacpp-serving adapter serves (`models.tiny.build`, 4
tokens, seed 0, the models cache's `serving-target-V4-s0`) and its own noisy draft (`draft_of`, seed 1),
each converted by `mlx_lm.convert(..., dtype="float32")` (`adapters.mlx.export`; every parameter checked
float32 on load). The text side is the GGUF's pieces (`models.pieces`: ids 0..3 are "a".."d", one
character a token): the adapter hands MLX-LM a `TokenizerWrapper` over a transformers fast tokenizer of
those pieces (WordLevel, a piece a token, the Fuse decoder: ids -> their characters, nothing between),
so MLX-LM's own streaming detokenizer produces the text and the rows know every id's exact text
(serving_codec). No EOS: eos_token_ids is empty.

Each request is one `stream_generate(model, tokenizer, prompt_ids, draft_model=draft,
num_draft_tokens=KAPPA, sampler=make_sampler(temp=T), max_tokens=N)` call, in order (MLX-LM's
speculative decoding takes one sequence at a time: `speculative_generate_step`):

    prompt      the ids as a list (no tokenizer involved)
    sampling    make_sampler(temp=T) (T = 0: argmax); nothing else (top_k / top_p are not at this level)
    seed        mx.random.seed(seed) right before the call (MLX's global key: MLX-LM has no generator
                per request); an unseeded request draws on from wherever the global key is
    logprobs    each response's `logprobs` vector: the log-softmax of the target's float32 row the token
                was decided from (after logits processors -- none here -- before the sampler's
                temperature); the token's entry, and the top k entries of the vector
    text        the concatenation of the responses' `text` segments (MLX-LM's detokenizer)
    finish      the last response's finish_reason ("length"; "stop" only at an EOS, and there is none)
    usage       the last response's generation_tokens (MLX-LM's count of the tokens it generated)
    stream      every response is one event: its text segment, its one token (stream_generate yields a
                token at a time, the kept drafts of a step included)

Not declared (SKIPs under not covered): stop strings (stream_generate has none; mlx_lm.server matches
them itself, over the text), a prefix cache with a count of cached prompt tokens (stream_generate builds
a fresh KV cache per call unless the caller passes prompt_cache; it reports no count), preemption (one
sequence, no KV budget), n > 1 (the protocol has none). The logprobs are float32
(serving_float64_logprobs False: compared with the engine's own teacher-forced ones within
checks.serving.LOGPROB_ATOL).
"""

from __future__ import annotations

import numpy as np

from specverify.models import pieces
from specverify.models import tiny as tiny_llama

from .serving_level import ServingOutput

VOCAB = 4
SEED = 0
DRAFT_SEED = 1
KAPPA = 3                    # num_draft_tokens: drafts a step
TARGET_FOLDER = f"serving-target-V{VOCAB}-s{SEED}"        # the llamacpp-serving adapter's model
DRAFT_FOLDER = f"serving-draft-V{VOCAB}-s{DRAFT_SEED}"


def model_folders():
    """(target, draft) HF folders of the tiny pair in the models cache (built once)."""
    root = tiny_llama.root()
    target = tiny_llama.build(root / TARGET_FOLDER, VOCAB, SEED)
    draft = tiny_llama.build(root / DRAFT_FOLDER, VOCAB, DRAFT_SEED, draft_of=target)
    return target, draft


def piece_tokenizer(codec, wrapper_class):
    """An MLX-LM TokenizerWrapper whose ids are the codec's pieces (decode: the characters, joined)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {p: i for i, p in enumerate(codec.pieces)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=codec.pieces[0]))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.decoder = decoders.Fuse()
    return wrapper_class(PreTrainedTokenizerFast(tokenizer_object=tok), eos_token_ids=[])


class MlxServing:
    name = "mlx-serving"
    capabilities = {"serving"}
    serving_features = ("logprobs", "text", "seed", "usage", "stream")
    serving_float64_logprobs = False      # MLX-LM's rows are float32

    def __init__(self):
        from . import mlx as mlx_adapter
        self.mx, _, self.gen, self.sample_utils = mlx_adapter._modules()
        import importlib
        tokenizer_utils = importlib.import_module("mlx_lm.tokenizer_utils")
        self.version = mlx_adapter.version()
        target, draft = model_folders()
        target_mlx = mlx_adapter.export(target)
        self.model, _ = mlx_adapter.load(target_mlx)
        self.draft, _ = mlx_adapter.load(mlx_adapter.export(draft))
        self.serving_model = str(target_mlx.resolve())
        self.serving_codec = pieces.codec(VOCAB)
        self.tokenizer = piece_tokenizer(self.serving_codec, tokenizer_utils.TokenizerWrapper)
        self.steps = {"drafted_kept": 0, "tokens": 0}     # kept drafts and tokens over every call

    def _one(self, r):
        mx = self.mx
        if r.seed is not None:
            mx.random.seed(int(r.seed))
        sampler = self.sample_utils.make_sampler(temp=float(r.temperature))
        ids, texts, logprobs, top, finish, count = [], [], [], [], None, None
        for resp in self.gen.stream_generate(self.model, self.tokenizer, [int(t) for t in r.prompt],
                                             max_tokens=int(r.max_tokens), draft_model=self.draft,
                                             num_draft_tokens=KAPPA, sampler=sampler):
            row = np.array(resp.logprobs.astype(mx.float32)).reshape(-1)     # (V,) the token's row
            t = int(resp.token)
            ids.append(t)
            texts.append(resp.text)
            logprobs.append(float(row[t]))
            if r.logprobs is not None:
                order = np.argsort(-row, kind="stable")[:int(r.logprobs)]
                top.append({int(j): float(row[j]) for j in order})
            self.steps["drafted_kept"] += bool(resp.from_draft)
            finish, count = resp.finish_reason, resp.generation_tokens
        asked = r.logprobs is not None
        return ServingOutput(tuple(ids), finish or "length", "".join(texts), tuple(logprobs) if asked else None,
                             tuple(top) if asked else None, completion_tokens=count,
                             deltas=tuple(texts) if r.stream else None,
                             delta_ids=tuple((t,) for t in ids) if r.stream else None)

    def complete(self, requests) -> list:
        out = [self._one(r) for r in requests]
        self.steps["tokens"] += sum(len(o.ids) for o in out)
        return out


def make() -> MlxServing:
    return MlxServing()
