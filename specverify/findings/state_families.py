"""Other engines on the state families of issue 28: transformers on the sliding-window family
(`models.sliding`, MistralForCausalLM with sliding_window) and the hybrid family (`models.hybrid`, LFM2:
short-convolution state + attention), MLX-LM on the hybrid family, llama.cpp (llama-cpp-python) on both
as GGUF (`models.gguf_state`) and on the sliding family with a wrapping SWA ring ("sliding-ring").

    python -m specverify.findings.state_families transformers [--out reports] [--runs 600]
    python -m specverify.findings.state_families mlx [--out reports] [--runs 600]
    python -m specverify.findings.state_families llamacpp [--out reports] [--runs 600]

Rows, per engine and family (each names what it compares; the engine's own public API, no patching):

    verify.chunk[<engine>,<family>]       teacher-forced verify width: the cache holds the prompt and the
                                          greedy tokens before offset o (built by single decode steps); one
                                          chunk of KAPPA + 1 greedy tokens on that warm cache vs the single
                                          steps' logits rows, at every offset o of the run. Every logit
                                          within TOL and every argmax equal
    rollback[<engine>,<family>,j=<j>]     the same chunk with the draft at chunk position j wrong, the cache
                                          rolled back to the j accepted drafts by the engine's own rollback
                                          (transformers: `cache.crop`, after `activate_past_recording` as
                                          assisted generation does; MLX-LM: `trim_prompt_cache`), then the
                                          target's token at o + j + 1: its logits vs the single steps' row
    greedy.assisted[<engine>,<family>]    greedy speculative generation with the family's draft model
                                          (kappa KAPPA) vs plain greedy: token-identical
    greedy.oracle[<engine>,<family>]      (engines with an external-draft hook: llama.cpp's draft_model=) the
                                          oracle drafter, plain greedy's own next KAPPA tokens, vs plain greedy
    greedy.adversarial[<engine>,<family>,j=<j>]  the same drafts with chunk position j + 1 wrong: a rejection
                                          and the engine's rollback at every step; token-identical to plain
    engine.runs[<engine>,<family>,...]    the run law at temperature 1 with the draft model, n runs of LAW_LENGTH
                                          tokens from prompts that put the window's edge at each output
                                          offset, vs the float64 law (`battery.window_laws.law_rows`,
                                          Pearson at alpha 0.01 a row)

TOL = 1e-4: the float32 forward of another chunk width differs by ~1e-6 here (measured, in the report),
while the classes these rows exist for (a chunk through the single-token path, a state not rolled back,
a ring slot overwritten) move logits by O(0.1) on these models; each report's negative control (the
rollback row without the rollback) shows that size.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import numpy as np

from specverify.battery.base import FAIL, PASS, SKIP, CheckResult

TOL = 1e-4                 # logits agreement of a chunk and single steps (float32)
KAPPA = 3                  # drafts per verify chunk
VOCAB = 16                 # the teacher-forced and greedy rows' vocabulary
LAW_VOCAB, LAW_LENGTH, LAW_KAPPA = 4, 3, 2
SEED = 0
GREEDY_TOKENS = 24


def family_folders(family: str, vocab: int, seed: int = SEED):
    """(target, draft) folders of a family ("sliding": W = models.sliding.WINDOW; "hybrid": LFM2 with its
    own head; "hybrid-tied": LFM2 whose head is the embedding, the form MLX-LM's lfm2 loads)."""
    if family.startswith("sliding"):
        from specverify.models import sliding
        return sliding.pair_folders(None, vocab, seed)
    from specverify.models import hybrid
    return hybrid.pair_folders(None, vocab, seed, tied=family == "hybrid-tied")


def family_law(family: str, folder):
    from specverify.models import hybrid, sliding
    return (sliding if family.startswith("sliding") else hybrid).tabulated(folder)


def _is_hybrid(family: str) -> bool:
    return family.startswith("hybrid")


def greedy_prompts(vocab: int, seed: int = SEED) -> list:
    """Prompts whose runs cross the window (W = 8) at every output offset: lengths 5 .. 8, and 13."""
    rng = np.random.default_rng(seed)
    return [tuple(int(t) for t in rng.integers(0, vocab, n)) for n in (5, 6, 7, 8, 13)]


def law_prompts(vocab: int, seed: int = SEED) -> list:
    from specverify.battery.window_laws import edge_prompts
    from specverify.models.sliding import WINDOW
    return edge_prompts(WINDOW, LAW_LENGTH, 2 * WINDOW, vocab, seed)


# ---- the per-engine primitives ----------------------------------------------------------------------

class HF:
    """transformers 5.x: the family folders as float32 models (eager attention), their caches."""

    name = "transformers"

    def __init__(self):
        import torch
        import transformers
        torch.set_num_threads(1)
        self.torch, self.version = torch, transformers.__version__

    def load(self, family, folder):
        from specverify.models import hybrid
        if _is_hybrid(family):
            m = hybrid.load(folder, "float32")
        else:
            from transformers import MistralForCausalLM
            m = MistralForCausalLM.from_pretrained(str(folder), dtype=self.torch.float32,
                                                   attn_implementation="eager").eval()
        m.generation_config.eos_token_id = m.generation_config.bos_token_id = None
        m.generation_config.pad_token_id = 0
        return m

    def step(self, model, cache, ids):
        """(logits [n, V] float64 of the fed ids, the cache) after feeding ids on `cache` (None: a new one)."""
        torch = self.torch
        with torch.no_grad():
            out = model(torch.tensor([list(ids)]), past_key_values=cache, use_cache=True)
        cache = getattr(out, "past_key_values", None) or getattr(out, "cache", None)
        return out.logits[0].double().numpy(), cache

    @staticmethod
    def fork(cache, recording: bool):
        c = copy.deepcopy(cache)
        if recording:
            c.activate_past_recording()
        return c

    @staticmethod
    def roll_back(cache, n_remove: int):
        if n_remove:
            cache.crop(-n_remove)
        return cache

    def greedy(self, model, prompt, n, draft=None):
        torch = self.torch
        kw = {} if draft is None else {"assistant_model": draft, "num_assistant_tokens": KAPPA,
                                       "num_assistant_tokens_schedule": "constant"}
        with torch.no_grad():
            ids = torch.tensor([list(prompt)])
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n,
                                 min_new_tokens=n, **kw)
        return [int(t) for t in out[0, len(prompt):]]

    def sampler(self, model, draft, n, length):
        torch = self.torch

        def sample(prompt, i):
            out = np.zeros((n, length), np.int64)
            for r in range(n):
                torch.manual_seed(SEED + 1000 * i + r)
                with torch.no_grad():
                    ids = torch.tensor([list(prompt)])        # the mask given: token 0 is the pad id, not padding
                    g = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0,
                                       top_k=0, top_p=1.0,
                                       max_new_tokens=length, min_new_tokens=length, assistant_model=draft,
                                       num_assistant_tokens=LAW_KAPPA, num_assistant_tokens_schedule="constant")
                out[r] = g[0, len(prompt):].numpy()
            return out
        return sample


