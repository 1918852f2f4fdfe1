"""transformers' assisted generation at engine level (capability "engine"): the battery's toy target and
draft run as transformers models, and `generate(..., assistant_model=...)` is a black box.

A toy model (`reference.toy.ToyModel`, a seeded table prefix -> logits) becomes a `PreTrainedModel`
with `GenerationMixin` whose "KV cache" is a real transformers `DynamicCache` holding the token ids
seen so far (one layer, one head, head_dim 1: key = value = token id). forward(input_ids of the new
positions) appends them to the cache and returns the toy's logits (float32, -inf kept) for those
positions given everything in the cache. So the prefix each logit row is conditioned on is exactly
what transformers' cache holds: when assisted generation rolls back rejected drafts
(`cache.crop(...)`, in the target and in the assistant) and the roll-back is wrong, the logits are
conditioned on a prefix that did not happen and the joint law shows it.

    transform     Transform(temperature, top_k, top_p) -> generate(temperature=, top_k=, top_p=);
                  temperature 0 -> do_sample=False (greedy)
    runs          run i: torch.manual_seed(seed + i), prompt -> `length` new tokens, kappa drafts per
                  step (num_assistant_tokens, constant schedule)
    info          {"num_drafted", "num_accepted"}: summed over transformers' own `_speculative_sampling`
                  calls (observed, unchanged); absent for greedy runs

`transformers-lookup` is the same with prompt-lookup decoding (`prompt_lookup_num_tokens=kappa`, n-gram
drafts from the sequence itself; the battery's draft model is not used): transformers then samples
from p at every position and keeps drafts while they equal the samples -- its law is checked the same
way (no draft/accept counts: `_speculative_sampling` is not called).
"""

from __future__ import annotations

import numpy as np

from specverify.reference.torch_toy import as_torch

from . import installed


def toy_lm(toy):
    """A ToyModel as a transformers causal LM with a DynamicCache of token ids."""
    installed.load("transformers", "transformers")
    import torch
    from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
    from transformers.cache_utils import DynamicCache
    from transformers.modeling_outputs import CausalLMOutputWithPast
    OUT_CACHE = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"

    class ToyConfig(PretrainedConfig):
        model_type = "specverify-toy"

        def __init__(self, vocab_size=4, **kw):
            super().__init__(**kw)
            self.vocab_size = vocab_size
            self.num_hidden_layers = self.num_attention_heads = self.num_key_value_heads = 1
            self.hidden_size = self.head_dim = 1

    class ToyLM(PreTrainedModel, GenerationMixin):
        config_class = ToyConfig
        main_input_name = "input_ids"

        def __init__(self, config, toy):
            super().__init__(config)
            self.table = as_torch(toy)
            self.anchor = torch.nn.Parameter(torch.zeros(1))      # a parameter: device/dtype queries

        def forward(self, input_ids=None, attention_mask=None, position_ids=None, cache=None, use_cache=None,
                    **kwargs):
            # transformers 5 names the cache `cache` (4.x: `past_key_values`)
            cache = cache if cache is not None else kwargs.get("past_key_values")
            if cache is None:
                cache = DynamicCache(config=self.config)
            new = input_ids.to(torch.float32)[:, None, :, None]           # [B, 1, n, 1]
            seen, _ = cache.update(new, new, 0)
            ids = seen[:, 0, :, 0].round().long()                         # [B, T]: every token in the cache
            logits = self.table(ids)[:, -input_ids.shape[1]:].float()
            return CausalLMOutputWithPast(logits=logits, **{OUT_CACHE: cache})

    model = ToyLM(ToyConfig(vocab_size=int(toy.vocab_size), pad_token_id=0, eos_token_id=None, bos_token_id=None),
                  toy).eval()
    model.generation_config.pad_token_id = 0
    model.generation_config.eos_token_id = None
    model.generation_config.bos_token_id = None
    return model


class TransformersAssisted:
    name = "transformers-assisted"
    capabilities = {"engine"}
    models = "toy"

    def __init__(self, lookup: bool = False):
        self.lookup = lookup
        if lookup:
            self.name = "transformers-lookup"
        self.utils = installed.load("transformers", "transformers.generation.utils")
        import torch
        self.torch = torch
        torch.set_num_threads(1)          # tiny tensors: intra-op threads only contend
        self.version = installed.engine_version("transformers")
        self._models = {}

    def _lm(self, toy):
        key = id(toy)
        if key not in self._models:
            self._models[key] = (toy, toy_lm(toy))
        return self._models[key][1]

    def generate(self, target, draft, prompt, kappa, transform, seed, n, length):
        torch = self.torch
        utils = self.utils
        t_lm = self._lm(target)
        if self.lookup:                       # prompt lookup: n-gram drafts from the sequence, no draft model
            spec = dict(prompt_lookup_num_tokens=int(kappa))
        else:
            d_lm = self._lm(draft) if draft is not target else toy_lm(target)   # a second instance: own cache
            spec = dict(assistant_model=d_lm, num_assistant_tokens=int(kappa),
                        num_assistant_tokens_schedule="constant")
        greedy = transform.temperature == 0
        sample_args = {} if greedy else dict(temperature=transform.temperature, top_k=transform.top_k or None,
                                             top_p=transform.top_p if transform.top_p not in (None, 1.0) else None)
        real, counts = utils._speculative_sampling, [0, 0]

        def observed(cand_ids, cand_logits, cand_len, new_logits, *a, **k):
            tokens, n_matches = real(cand_ids, cand_logits, cand_len, new_logits, *a, **k)
            counts[0] += int(cand_len)
            counts[1] += int(n_matches)
            return tokens, n_matches

        ids = torch.tensor([list(prompt)], dtype=torch.long)
        out = np.empty((n, length), np.int64)
        utils._speculative_sampling = observed
        try:
            for i in range(n):
                torch.manual_seed(int(seed) + i)
                res = t_lm.generate(ids, do_sample=not greedy, max_new_tokens=length, min_new_tokens=length,
                                    attention_mask=torch.ones_like(ids), **spec, **sample_args)
                out[i] = res[0, len(prompt):].numpy()
        finally:
            utils._speculative_sampling = real
        # prompt lookup never calls _speculative_sampling (it samples from p and compares): no counts
        info = {} if greedy or self.lookup else {"num_drafted": counts[0], "num_accepted": counts[1]}
        return out, info


def make():
    return TransformersAssisted()


def lookup():
    return TransformersAssisted(lookup=True)
