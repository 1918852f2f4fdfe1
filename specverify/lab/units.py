"""The lab's units of measurement: what each measures, how it is run (`UNITS`, a table from a unit's
kind to its function), and the list of units of a configuration (`unit_names`).

A unit is named `kind` or `kind/<n>`:

    step_c        c = t_draft / t_target: one draft-model step over one target step, both a single
                  decode position at batch 1 (interleaved rounds, fastest of each); the n-gram proposer's
                  cost is one lookup over one target step
    knee          t(T): a target forward over T positions (one sequence), T = 1 .. 512; T* from
                  the fit t1 max(1, T/T*)
    depth/<L>     a draft of the target's first L layers: c(L) and its acceptance at the sweep kappa
                  (one per depth of the scan, when no --draft-layers is given)
    kappa/<i>     prompt i: plain decode (before and after), then every proposer at every kappa,
                  end to end through engine.api.generate: decode tokens/s, E, r_i, alpha
    batch/<B>     step times at B concurrent sequences: plain (B positions), verify (B (kappa+1)),
                  one draft pass (B positions) -> S(B) = E t_plain / (t_verify + kappa t_draft)
    e2e/<B>       end-to-end plain vs speculative at batch B (a check of the step-time model)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specverify.errors import InputError

from . import measure as M
from .config import LabConfig

CATEGORIES = ("edit", "summarise", "chat", "code")


@dataclass
class Subject:
    """What the lab measures: the model, its prompts (token ids), the EOS id and a one-line description."""
    model: object
    prompts: list
    eos: int | None
    description: str


def load_subject(config: LabConfig) -> Subject:
    """The model and the encoded prompts the lab measures (a tiny random model in quick mode)."""
    if config.quick:
        from specverify.engine.model import random_llama
        model = random_llama(seed=config.seed, backend=config.backend)
        rng = np.random.default_rng(config.seed)
        prompts = []
        for i in range(max(2, config.prompts_per_category * 2)):
            motif = rng.integers(0, model.vocab_size, 5).tolist()
            prompts.append(rng.integers(0, model.vocab_size, 4).tolist() + motif * 3)
        return Subject(model, prompts, None, f"random-llama (seed {config.seed}, {model.config.n_layers} layers, quick mode)")
    from specverify.models.prompts import encode_prompts, load_prompts
    from specverify.engine.loader import load_smollm2
    model, tok = load_smollm2(config.backend)
    chosen = []
    for cat in CATEGORIES:
        chosen.extend(load_prompts(None, categories=[cat])[:config.prompts_per_category])
    if not chosen:
        raise InputError("the engine's prompt set is empty")
    return Subject(model, encode_prompts(tok, chosen), tok.eos_id, "SmolLM2-135M-Instruct (Q4_1 GGUF dequantised to fp32)")


def _single_step_times(model, config, L, rounds, bar) -> dict:
    """{"target": [s per round], "draft": [...]}: one decode position at batch 1 on the target and on
    its first L layers, interleaved."""
    target = M.StepTimer(model, config.clock)
    draft = M.StepTimer(model.draft_view(L), config.clock)
    ctx = config.ctx_len
    times = M.interleaved({"target": lambda: target(1, 1, ctx), "draft": lambda: draft(1, 1, ctx)},
                          rounds=rounds, bar=bar)
    target.release()
    draft.release()
    return times


def _measure_c(model, config, prompt_ids, L, bar) -> dict:
    times = _single_step_times(model, config, L, max(5, 3 * config.rounds), bar)
    ratios = [d / t for d, t in zip(times["draft"], times["target"])]
    seq = list(prompt_ids[0]) * 2
    t_lookup = M.ngram_lookup_seconds(seq, max(config.kappas))
    t_t, t_d = M.best(times["target"]), M.best(times["draft"])
    # c: fastest draft step over fastest target step (the least-disturbed round of each); one n-gram
    # lookup proposes all kappa tokens, so c_ngram is its cost per drafted token
    return {"t_target": times["target"], "t_draft": times["draft"], "c_draft": t_d / t_t,
            "c_draft_median_of_ratios": M.median(ratios),
            "t_ngram_lookup": t_lookup, "c_ngram": t_lookup / (max(config.kappas) * t_t),
            "ngram_tokens": len(seq), "draft_layers": L}


def _measure_knee(model, config, bar) -> dict:
    timer = M.StepTimer(model, config.clock)
    fns = {str(T): (lambda T=T: timer(1, T, config.ctx_len)) for T in config.knee_T}
    times = M.interleaved(fns, rounds=config.rounds, bar=bar)
    timer.release()
    return {"T": list(config.knee_T), "t": [times[str(T)] for T in config.knee_T]}


def _measure_depth(model, config, prompts, eos, L, bar) -> dict:
    """A draft of the target's first L layers: c(L) and its acceptance at the sweep kappa."""
    times = _single_step_times(model, config, L, max(3, config.rounds), bar)
    runs = []
    for ids in prompts[:config.depth_prompts]:
        r = M.run_generate(model, [ids], spec="draft", kappa=config.sweep_kappa, max_tokens=config.max_tokens,
                           draft_layers=L, eos_token_id=eos, temperature=config.temperature, seed=config.seed,
                           backend=config.backend).to_dict()
        r.pop("tokens")
        runs.append(r)
    return {"L": L, "c": M.best(times["draft"]) / M.best(times["target"]), "t_target": times["target"],
            "t_draft": times["draft"], "runs": runs}