class MLX:
    """MLX-LM 0.32: the family folders converted in float32 (`adapters.mlx.export`), its prompt caches."""

    name = "mlx-lm"

    def __init__(self):
        from specverify.adapters import mlx as adapter
        self.adapter = adapter
        self.mx, self.mlx_lm, self.gen, self.sample_utils = adapter._modules()
        self.version = adapter.version()
        from mlx_lm.models import cache as cache_mod
        self.cache_mod = cache_mod

    def load(self, family, folder):
        return self.adapter.load(self.adapter.export(folder))

    def step(self, model, cache, ids):
        mx = self.mx
        model = model[0]
        if cache is None:
            cache = self.cache_mod.make_prompt_cache(model)
        logits = model(mx.array([list(ids)]), cache=cache)
        return np.array(logits[0].astype(mx.float32)).astype(np.float64), cache

    @staticmethod
    def fork(cache, recording: bool):
        return copy.deepcopy(cache)

    def roll_back(self, cache, n_remove: int):
        if n_remove:
            if not self.cache_mod.can_trim_prompt_cache(cache):
                raise NotImplementedError("MLX-LM: the prompt cache of this model cannot be trimmed "
                                          "(can_trim_prompt_cache is False)")
            self.cache_mod.trim_prompt_cache(cache, n_remove)
        return cache

    def greedy(self, model, prompt, n, draft=None):
        sampler = self.sample_utils.make_sampler(temp=0.0)
        kw = {} if draft is None else {"draft_model": draft[0], "num_draft_tokens": KAPPA}
        return [int(r.token) for r in self.gen.stream_generate(model[0], model[1], list(map(int, prompt)), max_tokens=n,
                                                               sampler=sampler, **kw)]

    def sampler(self, model, draft, n, length):
        mx = self.mx
        sampler = self.sample_utils.make_sampler(temp=1.0)

        def sample(prompt, i):
            out = np.zeros((n, length), np.int64)
            for r in range(n):
                mx.random.seed(SEED + 1000 * i + r)
                toks = [int(x.token) for x in self.gen.stream_generate(model[0], model[1], list(map(int, prompt)),
                                                                       max_tokens=length, draft_model=draft[0],
                                                                       num_draft_tokens=LAW_KAPPA, sampler=sampler)]
                out[r, :len(toks)] = toks
            return out
        return sample


