"""OpenVINO GenAI 2026.4.1: with a draft model, min_p does not hold -- tokens that min_p removes from the
target's distribution are emitted.

GenerationConfig.min_p = m keeps the tokens with p >= m * max(p) (MinPFilter, after temperature and
top-k). Plain sampling and prompt lookup honour it (specverify's audit passes both). With
`draft_model=`, a drafted token x is accepted by a test that never reads the target's probability of x
(sampler.cpp `validate_candidate`: r <= q(x) / p(y), y a fresh target sample, r in {0, 0.01, ..., 1}),
so an x the target's min_p removed is accepted whenever the draft proposes it. This script counts, over
runs of 4 tokens from prompt [1, 2], the emitted tokens whose min_p-filtered target probability (float64
forward of the same weights, on the emitted prefix) is 0. Same models and f32 settings as
openvino_draft_law.py; vocabulary 5. About 2 minutes on 2 cores.
"""
import json
import os
import tempfile
from collections import Counter

import numpy as np
import openvino as ov
import openvino_genai as genai
import torch
from openvino_tokenizers import convert_tokenizer
from optimum.intel import OVModelForCausalLM
from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from transformers.utils import logging

logging.set_verbosity_error()
print("openvino", ov.__version__, "openvino_genai", genai.__version__)
V, PROMPT, RUNS, KAPPA, MIN_P = 5, [1, 2], 1000, 2, 0.2
F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
root = tempfile.mkdtemp(prefix="ov-repro-")


def llama(seed, base=None):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None)
    m = LlamaForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for (name, p), q in zip(m.named_parameters(), [None] * 99 if base is None else base.parameters()):
            if base is not None:
                p.copy_(q + 0.5 * float(q.std()) * torch.randn(p.shape))
            elif "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape))
            else:
                p.copy_(torch.randn(p.shape) / np.sqrt(p.shape[-1]))
        if base is None:
            m.lm_head.weight *= 3.0
    return m


def export(model, name):
    hf, ir = os.path.join(root, name + "-hf"), os.path.join(root, name)
    model.save_pretrained(hf)
    OVModelForCausalLM.from_pretrained(hf, export=True, compile=False, load_in_8bit=False).save_pretrained(ir)
    words = {f"t{i}": i for i in range(V)}
    words["</s>"] = V
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens([AddedToken("</s>", special=True)])
    enc, dec = convert_tokenizer(PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>"), with_detokenizer=True)
    ov.save_model(enc, os.path.join(ir, "openvino_tokenizer.xml"))
    ov.save_model(dec, os.path.join(ir, "openvino_detokenizer.xml"))
    with open(os.path.join(ir, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": V}, f)
    return ir


target, = [llama(0)]
draft = llama(1, base=target)
t_ir, d_ir = export(target, "target"), export(draft, "draft")
target = llama(0)
draft = llama(1, base=target)
t_ir, d_ir = export(target, "target"), export(draft, "draft")
t64 = target.double()


def allowed(prefix):
    """The tokens min_p keeps after `prefix` (float64 forward)."""
    with torch.no_grad():
        p = torch.softmax(t64(torch.tensor([prefix])).logits[0, -1], -1).numpy()
    return p >= MIN_P * p.max()


def config(seed):
    c = genai.GenerationConfig()
    c.max_new_tokens, c.ignore_eos, c.eos_token_id, c.stop_token_ids = 4, True, V, {V}
    c.do_sample, c.temperature, c.top_k, c.top_p, c.rng_seed, c.min_p = True, 1.0, 0, 1.0, seed, MIN_P
    return c


ids = ov.Tensor(np.array([PROMPT], np.int64))
sched = genai.SchedulerConfig()
sched.enable_prefix_caching = False
plain = genai.LLMPipeline(t_ir, "CPU", scheduler_config=sched, **F32)
spec = genai.LLMPipeline(t_ir, "CPU", draft_model=genai.draft_model(d_ir, "CPU", **F32), scheduler_config=sched, **F32)
memo = {}
for label, pipe in (("plain", plain), ("draft model", spec)):
    bad = total = 0
    example = None
    for i in range(RUNS):
        cfg = config(i)
        if pipe is spec:
            cfg.num_assistant_tokens = KAPPA
        out = list(pipe.generate(ids, cfg).tokens[0])
        for j, x in enumerate(out):
            prefix = tuple(PROMPT + out[:j])
            if prefix not in memo:
                memo[prefix] = allowed(list(prefix))
            total += 1
            if not memo[prefix][x]:
                bad += 1
                example = example or (list(prefix), x, np.flatnonzero(memo[prefix]).tolist())
    print(f"{label:12s}: {bad} of {total} emitted tokens are removed by min_p={MIN_P} on their prefix"
          + (f"; e.g. after {example[0]} token {example[1]} (min_p keeps {example[2]})" if example else ""))
