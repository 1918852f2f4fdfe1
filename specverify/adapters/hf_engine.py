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
                  step. The draft length is the *assistant's* generation config, not generate()'s
                  (`AssistedCandidateGenerator.__init__` reads num_assistant_tokens,
                  num_assistant_tokens_schedule and assistant_confidence_threshold from
                  `assistant_model.generation_config`; generate(num_assistant_tokens=...) only sets the
                  target's, which the candidate generator never reads). Unset there, transformers drafts
                  up to 20 tokens a step and stops a step's drafting at the first draft whose probability
                  is below 0.4 (`ConfidenceCriteria`; with scikit-learn installed that threshold is also
                  re-fitted after every step). The adapter sets on the assistant num_assistant_tokens=kappa,
                  the "constant" schedule and assistant_confidence_threshold=0 (off), so each step drafts
                  min(kappa, tokens left - 1) (`_calculate_new_tokens`): `draft_schedule = "tokens-left"`
    info          {"num_drafted", "num_accepted", "num_verifies", "verify_counts"}: from transformers' own
                  `update_candidate_strategy(input_ids, scores, num_matches)` calls (observed, unchanged):
                  each verify step's drafted (scores' positions - 1) and accepted (num_matches), totals and
                  each run's (drafted, accepted) per verify step, for sampled and greedy runs alike

