"""OpenVINO GenAI 2026.4.1: with a draft model, a seeded sampling run depends on the batch it runs in --
the same GenerationConfig (same rng_seed) gives other tokens in a batched call than alone.

OpenVINO seeds one std::mt19937 per request from GenerationConfig.rng_seed, so a request's tokens should
depend only on its seed. Plain sampling is reproducible call for call and batch for batch; with
`draft_model=` runs differ between a batched call and single-request calls with the same seeds, and
sometimes between two identical single-request calls. (Same tiny models and f32 settings as
openvino_draft_law.py; 6 new tokens, temperature 1; prefix caching off.) Captured (2 cores, 4.6 min):

    plain        : 0 of 300 seeded runs differ between two identical calls, 0 between single and batched calls
    draft model  : 0 of 300 seeded runs differ between two identical calls, 113 between single and batched calls

With another pair of tiny models (specverify's adapter, V=4 seed 11): 6 of 300 between single and batched
calls and 5 of 300 between two identical calls; prompt lookup 0 and 0.
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
V, PROMPT, RUNS, KAPPA = 4, [1], 300, 2
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
ids = ov.Tensor(np.array([PROMPT], np.int64))


def config(seed, method):
    c = genai.GenerationConfig()
    c.max_new_tokens, c.ignore_eos, c.eos_token_id, c.stop_token_ids = 6, True, V, {V}
    c.do_sample, c.temperature, c.top_k, c.top_p, c.rng_seed = True, 1.0, 0, 1.0, seed
    if method != "plain":
        c.num_assistant_tokens = KAPPA
    if method == "prompt lookup":
        c.max_ngram_size = 2
    return c


sched = genai.SchedulerConfig()
sched.enable_prefix_caching = False
for method, props in (("plain", {}), ("draft model", {"draft_model": genai.draft_model(d_ir, "CPU", **F32)})):
    pipe = genai.ContinuousBatchingPipeline(t_ir, sched, "CPU", {**F32, **props})
    runs = lambda: [tuple(pipe.generate([ids], [config(i, method)])[0].m_generation_ids[0]) for i in range(RUNS)]
    first, second = runs(), runs()
    batched = [tuple(r.m_generation_ids[0]) for r in pipe.generate([ids] * RUNS, [config(i, method) for i in range(RUNS)])]
    diff = [i for i in range(RUNS) if first[i] != second[i]]
    print(f"{method:13s}: {len(diff)} of {RUNS} seeded runs differ between two identical calls, "
          f"{sum(a != b for a, b in zip(first, batched))} between single and batched calls"
          + (f"; e.g. rng_seed {diff[0]}: {list(first[diff[0]])} then {list(second[diff[0]])}" if diff else ""))