class LlamaCpp:
    """llama-cpp-python 0.3.36 (llama.cpp): the families as f32 GGUF files (`models.gguf_state`: the
    sliding family as arch "granite_swa", the hybrid as "lfm2"), f32 KV cache, one thread.

    Families: "sliding" (llama-cpp-python's default `swa_full=True`: the SWA cache keeps every cell),
    "sliding-ring" (`swa_full=False`: the SWA cache is a ring of RING_CELLS cells whose masked cells
    are reused, with prompts long enough that every run wraps it), "hybrid" (LFM2).

    A "cache" is a handle on the context's memory: the live one, or a snapshot taken when it is forked
    (`Llama.save_state`, restored with `load_state` before a step on it). The rollback is the one
    llama-cpp-python's speculative loop uses on a rejection (llama.py `Llama.generate`):
    `llama_memory_seq_rm(mem, 0, n_tokens, -1)` and `n_tokens` set back. Its boolean result is
    checked here (generate ignores it): False raises NotImplementedError, the refusal.
    """

    name = "llama.cpp"
    N_CTX = 512                  # positions a context holds
    N_BATCH = 8                  # n_batch = n_ubatch: a verify chunk (KAPPA + 1) is one ubatch
    RING_CELLS = 256             # the SWA cache with swa_full=False, n_swa 8, n_ubatch 8 (llama.cpp pads to 256)
    F32 = 0                      # GGML_TYPE_F32 for type_k / type_v

    def __init__(self):
        from specverify.adapters import llamacpp as adapter
        self.adapter = adapter
        self.llama_cpp = adapter.load("llama_cpp")
        self.spec = adapter.load("llama_cpp.llama_speculative")
        self.version = self.llama_cpp.__version__

    class Handle:
        def __init__(self, model, snap=None):
            self.model, self.snap = model, snap

    def load(self, family, folder):
        from specverify.models import gguf_state
        path = gguf_state.export_hybrid(folder) if _is_hybrid(family) else gguf_state.export_sliding(folder)
        kw = {"swa_full": False} if family == "sliding-ring" else {}
        llm = self.llama_cpp.Llama(str(path), n_ctx=self.N_CTX, n_batch=self.N_BATCH, n_ubatch=self.N_BATCH,
                                   n_threads=1, logits_all=True, type_k=self.F32, type_v=self.F32, verbose=False, **kw)
        llm.family, llm.live = family, None
        llm.config = type("Config", (), {"vocab_size": int(llm.n_vocab())})()
        return llm

    def prompts(self, family, vocab, seed=SEED):
        """Greedy prompts; on "sliding-ring" ~RING_CELLS long, so that every run wraps the SWA ring."""
        if family != "sliding-ring":
            return greedy_prompts(vocab, seed)
        rng = np.random.default_rng(seed)
        return [tuple(int(t) for t in rng.integers(0, vocab, n))
                for n in (self.RING_CELLS - 16, self.RING_CELLS - 8, self.RING_CELLS - 3, self.RING_CELLS + 5)]

    def _make_live(self, llm, cache):
        if cache is None:
            llm.reset()                                         # n_tokens 0; eval's seq_rm(0, 0, -1) clears the rest
        elif llm.live is not cache:
            if cache.snap is None:
                raise RuntimeError("llama.cpp handle: a consumed cache was stepped on again (fork it first)")
            llm.load_state(cache.snap)

    def step(self, llm, cache, ids):
        self._make_live(llm, cache)
        n0 = llm.n_tokens
        llm.eval([int(t) for t in ids])
        logits = np.array(llm.scores[n0:llm.n_tokens], np.float64)      # [len(ids), V]
        if cache is not None and cache.snap is None:
            cache.model = None                                  # its state moved on: consumed
        llm.live = self.Handle(llm)
        return logits, llm.live

    def fork(self, cache, recording: bool):
        llm = cache.model
        if cache.snap is None:
            cache.snap = llm.save_state()
        return self.Handle(llm, cache.snap)

    def roll_back(self, cache, n_remove: int):
        if not n_remove:
            return cache
        llm = cache.model
        self._make_live(llm, cache)
        keep = llm.n_tokens - n_remove
        if not llm._ctx.kv_cache_seq_rm(-1, keep, -1):
            raise NotImplementedError(f"llama.cpp: llama_memory_seq_rm(seq 0, p0 {keep}, p1 -1) returned false "
                                      f"(partial removal refused by this model's memory)")
        llm.n_tokens = keep
        llm.live = self.Handle(llm)
        return llm.live

    def generate(self, llm, prompt, n, sampling, draft=None):
        """The first n tokens of `Llama.generate(prompt)` from a reset context, with `draft` (a
        LlamaDraftModel or None) as its draft model for this call."""
        llm.draft_model = draft
        llm.reset()
        llm.live = None
        out = []
        try:
            for tok in llm.generate([int(t) for t in prompt], reset=True, **sampling):
                out.append(int(tok))
                if len(out) == n:
                    break
        finally:
            llm.draft_model = None
        return out

    def greedy(self, model, prompt, n, draft=None):
        drafter = None if draft is None else self.adapter.ModelDraft(draft, KAPPA)
        return self.generate(model, prompt, n, self.adapter.GREEDY, drafter)

    def scripted(self, base, prompt_len, j, vocab):
        """An external drafter through llama-cpp-python's `draft_model=` hook: after m emitted tokens it
        proposes base[m:m + KAPPA] (the plain greedy run `base`), with the draft at chunk position j + 1
        replaced by (token + 1) mod V when j is not None: j None is the oracle, j the adversarial drafter."""
        spec = self.spec

        class Scripted(spec.LlamaDraftModel):
            def __call__(self, input_ids, /, **kwargs):
                m = len(input_ids) - prompt_len                # tokens emitted so far, the last one included
                drafts = list(base[m:m + KAPPA])
                if j is not None and j < len(drafts):
                    drafts[j] = (drafts[j] + 1) % vocab
                return np.asarray(drafts, np.intc)
        return Scripted()

    def sampler(self, model, draft, n, length):
        sampling = dict(self.adapter.GREEDY, temp=1.0)
        drafter = self.adapter.ModelDraft(draft, LAW_KAPPA, sampling)

        def sample(prompt, i):
            out = np.zeros((n, length), np.int64)
            for r in range(n):
                seed = SEED + 1000 * i + r
                model.set_seed(seed)
                drafter.reseed(seed)
                toks = self.generate(model, prompt, length, sampling, drafter)
                out[r, :len(toks)] = toks
            return out
        return sample


