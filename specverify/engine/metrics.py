"""Speculation metrics, counted per verify (a request-step with >= 1 draft), vLLM conventions:

    E      mean acceptance length, bonus included: 1 + accepted drafts / verifies
    r_i    unconditional per-position acceptance: P(drafts 1..i all accepted | >= i drafted)
           = #verifies whose first i drafts were accepted / #verifies with >= i drafts
    alpha  fitted i.i.d. acceptance rate (MLE of a geometric censored at k):
           accepted / (accepted + #verifies that ended in a rejection); the i.i.d. model has r_i = alpha^i
    target passes per emitted token: request-steps / emitted tokens (1.0 for plain decode, prefill
           counted as one pass)
    tokens/s: emitted tokens / wall time of the run
"""

from __future__ import annotations

from dataclasses import dataclass, field



@dataclass
class SpecMetrics:
    num_steps: int = 0               # target launches
    num_preemptions: int = 0         # running requests whose KV was taken back (recomputed later)
    num_decode_preemptions: int = 0  # of those, requests preempted while decoding (>= 1 output token)
    num_request_steps: int = 0       # sum over launches of the requests in them
    num_emitted: int = 0             # tokens kept (after EOS / stop / max_tokens truncation)
    num_verifies: int = 0            # request-steps with >= 1 draft
    num_draft_tokens: int = 0
    num_accepted: int = 0
    num_rejections: int = 0          # verifies that ended with a rejected draft
    drafted_at: list = field(default_factory=list)    # [i] verifies with >= i+1 drafts
    accepted_at: list = field(default_factory=list)   # [i] verifies whose first i+1 drafts were accepted
    wall_time_s: float = 0.0
    draft_time_s: float = 0.0
    target_time_s: float = 0.0

    def record_verify(self, k: int, m: int) -> None:
        """One request-step that verified k drafts and accepted the first m."""
        if k == 0:
            return
        self.num_verifies += 1
        self.num_draft_tokens += k
        self.num_accepted += m
        self.num_rejections += int(m < k)
        while len(self.drafted_at) < k:
            self.drafted_at.append(0)
            self.accepted_at.append(0)
        for i in range(k):
            self.drafted_at[i] += 1
            if i < m:
                self.accepted_at[i] += 1

    @property
    def mean_acceptance_length(self) -> float:
        return 1.0 + self.num_accepted / self.num_verifies if self.num_verifies else float("nan")

    @property
    def acceptance_rates(self) -> list:
        return [a / d if d else float("nan") for a, d in zip(self.accepted_at, self.drafted_at)]

    @property
    def alpha(self) -> float:
        n = self.num_accepted + self.num_rejections
        return self.num_accepted / n if n else float("nan")

    @property
    def passes_per_token(self) -> float:
        return self.num_request_steps / self.num_emitted if self.num_emitted else float("nan")

    @property
    def tokens_per_s(self) -> float:
        return self.num_emitted / self.wall_time_s if self.wall_time_s > 0 else float("nan")

    def to_dict(self) -> dict:
        return {
            "E": self.mean_acceptance_length, "r_i": self.acceptance_rates, "alpha": self.alpha,
            "alpha_pow_i": [self.alpha ** (i + 1) for i in range(len(self.drafted_at))],
            "target_passes_per_token": self.passes_per_token, "tokens_per_s": self.tokens_per_s,
            "num_emitted": self.num_emitted, "num_steps": self.num_steps, "num_verifies": self.num_verifies,
            "num_draft_tokens": self.num_draft_tokens, "num_accepted": self.num_accepted,
            "wall_time_s": self.wall_time_s, "draft_time_s": self.draft_time_s, "target_time_s": self.target_time_s,
        }
