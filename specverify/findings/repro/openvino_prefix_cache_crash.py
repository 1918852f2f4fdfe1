"""OpenVINO GenAI 2026.4.1: `LLMPipeline` with a draft model and its default scheduler (prefix caching
on) dies within a few sampling generate() calls with the same prompt.

The pipeline of openvino_draft_law.py (tiny random Llama target and draft exported by optimum-intel,
f32), sampling 4 tokens from prompt [1] with rng_seed = i on call i. With the default SchedulerConfig
a call raises RuntimeError "Check 'content_length <= prompt_ids.size() + m_generated_ids.size()'
failed at src/cpp/src/sequence_group.cpp:32" (the 7th here; the 3rd with another pair of tiny models);
with enable_prefix_caching = False the same 300 calls run, and greedy decoding runs either way.
(specverify's adapter runs its pipelines with prefix caching off.) Captured (2 cores, 1.8 min):

    do_sample=True, enable_prefix_caching=True: call 7 raised RuntimeError: Check 'content_length <=
        prompt_ids.size() + m_generated_ids.size()' failed at .../src/cpp/src/sequence_group.cpp:32
    do_sample=True, enable_prefix_caching=False: 300 calls ran
    do_sample=False, enable_prefix_caching=True: 300 calls ran
    do_sample=False, enable_prefix_caching=False: 300 calls ran
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
V, PROMPT, KAPPA = 4, [1], 2
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


def config(seed, sample):
    c = genai.GenerationConfig()
    c.max_new_tokens, c.ignore_eos, c.eos_token_id, c.stop_token_ids = 4, True, V, {V}
    c.do_sample, c.rng_seed, c.num_assistant_tokens = sample, seed, KAPPA
    return c


for sample in (True, False):
    for caching in (True, False):
        sched = genai.SchedulerConfig()
        sched.enable_prefix_caching = caching
        pipe = genai.LLMPipeline(t_ir, "CPU", draft_model=genai.draft_model(d_ir, "CPU", **F32), scheduler_config=sched,
                                 **F32)
        what = f"do_sample={sample}, enable_prefix_caching={caching}"
        for i in range(300):
            try:
                pipe.generate(ids, config(i, sample))
            except RuntimeError as exc:
                print(f"{what}: call {i + 1} raised RuntimeError: {str(exc).splitlines()[0]}")
                break
        else:
            print(f"{what}: 300 calls ran")