# MLX-LM 0.32.2's lfm2 has no separate head (it always uses the embedding): the untied "hybrid" folder
# fails to load ("Received 1 parameters not in model: lm_head.weight"), so MLX-LM runs "hybrid-tied"
ENGINES = {"transformers": (HF, ("sliding", "hybrid")), "mlx": (MLX, ("hybrid", "hybrid-tied")),
           "llamacpp": (LlamaCpp, ("sliding", "sliding-ring", "hybrid"))}
OPTIONAL = {"transformers": ("hybrid-tied",), "mlx": (), "llamacpp": ()}      # runs when named in --families


# ---- the rows ------------------------------------------------------------------------------------------

def _singles(eng, model, seq, n_prompt):
    """Logits rows [len(seq) - n_prompt + 1, V] of plain decode of seq (prefill of its first n_prompt tokens,
    then one token a step) and the cache after each step (deep copies, index = tokens fed - n_prompt)."""
    rows, caches = [], []
    logits, cache = eng.step(model, None, seq[:n_prompt])
    rows.append(logits[-1])
    caches.append(eng.fork(cache, False))
    for t in seq[n_prompt:]:
        logits, cache = eng.step(model, cache, [t])
        rows.append(logits[-1])
        caches.append(eng.fork(cache, False))
    return np.asarray(rows), caches


