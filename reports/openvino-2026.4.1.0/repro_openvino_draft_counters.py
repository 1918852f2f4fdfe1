"""OpenVINO GenAI 2026.4.1: the speculative-decoding counters (SDPerModelsPerfMetrics) leave out the step
that finishes the request.

A tiny random Llama (vocabulary 4) is its own draft (draft = target), greedy, num_assistant_tokens 2, one
request per call, max_new_tokens 1..8. Every draft is then accepted, so each pipeline step emits its
drafts + 1 tokens. A `StreamerBase` passed to generate() gets each step's new tokens as one chunk, so
the tokens drafted are sum(chunk - 1) over the steps. Against that, the result's extended_perf_metrics:
get_num_draft_tokens, get_num_accepted_tokens, get_num_rejected_tokens, get_draft_acceptance_rate.

What the source says (openvino.genai as stored: master of 2026-08-21 and commit b4048bd1e, which added
these counters; the 2026.4.1 tag is not stored, so this script measures it):
src/cpp/src/speculative_decoding/continuous_batching/fast_draft_strategy.cpp, `step()`, counts a
request's drafts and accepted drafts only while the request is still among the main pipeline's
generated requests, so the step that finishes it is never counted. When no step was counted
(num_draft_tokens == 0), src/cpp/src/speculative_decoding/perf_metrics.cpp, `evaluate_statistics`,
falls back to sum(batch size - 1) over the steps after the first for the accepted count. A run whose
only verify step is its last then reports accepted drafts out of 0 drafted (acceptance rate NaN).
The drafting itself follows min(kappa, tokens left - 1) after the prefill; the counters are what is off.

The tokenizer IR: openvino_tokenizers 2026.4.1 cannot convert a tokenizer without special tokens, so one
("</s>", id 4, never output by the 4-row head) is added. Runs in about a minute on 2 cores.
"""
import json
import os
import tempfile

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


t_ir = export(llama(0), "target")
sched = genai.SchedulerConfig()
sched.enable_prefix_caching = False      # with the default (on), the draft pipeline dies on the 3rd call: see
                                         # openvino_prefix_cache_crash.py
ident = genai.LLMPipeline(t_ir, "CPU", draft_model=genai.draft_model(t_ir, "CPU", **F32), scheduler_config=sched, **F32)
ids = ov.Tensor(np.array([PROMPT], np.int64))


class Chunks(genai.StreamerBase):
    """Keeps the size of each chunk of new tokens generate() hands over (one per pipeline step)."""

    def __init__(self):
        super().__init__()
        self.sizes = []

    def write(self, token):
        self.sizes.append(1 if isinstance(token, int) else len(token))
        return genai.StreamingStatus.RUNNING

    def end(self):
        pass


print(f"\ndraft = target, greedy, num_assistant_tokens {KAPPA}, prompt {PROMPT}")
print("max_new_tokens  step chunks      drafted  | draft_tokens accepted rejected acceptance_rate")
wrong = 0
for n in range(1, 9):
    c = genai.GenerationConfig()
    c.max_new_tokens, c.ignore_eos, c.eos_token_id, c.stop_token_ids = n, True, V, {V}
    c.do_sample, c.num_assistant_tokens = False, KAPPA
    s = Chunks()
    res = ident.generate(ids, c, s)
    m = res.extended_perf_metrics
    drafted = sum(k - 1 for k in s.sizes)          # all drafts accepted: a step of k drafts emits k + 1
    got = (m.get_num_draft_tokens(), m.get_num_accepted_tokens(), m.get_num_rejected_tokens())
    wrong += got[0] != drafted or got[1] != drafted
    print(f"{n:14d}  {str(s.sizes):15s}  {drafted:7d}  | {got[0]:12d} {got[1]:8d} {got[2]:8d} "
          f"{m.get_draft_acceptance_rate():15.3f}")
print(f"\n{wrong} of 8 runs: the counters differ from the drafts made (every one of them accepted)")
