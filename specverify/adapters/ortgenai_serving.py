"""ONNX Runtime GenAI's token-by-token Generator with its draft-model speculation at the serving engine
level (capability "serving", `adapters/serving_level.py`): what the Generator gives past its sampler, in
process, without a server -- `specverify audit ortgenai-serving`.

The served model is the tiny random Llama of the other serving adapters (4 tokens, seed 0) with one
special token after the vocabulary ("</s>", id V, a zero head row: the builder needs an EOS), and its
noisy draft (seed 1), both exported by the engine's model builder (`adapters.ortgenai.export`, fp32,
CPU). The target's export is served from a sibling folder `<export>-pieces` (links to its ONNX files and
genai_config.json) whose tokenizer.json is the GGUF's one-character pieces (`models.pieces`, a byte-level
BPE without merges: ids 0..3 are "a".."d") plus "</s>": so the engine's own `Tokenizer` and
`TokenizerStream` make the text and the rows know every id's exact text (serving_codec).

One og.Model (target + the draft's decoder block as `model.draft`, `ortgenai.load`) serves every request;
speculation runs batch 1 in 0.18.0, so the requests of a call run one after another, each its own
Generator:

    prompt      append_tokens(ids)
    sampling    T = 0: do_sample False; else do_sample, temperature T, top_k 0, top_p 1
    length      max_length = len(prompt) + max_tokens; min_length the same, so EOS (the zero head row,
                not a token of the law) is masked on every row (`ortgenai.search_options`): every run
                ends by length
    seed        search option random_seed = seed (mod 2^31); unseeded requests leave it unset
    speculation set_speculative_options(max_draft_tokens=KAPPA, min_adaptive_k=0, cooldown=False): a
                fixed width (an adaptive one makes seeded runs irreproducible, ortgenai_adaptive_k_seed)
    stream      each generate_next_token() is one event: the tokens it appended to the sequence, their
                text from one TokenizerStream (decode per token). Measured: one token a call, kept
                drafts included (the Generator hands a round's tokens out one per call: 48 calls, 25
                verify rounds, 26 kept drafts over 4 requests of 12 tokens)
    text        Tokenizer.decode(ids)

Not declared (SKIPs under not covered, with the API's reason: `serving_skips`): logprobs (none returned:
get_logits() after a speculative round is not each token's row), stop strings (the Generator has none;
its stop is EOS), usage (no count), prefix cache, preemption (one sequence), n > 1. `steps` counts the
kept drafts (get_speculative_stats' draft_tokens_accepted) over every call.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from specverify.errors import AdapterError
from specverify.models import cache, pieces
from specverify.models import tiny as tiny_llama

from . import ortgenai as ort_adapter
from .serving_level import ServingOutput

VOCAB = 4
SEED = 0
DRAFT_SEED = 1
KAPPA = 3                    # max_draft_tokens: drafts a round
EXTRA = 1                    # "</s>" after the vocabulary (the builder needs an EOS)
EOS_PIECE = "</s>"
TARGET_FOLDER = f"serving-target-V{VOCAB}-s{SEED}-x{EXTRA}"
DRAFT_FOLDER = f"serving-draft-V{VOCAB}-s{DRAFT_SEED}-x{EXTRA}"
PIECES_SUFFIX = "-pieces"
MODEL_FILES = ("model.onnx", "model.onnx.data", "genai_config.json")


def model_folders():
    """(target, draft) HF folders of the tiny pair (with "</s>") in the models cache (built once)."""
    root = tiny_llama.root()
    target = tiny_llama.build(root / TARGET_FOLDER, VOCAB, SEED, extra_tokens=EXTRA)
    draft = tiny_llama.build(root / DRAFT_FOLDER, VOCAB, DRAFT_SEED, draft_of=target, extra_tokens=EXTRA)
    return target, draft


def piece_tokenizer(vocab: int):
    """A transformers fast tokenizer of the `vocab` one-character pieces (byte-level BPE, no merges) + "</s>"."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {p: i for i, p in enumerate(pieces.pieces(vocab))}
    words[EOS_PIECE] = vocab
    tok = Tokenizer(models.BPE(vocab=words, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(EOS_PIECE, special=True)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS_PIECE)


def pieces_export(export: Path) -> Path:
    """`<export>-pieces`: links to the export's model files, the piece tokenizer's files (built once)."""
    out = export.with_name(export.name + PIECES_SUFFIX)
    if (out / "tokenizer.json").exists():
        return out
    with cache.atomic_folder(out) as tmp:
        for name in MODEL_FILES:
            if (export / name).exists():
                os.symlink((export / name).resolve(), tmp / name)
        piece_tokenizer(VOCAB).save_pretrained(str(tmp))
    return out


class OrtGenAIServing:
    name = "ortgenai-serving"
    capabilities = {"serving"}
    serving_features = ("text", "seed", "stream")
    serving_skips = {
        "logprobs": "the Generator returns none; get_logits() after a speculative round is the last verify row, not each "
                    "kept token's",
        "stop": "the Generator has no stop strings: its only stop is EOS (masked here by min_length: the tiny model's EOS "
                "is no token of the law)",
        "length.usage": "the Generator reports no token count",
        "prefix_cache": "each request is a Generator of its own: no cache across requests, no cached-token count",
        "preemption": "one Generator decodes one sequence: no KV budget, no preemption count",
    }

    def __init__(self):
        self.og = ort_adapter._og()
        self.version = self.og.__version__
        target, draft = model_folders()
        t_dir = pieces_export(ort_adapter.export(target))
        self.model = ort_adapter.load(t_dir, draft_dir=ort_adapter.export(draft))
        self.tokenizer = self.og.Tokenizer(self.model)
        self.serving_model = str(t_dir.resolve())
        self.serving_codec = pieces.codec(VOCAB)
        self.steps = {"drafted": 0, "accepted": 0, "rounds": 0, "tokens": 0}

    def _one(self, r):
        og = self.og
        n = len(r.prompt) + int(r.max_tokens)
        opts = dict(max_length=n, min_length=n, num_beams=1)
        if r.temperature == 0:
            opts["do_sample"] = False
        else:
            opts.update(do_sample=True, temperature=float(r.temperature), top_k=0, top_p=1.0)
        if r.seed is not None:
            opts["random_seed"] = int(r.seed) % ort_adapter.SEED_MOD
        params = og.GeneratorParams(self.model)
        params.set_search_options(**opts)
        params.set_speculative_options(max_draft_tokens=KAPPA, min_adaptive_k=0, cooldown=False)
        gen = og.Generator(self.model, params)
        gen.append_tokens(np.asarray(r.prompt, dtype=np.int32))
        stream = self.tokenizer.create_stream()
        seen = len(r.prompt)
        events = []
        while not gen.is_done():
            gen.generate_next_token()
            seq = np.asarray(gen.get_sequence(0), dtype=np.int64)
            new = tuple(int(t) for t in seq[seen:])
            seen = len(seq)
            if new:
                events.append((new, "".join(stream.decode(t) for t in new)))
        ids = tuple(t for e in events for t in e[0])
        if len(ids) > r.max_tokens:
            raise AdapterError(f"{self.name}: {len(ids)} tokens for max_length {n} (prompt {len(r.prompt)})")
        stats = gen.get_speculative_stats()
        self.steps["drafted"] += int(stats.get("draft_tokens_proposed", 0))
        self.steps["accepted"] += int(stats.get("draft_tokens_accepted", 0))
        self.steps["rounds"] += int(stats.get("rounds", 0))
        self.steps["tokens"] += len(ids)
        text = self.tokenizer.decode(np.asarray(ids, dtype=np.int32)) if ids else ""
        return ServingOutput(ids, "length", text,
                             deltas=tuple(e[1] for e in events) if r.stream else None,
                             delta_ids=tuple(e[0] for e in events) if r.stream else None)

    def complete(self, requests) -> list:
        return [self._one(r) for r in requests]


def make() -> OrtGenAIServing:
    return OrtGenAIServing()