def teacher_forced_rows(eng, family, model, prompts, label, *, control=False) -> list[CheckResult]:
    """verify.chunk and rollback[j] rows (module docstring); `control`: the rollback rows without the
    rollback (the negative control: they must fail)."""
    width = {"n": 0, "max_abs": 0.0, "argmax_diff": 0, "first": None}
    back = {j: {"n": 0, "max_abs": 0.0, "argmax_diff": 0, "first": None} for j in range(KAPPA)}
    t0 = time.perf_counter()
    refused = None                                                     # the engine's own refusal to roll back
    for pi, prompt in enumerate(prompts):
        seq = list(prompt) + eng.greedy(model, prompt, GREEDY_TOKENS)
        rows, caches = _singles(eng, model, seq, len(prompt))          # rows[k]: after len(prompt) + k tokens
        for o in range(len(prompt), len(seq) - KAPPA - 1):
            k0 = o - len(prompt)                                       # caches[k0] holds seq[:o]
            if not control:
                logits, _ = eng.step(model, eng.fork(caches[k0], True), seq[o:o + KAPPA + 1])
                want = rows[k0 + 1:k0 + KAPPA + 2]
                _tally(width, logits, want, (pi, o))
            for j in range(KAPPA if refused is None else 0):
                chunk = list(seq[o:o + KAPPA + 1])
                chunk[1 + j] = (chunk[1 + j] + 1) % model_vocab(model)  # the draft at chunk position j wrong
                cache = eng.fork(caches[k0], True)
                _, cache = eng.step(model, cache, chunk)
                if not control:
                    try:
                        cache = eng.roll_back(cache, KAPPA - j)         # keep the fed token and the j accepted
                    except NotImplementedError as exc:
                        refused = str(exc)
                        break
                logits, _ = eng.step(model, cache, [seq[o + 1 + j]])    # the target's own token there
                _tally(back[j], logits[-1:], rows[k0 + j + 2:k0 + j + 3], (pi, o))
    seconds = time.perf_counter() - t0
    out = []
    if not control:
        out.append(_row(f"verify.chunk[{label}]", width, seconds / (KAPPA + 1),
                        f"a chunk of {KAPPA + 1} tokens on the warm cache vs single decode steps"))
    for j in range(KAPPA):
        if refused is not None:
            out.append(CheckResult(f"rollback[{label},j={j}]", SKIP, exact=False, data={"not_covered": True},
                                   detail=f"not covered: the engine refuses the rollback: {refused}"))
            continue
        what = (f"the chunk with chunk position {j + 1} wrong, rolled back to {j} accepted drafts, then the "
                f"target's token, vs plain decode" if not control else
                f"negative control: the chunk with position {j + 1} wrong and NO rollback, vs plain decode")
        r = _row(f"rollback[{label},j={j}{',no-rollback' if control else ''}]", back[j], seconds / (KAPPA + 1), what)
        if control:
            r = CheckResult(r.name, PASS if r.verdict == FAIL else FAIL, n=r.n, exact=False, seconds=r.seconds,
                            detail=f"{r.detail} (must differ: {'it does' if r.verdict == FAIL else 'it does NOT'})",
                            data=r.data)
        out.append(r)
    return out


def model_vocab(model) -> int:
    cfg = getattr(model, "config", None)
    if cfg is None and isinstance(model, tuple):
        cfg = getattr(model[0], "args", None)
    return int(getattr(cfg, "vocab_size"))


def _tally(acc, got, want, where):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    d = float(np.abs(got - want).max())
    acc["n"] += int(want.shape[0])
    if d > acc["max_abs"]:
        acc["max_abs"] = d
    diff = int((got.argmax(-1) != want.argmax(-1)).sum())
    acc["argmax_diff"] += diff
    if acc["first"] is None and (d > TOL or diff):
        acc["first"] = {"prompt": where[0], "offset": where[1], "max_abs_diff": d}


def _row(name, acc, seconds, what) -> CheckResult:
    ok = acc["n"] > 0 and acc["max_abs"] <= TOL and acc["argmax_diff"] == 0
    verdict = PASS if ok else (SKIP if acc["n"] == 0 else FAIL)
    detail = (f"{what}: {acc['n']} logits rows, max |diff| {acc['max_abs']:.3g} (tolerance {TOL:g}), "
              f"{acc['argmax_diff']} argmax differences")
    if acc["first"]:
        detail += f"; first beyond tolerance: prompt {acc['first']['prompt']} offset {acc['first']['offset']}"
    return CheckResult(name, verdict, n=acc["n"], exact=False, seconds=seconds, detail=detail, data=dict(acc))


