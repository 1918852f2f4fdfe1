"""llama-cpp-python's server (0.3.36) ends a stream early, with no finish_reason and no error, when another
request arrives while it streams -- through the `openai` client only. Speculation plays no part: the
plain server does the same (its `interrupt_requests` setting, default true, llama_cpp/server/settings.py).

Start a server of any GGUF (here the tiny Llama of `specverify models write tiny-llama DEST --vocab 4`,
whose text is one character a token, "a".."d"):

    python -m llama_cpp.server --model DEST/target/model-f32.gguf --host 127.0.0.1 --port 8011 \\
        --type_k 0 --type_v 0
    (with --draft_model prompt-lookup-decoding --draft_model_num_pred_tokens 4: the same)

    python llamacpp_server_stream_interrupted.py http://127.0.0.1:8011/v1

Prints a greedy stream of 48 tokens alone, then the same stream while a second (non-streamed) request
is sent after its first chunk: the chunks received, the text and the finish_reason of each. A server
that serves both requests prints the same 48-token text and finish_reason "length" twice; an
interrupted stream prints fewer tokens and finish_reason None (the stream just ends).
"""

import sys
import threading

from openai import OpenAI

PROMPT = "bcad"
TOKENS = 48


def stream(client, model, on_first=None):
    text, finish, chunks = "", None, 0
    for chunk in client.completions.create(model=model, prompt=PROMPT, max_tokens=TOKENS, temperature=0.0,
                                           top_p=1.0, stream=True,
                                           extra_body={"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0}):
        c = chunk.choices[0]
        text += c.text
        finish = c.finish_reason or finish
        chunks += 1
        if chunks == 1 and on_first is not None:
            on_first()
    return text, finish, chunks


def main(url):
    client = OpenAI(base_url=url, api_key="none", timeout=120, max_retries=0)
    model = client.models.list().data[0].id
    print(f"server {url} ({model})")
    text, finish, chunks = stream(client, model)
    print(f"alone:           {chunks:3d} chunks, {len(text):3d} tokens {text!r}, finish_reason {finish!r}")
    other = []

    def second():
        t = threading.Thread(target=lambda: other.append(client.completions.create(
            model=model, prompt="dd", max_tokens=4, temperature=0.0).choices[0]))
        t.start()
        other.append(t)

    text2, finish2, chunks2 = stream(client, model, on_first=second)
    other[0].join()
    print(f"with a 2nd call: {chunks2:3d} chunks, {len(text2):3d} tokens {text2!r}, finish_reason {finish2!r}")
    print(f"second request answered: {other[1].text!r} ({other[1].finish_reason})")
    print("stream interrupted" if (text2, finish2) != (text, finish) else "stream complete")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8011/v1")
