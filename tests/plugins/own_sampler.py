"""A test plug-in with models of its own: plain ancestral sampling from the tiny Llama's float32 forward
(kappa ignored: no speculation, so the law is exactly the target's). `biased()` samples at temperature
0.8 whatever it is asked (the harness must see it)."""

import numpy as np

from specverify.models import tiny as tiny_llama


class OwnSampler:
    name, version = "own-sampler", "0"
    capabilities = {"engine"}
    models = "own"
    temperature_factor = 1.0

    def __init__(self):
        self._lm = {}

    def own_models(self, vocab, seed):
        return tiny_llama.pair_folders(None, vocab, seed)

    def generate(self, target, draft, prompt, kappa, transform, seed, n, length):
        import torch
        from transformers import LlamaForCausalLM
        key = str(target.handle)
        if key not in self._lm:
            self._lm[key] = LlamaForCausalLM.from_pretrained(key, dtype=torch.float32).eval()
        lm = self._lm[key]
        gen = torch.Generator().manual_seed(int(seed))
        ids = torch.tensor([list(prompt)] * n)
        temp = transform.temperature * self.temperature_factor
        with torch.no_grad():
            for _ in range(length):
                logits = lm(ids).logits[:, -1, :target.vocab_size].double()
                if temp == 0:
                    nxt = logits.argmax(-1, keepdim=True)
                else:
                    nxt = torch.multinomial(torch.softmax(logits / temp, -1), 1, generator=gen)
                ids = torch.cat([ids, nxt], 1)
        return ids[:, len(prompt):].numpy().astype(np.int64)


class Biased(OwnSampler):
    name = "own-sampler-biased"
    temperature_factor = 0.8


def factory():
    return OwnSampler()


def biased():
    return Biased()