`transformers-lookup` is the same with prompt-lookup decoding (`prompt_lookup_num_tokens=kappa`, n-gram
drafts from the sequence itself; the battery's draft model is not used): transformers then samples
from p at every position and keeps drafts while they equal the samples (`_assisted_decoding`, the
branch where candidate_logits is None: `verify_rule = "sample-match"`); its output law is checked the
same way. Its drafts are `PromptLookupCandidateGenerator.get_candidates`' span
(`span_drafter = reference.span_drafters.HFPromptLookupSpan(2)`, max_matching_ngram_size unset = 2), not
capped by the tokens left: a step verifies the whole span, then cuts the kept tokens to the budget
(`tokens_budget` in `_assisted_decoding`) and passes num_matches = kept - 1 to
`update_candidate_strategy`. The accepted count of a step with T tokens left is therefore
min(accepted, T - 1), which is the law of the span cut to T - 1 drafts (the drafts after it decide
nothing that is kept), and with one token left it drafts nothing (max_length == input length + 1): the
`tokens-left` schedule. Per-step counts come from the same `update_candidate_strategy` calls as the
assisted adapter's, each step's drafted reported as min(span, T - 1) (the drafts whose verdict counts).
No counts with processors (`generate(processors=...)`): its rule then also cuts spans at masked tokens,
which the declared rule does not model.

Logits processors (`processors`, `reference.processors`), each mapped to transformers' own generate
argument; transformers applies them to every target row with `candidate_input_ids[:, :cur_len + i]`
(prompt + output + drafts 0..i-1) and to the assistant's rows in its own generate (utils.py
`_assisted_decoding`, `_get_logits_processor`):

    repetition_penalty  repetition_penalty=r: RepetitionPenaltyLogitsProcessor over input_ids
                        (prompt + output), each token once, score < 0 -> * r, else / r: the HF/CTRL
                        form of the reference, stage 1 (its default list puts it first among ours)
    logit_bias          logits_processor=[SequenceBiasLogitsProcessor({(t,): b})]: one-token sequence
                        biases. Not the `sequence_bias=` flag: that one is put *before* the repetition
                        penalty (stage 3 must come after stage 1); a custom processor is appended after
                        the default ones and before the warpers (`_merge_criteria_processor_list`),
                        and a bias commutes with the -inf masks of stages 4-6
    banned_tokens       bad_words_ids=[[t], ...] (NoBadWordsLogitsProcessor, -inf everywhere), except a
    banned_sequences    banned token that is also a stop token: NoBadWordsLogitsProcessor drops those
                        from its list, so they go by suppress_tokens= (SuppressTokensLogitsProcessor);
                        sequences: bad_words_ids=[[s_1, ..., s_k]], matched on the end of prompt + output
    min_tokens          min_new_tokens=n (MinNewTokensLengthLogitsProcessor: the stop ids -inf while
                        fewer than n new tokens); without stop tokens it masks nothing, as in the reference
    grammar             prefix_allowed_tokens_fn: the DFA state of input_ids after the prompt (the
                        reference's "state after out"). transformers differs only where no allowed
                        token has a finite logit (it then allows them at score 0; the reference raises):
                        the battery's processor models have no zero entries, so this never arises
    stop_tokens         eos_token_id=[...]: the run ends at the first one (accepted drafts after it are
                        cut, `_assisted_decoding`); the row is PAD (-1) after it
    min_p               min_p=m (MinPLogitsWarper after temperature / top-k / top-p, on their softmax:
                        the reference's stage 8); a warper, so greedy runs ignore it (one-hot: the same)

Not declared: frequency_penalty and presence_penalty (transformers has no OpenAI-form penalties over
output tokens). transformers' `no_repeat_ngram_size` has no reference equivalent (it bans n-grams
already in the sequence, not fixed sequences) and is not used.
"""

from __future__ import annotations

import numpy as np

from specverify import installed
from specverify.reference.acceptance import SAMPLE_MATCH
from specverify.reference.batch import PAD
from specverify.reference.span_drafters import HFPromptLookupSpan
from specverify.reference.torch_toy import as_torch


def toy_lm(toy, dtype=None):
    """A ToyModel as a transformers causal LM with a DynamicCache of token ids; its logits float32, or
    `dtype` (torch.float64: the toy's own rows, bit for bit)."""
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
            logits = self.table(ids)[:, -input_ids.shape[1]:]
            logits = logits.float() if dtype is None else logits.to(dtype)
            return CausalLMOutputWithPast(logits=logits, **{OUT_CACHE: cache})

    model = ToyLM(ToyConfig(vocab_size=int(toy.vocab_size), pad_token_id=0, eos_token_id=None, bos_token_id=None),
                  toy).eval()
    model.generation_config.pad_token_id = 0
    model.generation_config.eos_token_id = None
    model.generation_config.bos_token_id = None
    return model


LOOKUP_NGRAM = 2        # transformers' max_matching_ngram_size when unset (`_get_candidate_generator`)


class TransformersAssisted:
    name = "transformers-assisted"
    capabilities = {"engine"}
    # every step, the first included, drafts min(kappa, tokens left - 1), with the assistant's generation config
    # set as the module docstring says (unset, transformers drafts up to 20 a step and stops at a draft of
    # probability < 0.4: a 3-draft step at num_assistant_tokens=2, docs/acceptance.md "transformers")
    draft_schedule = "tokens-left"
    models = "toy"
    # the reference's processors transformers implements exactly (module docstring: how each is mapped)
    processors = {"repetition_penalty", "logit_bias", "banned_tokens", "banned_sequences", "min_tokens", "grammar",
                  "stop_tokens", "min_p"}

    def __init__(self, lookup: bool = False):
        self.lookup = lookup
        if lookup:
            self.name = "transformers-lookup"
            self.span_drafter = HFPromptLookupSpan(LOOKUP_NGRAM)      # module docstring
            self.verify_rule = SAMPLE_MATCH
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

    def generate(self, target, draft, prompt, kappa, transform, seed, n, length, processors=None):
        torch = self.torch
        t_lm = self._lm(target)
        if self.lookup:                       # prompt lookup: n-gram drafts from the sequence, no draft model
            spec = dict(prompt_lookup_num_tokens=int(kappa))
        else:
            d_lm = self._lm(draft) if draft is not target else toy_lm(target)   # a second instance: own cache
            assistant_config(d_lm, kappa)
            spec = dict(assistant_model=d_lm)
        greedy = transform.temperature == 0
        sample_args = {} if greedy else dict(temperature=transform.temperature, top_k=transform.top_k or None,
                                             top_p=transform.top_p if transform.top_p not in (None, 1.0) else None)
        proc_args = generate_kwargs(processors, len(prompt), length)
        generators = installed.load("transformers", "transformers.generation.candidate_generator")
        generator_cls = (generators.PromptLookupCandidateGenerator if self.lookup
                         else generators.AssistedCandidateGenerator)
        real = generator_cls.update_candidate_strategy
        traces: list = [[] for _ in range(n)]      # per run: (drafted, accepted) of each verify step
        run = [0]

        def observed(self, input_ids, scores, num_matches):
            drafted = int(scores.shape[1]) - 1    # scores: the target's rows, one per draft + the bonus
            if drafted:
                # tokens left before the step: input_ids holds the kept tokens already (num_matches + 1)
                left = length - (int(input_ids.shape[1]) - len(prompt) - int(num_matches) - 1)
                traces[run[0]].append((min(drafted, left - 1), int(num_matches)))
            return real(self, input_ids, scores, num_matches)

        ids = torch.tensor([list(prompt)], dtype=torch.long)
        out = np.empty((n, length), np.int64)
        counting = not (self.lookup and processors is not None)
        if counting:
            generator_cls.update_candidate_strategy = observed
        try:
            for i in range(n):
                run[0] = i
                torch.manual_seed(int(seed) + i)
                res = t_lm.generate(ids, do_sample=not greedy, max_new_tokens=length,
                                    attention_mask=torch.ones_like(ids), **spec, **sample_args, **proc_args)
                row = res[0, len(prompt):].numpy()
                out[i] = PAD                  # a run that stopped early: PAD after its last token
                out[i, :len(row)] = row       # (tokens after a stop token, if any, are kept: the checks see them)
        finally:
            generator_cls.update_candidate_strategy = real
        if not counting:      # module docstring: the declared rule does not model processors' cuts
            return out, {}
        info = {"num_drafted": sum(k for t in traces for k, _ in t), "num_accepted": sum(m for t in traces for _, m in t),
                "num_verifies": sum(len(t) for t in traces), "verify_counts": traces}
        return out, info


def assistant_config(assistant, kappa: int) -> None:
    """kappa drafts every step: the assistant's own generation config is what assisted generation reads
    (module docstring); the confidence stop (threshold 0.4 when unset) off."""
    config = assistant.generation_config
    config.num_assistant_tokens = int(kappa)
    config.num_assistant_tokens_schedule = "constant"
    config.assistant_confidence_threshold = 0.0


def generate_kwargs(settings, prompt_len: int, length: int) -> dict:
    """transformers generate kwargs for the processors in `settings` (reference.processors.Processors),
    as the module docstring maps them; with none, min_new_tokens=length (no stop id: runs of `length`)."""
    if settings is None:
        return {"min_new_tokens": length}
    from transformers import LogitsProcessorList, SequenceBiasLogitsProcessor
    s, kw = settings, {}
    if s.repetition_penalty != 1.0:
        kw["repetition_penalty"] = s.repetition_penalty
    if s.logit_bias:
        kw["logits_processor"] = LogitsProcessorList([SequenceBiasLogitsProcessor({(t,): b for t, b in s.logit_bias})])
    singles = list(s.banned_tokens) + [q[0] for q in s.banned_sequences if len(q) == 1]
    suppress = sorted({t for t in singles if t in s.stop_tokens})
    bad = ([[t] for t in dict.fromkeys(singles) if t not in suppress]
           + [list(q) for q in s.banned_sequences if len(q) > 1])
    if bad:
        kw["bad_words_ids"] = bad
    if suppress:
        kw["suppress_tokens"] = suppress
    if s.stop_tokens:
        kw["eos_token_id"] = list(s.stop_tokens)
        if s.min_tokens:
            kw["min_new_tokens"] = s.min_tokens
    else:
        kw["min_new_tokens"] = length
    if s.min_p:
        kw["min_p"] = s.min_p
    if s.grammar is not None:
        grammar = s.grammar

        def allowed(batch_id, input_ids):
            """The tokens the DFA state of the output so far (input_ids after the prompt) allows."""
            state = grammar.state(input_ids[prompt_len:].tolist())
            return np.flatnonzero(grammar.allowed(state)).tolist()
        kw["prefix_allowed_tokens_fn"] = allowed
    return kw


class TransformersAssistedLlama(TransformersAssisted):
    """The same audit on real models with real KV caches: tiny random Llamas (`tiny_llama`,
    `models = "own"`) loaded by transformers as LlamaForCausalLM in float32; the laws come from their
    float64 forward. A rejected draft is rolled back in a real `DynamicCache` of keys and values here,
    not in a cache of token ids."""

    models = "own"
    # a real forward per token: ~30 ms a run of 8 tokens, 2000 runs a row
    audit_defaults = {"samples": 5000, "timeout": 1800.0}

    def __init__(self, lookup: bool = False):
        super().__init__(lookup)
        self.name += "-llama"

    def own_models(self, vocab: int, seed: int):
        from specverify.models import tiny as tiny_llama
        return tiny_llama.pair_folders(None, vocab, seed)

    def _lm(self, model):
        key = (str(model.handle), isinstance(model, _Second))
        if key not in self._models:
            from transformers import LlamaForCausalLM
            lm = LlamaForCausalLM.from_pretrained(str(model.handle), dtype=self.torch.float32,
                                                  attn_implementation="eager").eval()
            lm.generation_config.eos_token_id = lm.generation_config.bos_token_id = None
            lm.generation_config.pad_token_id = 0
            self._models[key] = lm
        return self._models[key]

    def generate(self, target, draft, prompt, kappa, transform, seed, n, length, processors=None):
        if draft is target:                   # the identity draft: a second instance with its own cache
            draft = _Second(target)
        return super().generate(target, draft, prompt, kappa, transform, seed, n, length, processors)


class _Second:
    """The target's folder as a separate model instance (the assistant of the identity rows)."""

    def __init__(self, model):
        self.handle, self.vocab_size = model.handle, model.vocab_size


def make():
    return TransformersAssisted()


def llama():
    return TransformersAssistedLlama()


def lookup_llama():
    return TransformersAssistedLlama(lookup=True)


def lookup():
    return TransformersAssisted(lookup=True)