def greedy_row(eng, model, draft, prompts, label) -> CheckResult:
    t0 = time.perf_counter()
    same, first = 0, None
    for i, p in enumerate(prompts):
        a = eng.greedy(model, p, GREEDY_TOKENS)
        try:
            b = eng.greedy(model, p, GREEDY_TOKENS, draft)
        except RuntimeError as exc:          # the engine fails mid-run (llama.cpp on a refused rollback)
            return CheckResult(f"greedy.assisted[{label}]", FAIL, n=i + 1, exact=True, seconds=time.perf_counter() - t0,
                               detail=f"greedy speculative decoding (the family's draft, kappa {KAPPA}) raised on "
                                      f"prompt {i}: {type(exc).__name__}: {exc}")
        same += a == b
        if a != b and first is None:
            j = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            first = f"prompt {i} output {j}: plain {a[j:j + 3]} vs speculative {b[j:j + 3]}"
    detail = (f"greedy speculative decoding (the family's draft, kappa {KAPPA}) vs plain greedy: {same}/{len(prompts)} "
              f"runs of {GREEDY_TOKENS} tokens token-identical" + (f"; first difference {first}" if first else ""))
    return CheckResult(f"greedy.assisted[{label}]", PASS if same == len(prompts) else FAIL, n=len(prompts), exact=True,
                       seconds=time.perf_counter() - t0, detail=detail)


def scripted_rows(eng, model, prompts, label) -> list[CheckResult]:
    """Through an engine's external-draft hook (`eng.scripted`): greedy.oracle[<label>] -- the oracle
    drafter (the plain greedy run's own tokens, so every verify step is a full KAPPA + 1 chunk) -- and
    greedy.adversarial[<label>,j=<j>] -- those tokens with the draft at chunk position j + 1 wrong, so
    every step rejects there and rolls back. Each: greedy speculative output token-identical to plain
    greedy on every prompt; an error of the engine mid-run is a FAIL naming it."""
    vocab = model_vocab(model)
    out = []
    bases = [eng.greedy(model, p, GREEDY_TOKENS + KAPPA + 1) for p in prompts]   # drafts reach past the end
    for j in (None, *range(KAPPA)):
        name = f"greedy.oracle[{label}]" if j is None else f"greedy.adversarial[{label},j={j}]"
        what = ("the oracle drafter (plain greedy's own tokens, kappa %d)" % KAPPA if j is None else
                f"the adversarial drafter (plain greedy's tokens, chunk position {j + 1} wrong, kappa {KAPPA})")
        t0 = time.perf_counter()
        same, first, error = 0, None, None
        for i, (p, base) in enumerate(zip(prompts, bases)):
            try:
                got = eng.generate(model, p, GREEDY_TOKENS, eng.adapter.GREEDY, eng.scripted(base, len(p), j, vocab))
            except RuntimeError as exc:
                error = f"prompt {i}: {type(exc).__name__}: {exc}"
                break
            want = base[:GREEDY_TOKENS]
            same += got == want
            if got != want and first is None:
                k = next((k for k, (x, y) in enumerate(zip(want, got)) if x != y), min(len(want), len(got)))
                first = f"prompt {i} output {k}: plain {want[k:k + 3]} vs speculative {got[k:k + 3]}"
        if error:
            out.append(CheckResult(name, FAIL, n=len(prompts), exact=True, seconds=time.perf_counter() - t0,
                                   detail=f"{what}: the engine raised on {error}"))
            continue
        out.append(CheckResult(name, PASS if same == len(prompts) else FAIL, n=len(prompts), exact=True,
                               seconds=time.perf_counter() - t0,
                               detail=f"{what} vs plain greedy: {same}/{len(prompts)} runs of {GREEDY_TOKENS} tokens "
                                      f"token-identical" + (f"; first difference {first}" if first else "")))
    return out


NO_LAWS = {"sliding-ring"}      # law prompts (<= 2 W tokens) never wrap a ring of 256 cells: the laws of "sliding"


