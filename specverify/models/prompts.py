"""The repo's prompt set (prompts.json) and its encoding into token ids.

`load_prompts` gives (category, chat, text) tuples; `full=True` adds the style variants of the chat
prompts. `encode_prompts` encodes them with our engine's tokenizer (`encode_chat` / `encode`),
`chat_prompts` with a transformers-style tokenizer (its chat template, with the generation prompt):
what every SmolLM2 bitwise adapter sends.
"""

from __future__ import annotations

import json
from importlib import resources


def load_prompts(n: int | None = None, *, full: bool = False, categories=None) -> list:
    """The repo's prompt set as (category, chat, text) tuples; `full` adds the style variants."""
    data = json.loads(resources.files("specverify.models").joinpath("prompts.json").read_text())
    base = [p for p in data["prompts"] if categories is None or p["category"] in categories]
    prefixes = data["style_prefixes"] if full else [""]
    out = [(p["category"], p["chat"], pre + p["text"] if p["chat"] else p["text"])
           for pre in prefixes for p in base]
    if not full:
        out = out[:len(base)]
    # drop duplicates (non-chat prompts get no prefix)
    seen, uniq = set(), []
    for p in out:
        if p not in seen:
            seen.add(p)
            uniq.append(p)
    return uniq if n is None else uniq[:n]


def encode_prompts(tokenizer, prompts) -> list:
    """`prompts` (load_prompts' tuples) as token ids of our engine's tokenizer."""
    return [tokenizer.encode_chat([{"role": "user", "content": text}]) if chat else tokenizer.encode(text)
            for _, chat, text in prompts]


def chat_prompts(tokenizer, encode=None) -> tuple:
    """The first 256 prompts of the full set as token ids of a transformers-style tokenizer: chat
    prompts through its chat template (with the generation prompt), plain ones through `encode(text)`
    (default: `tokenizer(text)["input_ids"]`)."""
    encode = encode or (lambda text: tokenizer(text)["input_ids"])
    out = []
    for _, chat, text in load_prompts(256, full=True):
        if chat:
            ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
            ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        else:
            ids = encode(text)
        out.append(tuple(int(t) for t in ids))
    return tuple(out)