def _measure_prompt(model, config, ids, eos, L) -> dict:
    def one(spec, kappa):
        return M.run_generate(model, [ids], spec=spec, kappa=kappa, max_tokens=config.max_tokens,
                              draft_layers=L, eos_token_id=eos, temperature=config.temperature,
                              seed=config.seed, backend=config.backend).to_dict()
    out = {"plain": [one("none", 0)]}
    for p in config.proposers:
        for k in config.kappas:
            out[f"{p}/{k}"] = one(p, k)
    out["plain"].append(one("none", 0))
    return out


def _measure_batch(model, config, B, L) -> dict:
    target = M.StepTimer(model, config.clock)
    draft = M.StepTimer(model.draft_view(L), config.clock)
    k, ctx = config.sweep_kappa, config.ctx_len
    times = M.interleaved({"plain": lambda: target(B, 1, ctx), "verify": lambda: target(B, k + 1, ctx),
                           "draft": lambda: draft(B, 1, ctx)}, rounds=config.rounds, warmup=1)
    target.release()
    draft.release()
    return times


def _measure_e2e(model, config, prompts, eos, B, L) -> dict:
    ids = [prompts[i % len(prompts)] for i in range(B)]
    out = {}
    for spec in ("none", *config.proposers, "none"):
        r = M.run_generate(model, ids, spec=spec, kappa=config.sweep_kappa, max_tokens=config.e2e_max_tokens,
                           draft_layers=L, eos_token_id=eos, ignore_eos=True, batch=B,
                           temperature=config.temperature, seed=config.seed, backend=config.backend).to_dict()
        r.pop("tokens")
        out.setdefault(spec, []).append(r)
    return out


# unit kind -> fn(subject, config, n, L, bar): measure one unit. n is the number in the unit's name
# ("batch/8" -> 8; None for "knee" and "step_c"), L the draft's layers (None until step_c), bar the lab's bar
UNITS = {
    "knee": lambda s, config, n, L, bar: _measure_knee(s.model, config, bar),
    "depth": lambda s, config, n, L, bar: _measure_depth(s.model, config, s.prompts, s.eos, n, bar),
    "step_c": lambda s, config, n, L, bar: _measure_c(s.model, config, s.prompts, L, bar),
    "kappa": lambda s, config, n, L, bar: _measure_prompt(s.model, config, s.prompts[n], s.eos, L),
    "batch": lambda s, config, n, L, bar: _measure_batch(s.model, config, n, L),
    "e2e": lambda s, config, n, L, bar: _measure_e2e(s.model, config, s.prompts, s.eos, n, L),
}


def unit_names(config: LabConfig, depths: list, n_prompts: int) -> list:
    """The units of a lab, in the order they are measured (the depth scan and the knee before step_c,
    which needs the chosen draft)."""
    return (["knee"] + [f"depth/{L}" for L in depths] + ["step_c"] + [f"kappa/{i}" for i in range(n_prompts)]
            + [f"batch/{B}" for B in config.batches] + [f"e2e/{B}" for B in config.e2e_batches])


def measure(subject: Subject, config: LabConfig, unit: str, L: int | None, bar) -> dict:
    """The value of one unit (JSON-able), measured now."""
    kind, _, n = unit.partition("/")
    return UNITS[kind](subject, config, int(n) if n else None, L, bar)
