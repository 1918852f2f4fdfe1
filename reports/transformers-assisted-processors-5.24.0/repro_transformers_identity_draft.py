"""transformers 5.x assisted generation: the assistant's logits are transformed twice.

With the target as its own assistant, q = p at every position and the exact rule accepts every draft.
At temperature 0.7 transformers accepts fewer: the assistant's generate() applies its own
temperature warper *and* the target's logits_processor passed in by AssistedCandidateGenerator
(candidate_generator.py), so its drafts and candidate logits come from softmax(l / 0.7 / 0.7) while
the target verifies with softmax(l / 0.7). The output law stays exact (the rule uses the q it drew
from); the cost is acceptance -- speed. At temperature 1.0 (no warper) every draft is accepted.
"""
import copy
import torch
import transformers
import transformers.generation.utils as gu
from transformers import LlamaConfig, LlamaForCausalLM

print("transformers", transformers.__version__, "torch", torch.__version__)
torch.set_num_threads(1)
config = LlamaConfig(vocab_size=6, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                     num_key_value_heads=2, max_position_embeddings=64, initializer_range=1.0, bos_token_id=None,
                     eos_token_id=None, pad_token_id=0, tie_word_embeddings=False, attn_implementation="eager")
torch.manual_seed(0)
target = LlamaForCausalLM(config).eval()
target.generation_config.pad_token_id = 0
assistant = copy.deepcopy(target)                       # the model as its own assistant: q == p
real, calls, first = gu._speculative_sampling, [], {}

def observed(*args, **kw):
    tokens, n = real(*args, **kw)
    calls.append((int(args[2]), int(n)))                # (drafted, accepted)
    first.setdefault("args", args)
    return tokens, n

gu._speculative_sampling = observed
ids = torch.tensor([[1, 2]])
for temperature in (0.7, 1.0):
    calls.clear()
    first.clear()
    for i in range(60):
        torch.manual_seed(i)
        target.generate(ids, assistant_model=assistant, do_sample=True, temperature=temperature, top_k=None,
                        max_new_tokens=3, min_new_tokens=3, num_assistant_tokens=2,
                        num_assistant_tokens_schedule="constant", attention_mask=torch.ones_like(ids))
    drafted, accepted = sum(c for c, _ in calls), sum(m for _, m in calls)
    print(f"temperature {temperature}: accepted {accepted} of {drafted} drafts (q == p: all must be accepted)")
    if temperature == 0.7:
        cand_ids, cand_logits, k, new_logits = first.pop("args")[:4]
        with torch.no_grad():
            raw = target(cand_ids).logits[0, -(k + 1)]     # the logits predicting the first draft
        print("  q used for the first draft (assistant) :", [round(x, 4) for x in cand_logits[0, 0].softmax(-1).tolist()])
        print("  p used to verify it (target)           :", [round(x, 4) for x in new_logits[0, 0].softmax(-1).tolist()])
        print("  softmax(raw / 0.7)                     :", [round(x, 4) for x in (raw / 0.7).softmax(-1).tolist()])
        print("  softmax(raw / 0.7 / 0.7)               :", [round(x, 4) for x in (raw / 0.49).softmax(-1).tolist()])
