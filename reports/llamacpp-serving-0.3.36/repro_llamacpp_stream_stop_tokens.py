"""llama-cpp-python 0.3.36: a completion that ends at a stop string reports fewer tokens when streamed.

Non-streamed, `create_completion(..., stop=[s], logprobs=k)` returns in `logprobs.tokens` every token the
sampler kept -- up to and including the one that completes the stop string -- and counts them in
`usage.completion_tokens`. Streamed, the same request (same seed / greedy, same prompt) yields events
whose `logprobs.tokens` stop at the token where the stop string starts (that token with its text cut),
so the stream names fewer tokens and fewer logprobs than the non-streamed answer. Plain decode and
prompt-lookup speculation alike (not a speculation bug; a serving-path one).

Usage: python repro_llamacpp_stream_stop_tokens.py MODEL.gguf [PROMPT_IDS]   (only llama_cpp is imported)
  MODEL.gguf: e.g. `specverify models write tiny-llama DEST --vocab 4 --seed 0 --format gguf` ->
  DEST/target/model-f32.gguf (one character a token), or any GGUF.
"""
import sys

import llama_cpp
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

NEUTRAL = dict(top_p=1.0, top_k=0, min_p=0.0, typical_p=1.0, repeat_penalty=1.0)


def run(path, prompt, draft):
    llm = llama_cpp.Llama(path, n_ctx=128, n_threads=1, logits_all=True, type_k=0, type_v=0, seed=0, verbose=False,
                          draft_model=LlamaPromptLookupDecoding(num_pred_tokens=4) if draft else None)
    free = llm.create_completion(prompt, max_tokens=12, temperature=0.0, logprobs=1, **NEUTRAL)
    text, toks = free["choices"][0]["text"], free["choices"][0]["logprobs"]["tokens"]
    stop = "".join(toks[len(toks) // 2:len(toks) // 2 + 3])   # a stop string spanning 3 tokens mid-run
    print(f"draft_model={'prompt-lookup:4' if draft else 'none'}: free run text {text!r}, stop {stop!r}")
    plain = llm.create_completion(prompt, max_tokens=12, temperature=0.0, logprobs=1, stop=[stop], **NEUTRAL)
    c = plain["choices"][0]
    print(f"  non-streamed: text {c['text']!r}, finish_reason {c['finish_reason']!r}, "
          f"{len(c['logprobs']['tokens'])} tokens {c['logprobs']['tokens']}, usage.completion_tokens "
          f"{plain['usage']['completion_tokens']}")
    tokens, texts, finish = [], [], None
    for chunk in llm.create_completion(prompt, max_tokens=12, temperature=0.0, logprobs=1, stop=[stop], stream=True,
                                       **NEUTRAL):
        ch = chunk["choices"][0]
        finish = ch["finish_reason"] or finish
        texts.append(ch["text"])
        if ch["logprobs"]:
            tokens += ch["logprobs"]["tokens"]
    print(f"  streamed:     text {''.join(texts)!r}, finish_reason {finish!r}, {len(tokens)} tokens {tokens}")
    print(f"  -> same tokens: {tokens == c['logprobs']['tokens']}")
    return tokens == c["logprobs"]["tokens"]


if __name__ == "__main__":
    path = sys.argv[1]
    prompt = [int(t) for t in sys.argv[2].split(",")] if len(sys.argv) > 2 else [0, 1, 2, 3, 0, 1]
    print(f"llama-cpp-python {llama_cpp.__version__}, {path}, prompt ids {prompt}")
    same = [run(path, prompt, draft) for draft in (False, True)]
    print("REPRODUCED: the streamed completion names fewer tokens than the non-streamed one" if not any(same)
          else "not reproduced" if all(same) else "reproduced on one of the two")
