"""llama-cpp-python's server (0.3.36): the logprobs it returns for the same tokens are not the same bytes
(1) when the previous request shared a prefix with this one (its KV cache is reused and only the rest of
the prompt is evaluated, in a batch of another shape) and (2) on the prompt-lookup server vs the plain
one (drafted tokens are verified in one batch). The tokens never change here; only the floats'
last bits. Through the `openai` client only.

Start two servers of the tiny Llama of `specverify models write tiny-llama DEST --vocab 4` (its text is
one character a token, "a".."d"; any GGUF should show it):

    python -m llama_cpp.server --model DEST/target/model-f32.gguf --host 127.0.0.1 --port 8011 \\
        --type_k 0 --type_v 0 --draft_model prompt-lookup-decoding --draft_model_num_pred_tokens 4
    python -m llama_cpp.server --model DEST/target/model-f32.gguf --host 127.0.0.1 --port 8012 \\
        --type_k 0 --type_v 0

    python llamacpp_server_logprob_bytes.py http://127.0.0.1:8011/v1 http://127.0.0.1:8012/v1

Prints, on each server, one seeded request (T=1, seed 5, 12 tokens, logprobs=1, neutral sampler) sent
after an unrelated request, after a request sharing 3 of its 4 prompt characters, and after the
unrelated one again: its text, and the float.hex of each returned logprob where it differs from the
first. Then the first answers of the two servers side by side. A batch-invariant server prints the
same bytes everywhere ("identical").
"""

import sys

from openai import OpenAI

NEUTRAL = {"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0}
PROMPT, SHARING, UNRELATED = "bcad", "bcaa", "dd"


def request(client, model, prompt, **kw):
    return client.completions.create(model=model, prompt=prompt, max_tokens=12, top_p=1.0, extra_body=NEUTRAL,
                                     logprobs=1, **kw).choices[0]


def probe(client, model):
    return request(client, model, PROMPT, temperature=1.0, seed=5)


def diff(a, b):
    ha = [float(x).hex() for x in a.logprobs.token_logprobs]
    hb = [float(x).hex() for x in b.logprobs.token_logprobs]
    out = [f"  position {j}: {x} vs {y}" for j, (x, y) in enumerate(zip(ha, hb)) if x != y]
    return "identical" if not out and a.text == b.text else "\n".join(out) or f"text {a.text!r} vs {b.text!r}"


def main(urls):
    first = {}
    for url in urls:
        client = OpenAI(base_url=url, api_key="none", timeout=120, max_retries=0)
        model = client.models.list().data[0].id
        print(f"== server {url}")
        request(client, model, UNRELATED, temperature=0.0)
        a = probe(client, model)
        request(client, model, SHARING, temperature=0.0)
        b = probe(client, model)
        request(client, model, UNRELATED, temperature=0.0)
        c = probe(client, model)
        first[url] = a
        print(f"after {UNRELATED!r}: {a.text!r}")
        print(f"after {SHARING!r} (shares a prefix): {b.text!r}; logprob bytes vs the first:\n{diff(a, b)}")
        print(f"after {UNRELATED!r} again: {c.text!r}; logprob bytes vs the first:\n{diff(a, c)}")
    if len(urls) == 2:
        print(f"== first answers, {urls[0]} vs {urls[1]}:\n{diff(first[urls[0]], first[urls[1]])}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["http://127.0.0.1:8011/v1", "http://127.0.0.1:8012/v1"])
