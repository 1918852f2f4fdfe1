"""llama-cpp-python's server (0.3.36) applies top_p to the untempered distribution, then the temperature
(its sampler chain: top_k, typical_p, top_p, min_p, temperature -- llama_cpp/llama.py
`Llama._init_sampler`). OpenAI's API, vLLM and transformers apply the temperature first. So at T=0.8,
top_p=0.9 it samples a token that the tempered nucleus excludes. Speculation plays no part (the plain
server does the same). Through the `openai` client only.

Start a server of the tiny Llama of `specverify models write tiny-llama DEST --vocab 4` (text is one
character a token, "a".."d"):

    python -m llama_cpp.server --model DEST/target/model-f32.gguf --host 127.0.0.1 --port 8012 \\
        --type_k 0 --type_v 0

    python llamacpp_server_top_p_before_temperature.py http://127.0.0.1:8012/v1

Prints the next-token probabilities after "baa" (from the server's own logprobs, which are the raw
log-softmax), the top_p=0.9 nucleus with the temperature applied first and last, and how often 400
seeded one-token requests at T=0.8, top_p=0.9 drew each token. A token outside the tempered nucleus
drawn at all means top_p ran before the temperature.
"""

import collections
import math
import sys

from openai import OpenAI

NEUTRAL = {"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0}
PROMPT, T, TOP_P, DRAWS = "baa", 0.8, 0.9, 400


def nucleus(probs: dict, top_p: float) -> list:
    out, total = [], 0.0
    for tok, p in sorted(probs.items(), key=lambda kv: -kv[1]):
        out.append(tok)
        total += p
        if total >= top_p:
            break
    return sorted(out)


def main(url):
    client = OpenAI(base_url=url, api_key="none", timeout=120, max_retries=0)
    model = client.models.list().data[0].id
    first = client.completions.create(model=model, prompt=PROMPT, max_tokens=1, temperature=0.0, logprobs=4,
                                      extra_body=NEUTRAL).choices[0]
    raw = {tok: math.exp(lp) for tok, lp in first.logprobs.top_logprobs[0].items()}
    z = sum(p ** (1 / T) for p in raw.values())
    tempered = {tok: p ** (1 / T) / z for tok, p in raw.items()}
    print(f"after {PROMPT!r}: p at T=1 {dict(sorted((k, round(v, 4)) for k, v in raw.items()))}")
    print(f"                 p at T={T} {dict(sorted((k, round(v, 4)) for k, v in tempered.items()))}")
    print(f"top_p={TOP_P} nucleus, temperature first (OpenAI, vLLM): {nucleus(tempered, TOP_P)}")
    print(f"top_p={TOP_P} nucleus, temperature last:               {nucleus(raw, TOP_P)}")
    drawn = collections.Counter(
        client.completions.create(model=model, prompt=PROMPT, max_tokens=1, temperature=T, top_p=TOP_P, seed=s,
                                  extra_body=NEUTRAL).choices[0].text for s in range(DRAWS))
    print(f"{DRAWS} seeded draws at T={T}, top_p={TOP_P}: {dict(sorted(drawn.items()))}")
    outside = {t: n for t, n in drawn.items() if t not in nucleus(tempered, TOP_P)}
    print(f"drawn outside the tempered nucleus: {outside or 'none'}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8012/v1")