def run_engine(engine: str, runs: int, families=None) -> dict:
    from specverify.battery.window_laws import law_rows
    cls, known = ENGINES[engine]
    families = known if families is None else families
    eng = cls()
    out = {"engine": eng.name, "version": eng.version, "families": {}}
    for family in families:
        label = f"{eng.name},{family}"
        rows, notes = [], []
        target, draft = family_folders(family, VOCAB)
        try:
            model, dmodel = eng.load(family, target), eng.load(family, draft)
        except Exception as exc:  # noqa: BLE001 - an engine that cannot load a family: that is the finding
            out["families"][family] = {"loaded": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}", "rows": []}
            continue
        prompts = eng.prompts(family, VOCAB) if hasattr(eng, "prompts") else greedy_prompts(VOCAB)
        steps = [lambda: teacher_forced_rows(eng, family, model, prompts, label),
                 lambda: teacher_forced_rows(eng, family, model, prompts[:2], label, control=True),
                 lambda: [greedy_row(eng, model, dmodel, prompts, label)]]
        if hasattr(eng, "scripted"):
            steps.append(lambda: scripted_rows(eng, model, prompts, label))
        for fn in steps:
            try:
                rows += fn()
            except (NotImplementedError, ValueError) as exc:      # the engine refuses speculation on this model
                notes.append(f"{type(exc).__name__}: {str(exc)[:300]}")
        if family in NO_LAWS:
            notes.append(f"engine.runs not run on {family}: law prompts of <= 2 W tokens never wrap its SWA ring; "
                         f"the same engine's laws are those of 'sliding'")
            out["families"][family] = {"loaded": True, "rows": [r.to_dict() if hasattr(r, "to_dict") else vars(r)
                                                                for r in rows], "notes": notes}
            continue
        lt, ld = family_folders(family, LAW_VOCAB, SEED + 5)
        law = family_law(family, lt)
        lm, ldm = eng.load(family, lt), eng.load(family, ld)
        try:
            rows += law_rows(eng.sampler(lm, ldm, runs, LAW_LENGTH), law, law_prompts(LAW_VOCAB), n=runs,
                             length=LAW_LENGTH, label=f"{label},kappa={LAW_KAPPA}")
        except Exception as exc:  # noqa: BLE001 - a speculative sampler the engine refuses for this family
            notes.append(f"engine.runs not run: {type(exc).__name__}: {str(exc)[:300]}")
        gap = float32_gap(eng, family, lt, law)
        out["families"][family] = {"loaded": True, "rows": [r.to_dict() if hasattr(r, "to_dict") else vars(r) for r in rows],
                                   "notes": notes, "float32_vs_float64_max_abs": gap}
    return out


def float32_gap(eng, family, folder, law) -> float:
    """Max |float32 logits of the engine - float64 law| over the law prompts' next-token rows."""
    m = eng.load(family, folder)
    gap = 0.0
    for p in law_prompts(LAW_VOCAB):
        logits, _ = eng.step(m, None, p)
        gap = max(gap, float(np.abs(logits[-1][:law.vocab_size] - law.logits(tuple(p))).max()))
    return gap


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specverify.findings.state_families", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("engine", choices=sorted(ENGINES))
    ap.add_argument("--out", default="reports")
    ap.add_argument("--runs", type=int, default=600, help="runs per law row (default 600)")
    ap.add_argument("--families", default=None, help="comma-separated families (default: every one the engine runs)")
    args = ap.parse_args(argv)
    if args.runs < 1:
        print("state_families: --runs must be >= 1", file=sys.stderr)
        return 2
    from specverify.io import write_atomic
    fams = None if args.families is None else tuple(args.families.split(","))
    bad = [f for f in fams or () if f not in ENGINES[args.engine][1] + OPTIONAL[args.engine]]
    if bad:
        print(f"state_families: family {bad[0]!r} not run on {args.engine} (known: {', '.join(ENGINES[args.engine][1])})",
              file=sys.stderr)
        return 2
    res = run_engine(args.engine, args.runs, fams)
    folder = Path(args.out) / f"{args.engine}-state-{res['version']}"
    if fams is not None:
        folder = folder / "-".join(fams)
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(str(folder / "audit.json"), json.dumps(res, indent=1, default=str))
    lines = [f"{res['engine']} {res['version']} on the state families", ""]
    for family, f in res["families"].items():
        if not f["loaded"]:
            lines.append(f"{family}: not loaded: {f['error']}")
            continue
        gap = f.get("float32_vs_float64_max_abs")
        lines.append(f"{family}:" + ("" if gap is None else f" float32 vs float64 max |logit diff| {gap:.3g}"))
        for r in f["rows"]:
            lines.append(f"  {r['verdict'].upper():5s} {r['name']}: {r['detail']}")
        for note in f["notes"]:
            lines.append(f"  note: {note}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
