"""my_greedy.py: an engine's greedy decoding on specverify's bitwise level (a toy NumPy model)."""
import numpy as np

from specverify.adapters.bitwise_level import NO_SPEC, BitwiseInfo, GreedyResult

V, D, WINDOW = 64, 32, 4


class MyGreedy:
    name = "my-greedy"
    version = "1.0"
    capabilities = {"bitwise"}

    def __init__(self):
        rng = np.random.default_rng(0)
        self.embed = rng.standard_normal((V, D)).astype(np.float32)
        self.head = rng.standard_normal((D, V)).astype(np.float32)

    def logits(self, context):
        """The model: the mean embedding of the last WINDOW tokens times the head, float32."""
        return self.embed[list(context[-WINDOW:])].mean(axis=0) @ self.head

    def propose(self, context, kappa):
        """Prompt lookup: the tokens that followed the last earlier occurrence of the last 2 tokens."""
        for start in range(len(context) - 3, -1, -1):
            if context[start:start + 2] == context[-2:]:
                return context[start + 2:start + 2 + kappa]
        return []

    def bitwise_info(self):
        return BitwiseInfo(model="toy-numpy", vocab_size=V, proposers=("lookup",), layouts=("batch", "ragged"))

    def decode_greedy(self, request):
        """One request at a time (so every layout computes the same rows): propose, verify by argmax."""
        tokens, logits = [], []
        for prompt in request.prompts:
            out, rows = [], []
            while len(out) < request.max_new_tokens:
                context = list(prompt) + out
                drafts = [] if request.spec.proposer == NO_SPEC else self.propose(context, request.spec.kappa)
                drafts = drafts[:request.max_new_tokens - len(out) - 1]
                for i in range(len(drafts) + 1):           # the rows of the drafts, then the bonus row
                    row = self.logits(context + drafts[:i])
                    out.append(int(np.argmax(row)))
                    rows.append(row)
                    if i == len(drafts) or drafts[i] != out[-1]:
                        break                              # first mismatch: its argmax replaces the draft
            tokens.append(out)
            logits.append(np.stack(rows))
        return GreedyResult(tokens=tokens, logits=logits)


def factory():
    return MyGreedy()
