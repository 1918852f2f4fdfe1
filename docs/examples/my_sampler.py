"""my_sampler.py: a speculative-decoding verifier, written against specverify's sampler protocol."""
import numpy as np


def draw(weights, coin):
    """Inverse CDF: the first token whose cumulative weight exceeds coin * total, never a zero one."""
    cdf = np.cumsum(weights)
    token = int(np.searchsorted(cdf, coin * cdf[-1], side="right"))
    return min(token, int(np.flatnonzero(weights > 0)[-1]))


class MySampler:
    name = "my-sampler"
    version = "1.0"
    capabilities = {"chain", "greedy"}        # which checks apply (see specverify.adapters.protocol)

    def verify(self, batch, coins):
        """Chain rule for random requests, argmax rule for greedy ones; one row of tokens per request."""
        out = np.full((batch.batch_size, batch.max_spec_len + 1), -1, dtype=np.int64)
        for b in range(batch.batch_size):
            drafts, p, q, greedy = batch.request(b)      # ids [k], target rows [k+1, V], draft rows [k, V] or None
            first = batch.draft_start[b]                 # request b's acceptance coins: coins.accept[first:first+k]
            emitted = []
            for i, x in enumerate(drafts):
                if greedy:
                    emitted.append(int(np.argmax(p[i])))
                    if x != emitted[-1]:
                        break
                    continue
                q_i = np.eye(p.shape[1])[x] if q is None else q[i]    # deterministic draft: q one-hot
                if x >= 0 and coins.accept[first + i] * q_i[x] < p[i][x]:
                    emitted.append(int(x))                             # accepted
                    continue
                residual = p[i] if x < 0 else np.maximum(p[i] - q_i, 0.0)   # -1 = padded draft
                if not (residual > 0).any():
                    residual = p[i]
                emitted.append(draw(residual, coins.final[b]))         # recovered token; discard the tail
                break
            else:                                                      # every draft accepted: bonus token
                emitted.append(int(np.argmax(p[-1])) if greedy else draw(p[-1], coins.final[b]))
            out[b, :len(emitted)] = emitted
        return out


def factory():
    return MySampler()
