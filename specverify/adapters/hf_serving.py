"""transformers' assisted generation at the serving engine level (capability "serving",
`adapters/serving_level.py`): what `generate` returns past its sampler, without a server --
`specverify audit transformers-serving`.

The served model is tiny:4,7 (`server.models.tiny_models`): its toy target and draft as transformers
causal LMs (`hf_engine.toy_lm`, float64 logits: the toy's own rows), assisted generation with the draft
as assistant, 3 drafts a step (num_assistant_tokens_schedule "constant"). Each request is one
`generate` call (assisted generation takes one sequence at a time), in order:

    logprobs    `output_logits=True, return_dict_in_generate=True`: the raw target row of every new
                token (transformers' `logits`, before its processors and warpers; generate keeps them in
                float32, so the rows compare within checks.serving.LOGPROB_ATOL, not bit for bit); the
                logprob is their float64 log-softmax at the token, the top entries its largest
    text        the toy's words " t{i}" of the ids (transformers returns ids; detokenising is the caller's)
    stream      a `streamer` (transformers' BaseStreamer protocol): `put` receives the prompt, then the
                tokens each step adds; the deltas are their words
    seed        `torch.manual_seed(seed)` before the request's `generate` (transformers draws from torch's
                global generator: no generator per request; the seeds row then checks that nothing the
                earlier calls left behind -- the assistant's state, its generation config -- changes a
                seeded request)

Not declared (SKIPs under not covered): stop strings (`stop_strings` needs a tokenizer object; the toy
has none), usage and finish reasons of its own (transformers returns neither: the ids are the count,
"length" unless an EOS; the toy has no EOS), a prefix cache, preemption.
"""

from __future__ import annotations

import numpy as np

from specverify import installed

from .serving_level import ServingOutput

MODEL = "tiny:4,7"
KAPPA = 3


class TransformersServing:
    name = "transformers-serving"
    capabilities = {"serving"}
    serving_model = MODEL
    serving_features = ("logprobs", "text", "stream", "seed")
    serving_float64_logprobs = False      # generate casts the logits to float32 (its `logits` output too)

    def __init__(self):
        installed.load("transformers", "transformers")
        import torch

        from specverify.server.models import parse_tiny, tiny_models

        from .hf_engine import toy_lm
        self.torch = torch
        torch.set_num_threads(1)          # tiny tensors: intra-op threads only contend
        self.version = installed.engine_version("transformers")
        target, draft = tiny_models(*parse_tiny(MODEL))
        self.target = toy_lm(target, torch.float64)
        self.draft = toy_lm(draft, torch.float64)

    def _streamer(self, chunks: list):
        from transformers.generation.streamers import BaseStreamer

        class Collect(BaseStreamer):
            def put(self, value):
                chunks.append([int(t) for t in value.reshape(-1).tolist()])

            def end(self):
                pass
        return Collect()

    def complete(self, requests) -> list:
        torch = self.torch
        out = []
        for r in requests:
            ids = torch.tensor([list(r.prompt)], dtype=torch.long)
            chunks: list = []
            sample = {} if r.temperature == 0 else dict(do_sample=True, temperature=float(r.temperature), top_k=None,
                                                        top_p=None)
            if r.seed is not None:
                torch.manual_seed(int(r.seed))
            res = self.target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=int(r.max_tokens),
                                       assistant_model=self.draft, num_assistant_tokens=KAPPA,
                                       num_assistant_tokens_schedule="constant", output_logits=True,
                                       return_dict_in_generate=True, streamer=self._streamer(chunks) if r.stream else None,
                                       **({"do_sample": False} if not sample else sample))
            new = [int(t) for t in res.sequences[0, len(r.prompt):].tolist()]
            lp = top = None
            if r.logprobs is not None:
                lp, top = [], []
                for tok, row in zip(new, res.logits):
                    x = row[0].detach().double().numpy()                 # [V] raw target row
                    m = x.max()
                    lsm = x - (m + np.log(np.sum(np.exp(x - m))))
                    lp.append(float(lsm[tok]))
                    order = np.lexsort((np.arange(lsm.shape[0]), -lsm))[:r.logprobs]
                    top.append({int(i): float(lsm[i]) for i in order if np.isfinite(lsm[i])})
                lp, top = tuple(lp), tuple(top)
            delta_ids = tuple(tuple(c) for c in chunks[1:]) if r.stream else None   # the first put: the prompt
            out.append(ServingOutput(tuple(new), "length", "".join(f" t{t}" for t in new), lp, top,
                                     deltas=None if delta_ids is None else tuple("".join(f" t{t}" for t in c)
                                                                                 for c in delta_ids),
                                     delta_ids=delta_ids))
        return out


def make() -> TransformersServing:
    return TransformersServing()
