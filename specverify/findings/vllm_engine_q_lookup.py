"""Diagnostic for issue 29 (shim repaired): does the shortfall of vllm-cpu-engine-probabilistic-fixed's accepted
total come from the padded placeholder drafts' -1 (the C++ rejection op's missing `draft_token_id < 0` guard), or
from the runner verifying a whole step without q when one request of it -- the padded new request -- has no
cached draft probabilities (`_get_spec_decode_draft_probs` in vllm/v1/worker/gpu_model_runner.py returns None
for the batch, and vllm/v1/sample/rejection_sampler.py then treats every draft as one-hot: kept with p(x))?

    PYTHONPATH=SHIM VENV/bin/python -m specverify.findings.vllm_engine_q_lookup guard|lookup -- AUDIT ARGS...

`guard`: the -1 guard alone (findings/vllm_engine_guard.add_guard: a placeholder's coin is +inf). `lookup`: the
lookup alone, repaired: a request with drafts but no cached row gets q = 0 rows (a placeholder has no q; the
ratio test never keeps a draft of q = 0, and the residual max(p - q, 0) is then p itself), every other request
keeps its own q. The audit then runs as `specverify audit ...` in this process (the engine core is in-process,
so the patches reach it). Results are in docs/acceptance.md.
"""
import sys

from specverify.adapters import vllm_cpu_engine as v

MODES = ("guard", "lookup")


def repair_lookup() -> None:
    """Give the runner's draft-probability lookup a q = 0 row for a request it has no cached row for, instead of
    dropping q for the whole step."""
    import torch
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    def lookup(self, spec_decode_metadata):
        cached, cached_ids = self._draft_probs, self._draft_prob_req_ids
        if cached is None or cached_ids is None:
            return None
        index = {req_id: i for i, req_id in enumerate(cached_ids)}
        parts = []                                  # [n_drafts_of_request, V] each, in the batch's order
        for req_id, n in zip(self.input_batch.req_ids, spec_decode_metadata.num_draft_tokens):
            if n:
                i = index.get(req_id)
                parts.append(cached.new_zeros((n, cached.shape[-1])) if i is None else cached[i, :n])
        return torch.cat(parts, dim=0).contiguous() if parts else None

    GPUModelRunner._get_spec_decode_draft_probs = lookup


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) < 2 or argv[0] not in MODES or argv[1] != "--":
        print(f"usage: python -m specverify.findings.vllm_engine_q_lookup {'|'.join(MODES)} -- AUDIT ARGS...",
              file=sys.stderr)
        return 2
    v._environment()
    v.installed.load("vllm-cpu", "vllm")
    if argv[0] == "guard":
        from specverify.findings.vllm_engine_guard import add_guard
        add_guard()
    else:
        repair_lookup()
    from specverify.cli import main as cli_main
    return cli_main(["audit", *argv[2:]])


if __name__ == "__main__":
    sys.exit(main())
