"""transformers 5.x assisted generation with a real assistant: acceptance follows the assistant's q tempered
twice, not the q the user asked for.

The assistant's generate() applies its own temperature warper and also the target's logits_processor
that AssistedCandidateGenerator hands it (candidate_generator.py), so at temperature T its drafts and
its candidate logits come from softmax(l_q / T / T). The verifier uses those logits as q, so the output
law stays exact; the acceptance rate of the first draft is sum_x min(p, q_TT), not sum_x min(p, q_T).

Set-up: two tiny random Llamas (V = 6) built from seeded configs, the assistant's own generation config
set to one draft a step with no confidence stop (transformers reads num_assistant_tokens from the
*assistant's* generation config; generate(num_assistant_tokens=...) is not read), N runs of 2 new
tokens at T = 0.7: the first step drafts 1 token after the prompt. The count of accepted first drafts
is compared with both predictions (binomial standard error).
"""
import math

import torch
import transformers
import transformers.generation.utils as gu
from transformers import LlamaConfig, LlamaForCausalLM

N, T = 3000, 0.7
print("transformers", transformers.__version__, "torch", torch.__version__)
torch.set_num_threads(1)


def tiny(seed):
    config = LlamaConfig(vocab_size=6, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=2, max_position_embeddings=64, initializer_range=1.0, bos_token_id=None,
                         eos_token_id=None, pad_token_id=0, tie_word_embeddings=False, attn_implementation="eager")
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    model.generation_config.pad_token_id = 0
    return model


target, assistant = tiny(0), tiny(1)
assistant.generation_config.num_assistant_tokens = 1
assistant.generation_config.num_assistant_tokens_schedule = "constant"
assistant.generation_config.assistant_confidence_threshold = 0.0
ids = torch.tensor([[1, 2]])
with torch.no_grad():
    lp, lq = target(ids).logits[0, -1].double(), assistant(ids).logits[0, -1].double()
p = (lp / T).softmax(-1)
pred_t = float(torch.minimum(p, (lq / T).softmax(-1)).sum())
pred_tt = float(torch.minimum(p, (lq / T / T).softmax(-1)).sum())

real, first = gu._speculative_sampling, []


def observed(*args, **kw):
    tokens, n = real(*args, **kw)
    if len(first) < run[0] + 1:
        first.append((int(args[2]), int(n)))       # the run's first verify: (drafted, accepted)
    return tokens, n


gu._speculative_sampling = observed
run = [0]
for i in range(N):
    run[0] = i
    torch.manual_seed(i)
    target.generate(ids, assistant_model=assistant, do_sample=True, temperature=T, top_k=None, max_new_tokens=2,
                    min_new_tokens=2, attention_mask=torch.ones_like(ids))
gu._speculative_sampling = real
assert len(first) == N and all(k == 1 for k, _ in first), "every run's first step must draft exactly 1 token"
accepted = sum(m for _, m in first)
rate = accepted / N
print(f"first drafts accepted: {accepted} of {N} = {rate:.4f}")
for label, pred in (("sum_x min(p_T, q_T)   (the exact rule with the q asked for)", pred_t),
                    ("sum_x min(p_T, q_TT)  (the assistant's q tempered twice)", pred_tt)):
    se = math.sqrt(pred * (1 - pred) / N)
    print(f"  {label}: {pred:.4f}, observed - predicted = {(rate - pred) / se:+.1f} standard errors")
