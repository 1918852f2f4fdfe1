"""OpenVINO GenAI 2026.4.1: draft-model speculative *sampling* does not keep the target's law.

A tiny random Llama (vocabulary 4) is the target; a noisy copy is the draft. Both are exported to
OpenVINO IR by optimum-intel and run by `openvino_genai.LLMPipeline(target, "CPU",
draft_model=draft_model(draft))` in f32 (INFERENCE_PRECISION_HINT and KV_CACHE_PRECISION f32: the
plain pipeline's greedy path log-probability then equals the float64 forward's to ~1e-7). With
do_sample=True, temperature 1, one request per call and rng_seed = i for run i:

  1. the frequencies of the first two tokens, plain sampling vs draft-model speculation, against their
     exact law p(x1 | prompt) p(x2 | prompt, x1) (float64 forward of the same weights; the first token
     comes from the target's prefill in both, the second from a verify step);
  2. the identity draft (draft = target, so q = p at every position): an exact rule accepts every draft.

What the source says (openvino.genai src/cpp/src/sampling/sampler.cpp, `validate_candidate` and
`sample_from_sequence_group`, read at the 2026.4 sources): a draft x is accepted when
r <= q(x) / p(y), where q(x) is the draft's probability of its own token (the log-prob stored with
the candidate), p(y) the target's probability of a *fresh target sample* y (not of x), and
r = uniform_int(0, 100) / 100 (101 levels; r = 0 accepts any draft). After a rejection the replacement
token is sampled from the *next* target row (the one conditioned on the rejected draft) rather than
from the residual max(0, p - q). Prompt lookup (sample-match: accept while the draft equals the
target's sample) is exact and is not affected.

The tokenizer IR: openvino_tokenizers 2026.4.1 cannot convert a tokenizer without special tokens, so one
("</s>", id 4, never output by the 4-row head) is added. Runs in ~2 minutes on 2 cores.
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
V, PROMPT, RUNS, KAPPA = 4, [1], 2000, 2
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
with torch.no_grad():
    t64 = target.double()
    p1 = torch.softmax(t64(torch.tensor([PROMPT])).logits[0, -1], -1).numpy()
    pairs = torch.tensor([PROMPT + [a] for a in range(V)])
    p2 = torch.softmax(t64(pairs).logits[:, -1], -1).numpy()
law = (p1[:, None] * p2).reshape(-1)        # exact law of the first two tokens (x1, x2), 16 cells


def config(seed, sample=True):
    c = genai.GenerationConfig()
    c.max_new_tokens, c.ignore_eos, c.eos_token_id, c.stop_token_ids = 4, True, V, {V}
    c.do_sample, c.temperature, c.top_k, c.top_p, c.rng_seed = sample, 1.0, 0, 1.0, seed
    c.num_assistant_tokens = KAPPA
    return c


ids = ov.Tensor(np.array([PROMPT], np.int64))
sched = genai.SchedulerConfig()
sched.enable_prefix_caching = False      # with the default (on), the draft pipeline dies on the 3rd call: see
                                         # openvino_prefix_cache_crash.py
plain = genai.LLMPipeline(t_ir, "CPU", **F32)
spec = genai.LLMPipeline(t_ir, "CPU", draft_model=genai.draft_model(d_ir, "CPU", **F32), scheduler_config=sched, **F32)
ident = genai.LLMPipeline(t_ir, "CPU", draft_model=genai.draft_model(t_ir, "CPU", **F32), scheduler_config=sched, **F32)

greedy = config(0, sample=False)
greedy.num_assistant_tokens = 0
greedy.logprobs = 1
res = plain.generate(ids, greedy)
print("plain greedy path", res.tokens[0], "log-prob", res.scores[0])

print(f"\nfirst two tokens (x1, x2) over {RUNS} runs (prompt {PROMPT}), 16 cells, against the exact law")
for label, pipe in (("plain", plain), ("draft model", spec)):
    c = Counter()
    for i in range(RUNS):
        cfg = config(i)
        if pipe is plain:
            cfg.num_assistant_tokens = 0
        x = pipe.generate(ids, cfg).tokens[0]
        c[x[0] * V + x[1]] += 1
    freq = np.array([c[t] for t in range(V * V)]) / RUNS
    keep = law > 0
    chi2 = float(((freq[keep] - law[keep]) ** 2 / law[keep]).sum() * RUNS)
    print(f"  {label:12s} TV {0.5 * np.abs(freq - law).sum():.4f}  chi2 {chi2:.1f} (dof 15; 99.9% point 37.7)")
    worst = np.argsort(-np.abs(freq - law))[:3]
    print("               most off:", ", ".join(f"({w // V},{w % V}) {freq[w]:.4f} vs {law[w]:.4f}" for w in worst))

acc = rej = 0
for i in range(500):
    m = ident.generate(ids, config(i)).extended_perf_metrics
    acc += m.get_num_accepted_tokens()
    rej += m.get_num_rejected_tokens()
print(f"\nidentity draft (draft = target), 500 runs: {acc} drafts accepted, {rej} rejected "
      f"(an exact rule rejects none: q = p)")
