"""MLX-LM's server (mlx-lm 0.32.2, mlx 0.32.4 CPU) with a draft model: at temperature 0 the same request
gives another completion once its prompt is in the server's prompt cache. Through the `openai` client only.

Models: a tiny random Llama target and its draft (16 tokens "t0".."t15" + 4 special), written by

    python -c "from specverify.models import tiny; print(tiny.pair_folders('DEST', vocab=16, seed=0, extra_tokens=4))"

(any target/draft pair of one tokenizer should do; this one is small enough to read the tokens). Start the
speculative server and, for the comparison, a plain one of the same target:

    HF_HUB_CACHE=$(mktemp -d) python -m mlx_lm.server --model DEST/target-V16-s0-x4 \\
        --draft-model DEST/draft-V16-s0-x4-n0.5 --host 127.0.0.1 --port 8011
    HF_HUB_CACHE=$(mktemp -d) python -m mlx_lm.server --model DEST/target-V16-s0-x4 --host 127.0.0.1 --port 8012

    python mlx_server_draft_prompt_cache.py http://127.0.0.1:8011/v1 http://127.0.0.1:8012/v1

(HF_HUB_CACHE: the server's GET /v1/models fails on a machine without a Hugging Face cache folder.)
For each server it sends the same greedy request (temperature 0, 8 tokens, prompt "t1 t2") three times,
printing the text and usage.prompt_tokens_details.cached_tokens. Greedy decoding must not depend on the
cache: every line of a server must be the same, and the speculative server's equal to the plain one's.
"""

import sys

from openai import OpenAI

PROMPT = "t1 t2"
MAX_TOKENS = 8
REPEATS = 3


def run(url: str) -> list:
    client = OpenAI(base_url=url, api_key="none", timeout=60)
    model = client.models.list().data[0].id
    texts = []
    for i in range(REPEATS):
        out = client.completions.create(model=model, prompt=PROMPT, max_tokens=MAX_TOKENS, temperature=0.0)
        details = getattr(out.usage, "prompt_tokens_details", None)
        cached = getattr(details, "cached_tokens", None) if details is not None else None
        print(f"  {url} request {i + 1}: {out.choices[0].text!r}  cached_tokens={cached}")
        texts.append(out.choices[0].text)
    return texts


def main(spec_url: str, plain_url: str) -> int:
    print("speculative server (--draft-model):")
    spec = run(spec_url)
    print("plain server:")
    plain = run(plain_url)
    same = len(set(spec)) == 1 and spec[0] == plain[0] and len(set(plain)) == 1
    print("greedy output independent of the prompt cache and equal to plain decoding:", same)
    return 0 if same else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python mlx_server_draft_prompt_cache.py SPEC_URL PLAIN_URL")
    sys.exit(main(sys.argv[1], sys.argv[2]))
