"""`specverify bench`: speculative vs plain decode on the real model, as ratios measured in one run.

Each prompt (input-grounded editing/summarising by default) is run at batch 1 with plain decode and
with each speculative configuration, interleaved, `--repeat` times (the fastest run counts), greedy,
so all produce the same tokens up to the default backend's rounding. Decode
tokens/s excludes the prefill step (timed separately). The speedup is the ratio of decode tokens/s.
"""

from __future__ import annotations

import json
import sys
import time

from specverify.cli.engine_options import add_engine_options, apply_threads


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmark speculative vs plain decode on the real model",
                       description="Speculative vs plain decode tokens/s and acceptance (E, r_i, alpha) on "
                                   "SmolLM2-135M-Instruct, batch 1, greedy; ratios measured in one run.")
    p.add_argument("--spec", action="append", choices=["ngram", "draft"], default=None,
                   help="proposer(s) to compare against plain decode (default: ngram)")
    p.add_argument("--kappa", type=int, action="append", default=None, help="drafts per step (repeatable; default 3 and 7)")
    p.add_argument("--draft-layers", type=int, default=6)
    p.add_argument("--ngram-max", type=int, default=4, help="longest n-gram looked up (default 4)")
    p.add_argument("--ngram-min", type=int, default=2,
                   help="shortest n-gram that may propose (default 2: a 1-token match drafts too often wrongly)")
    p.add_argument("--prompts", default="edit,summarise",
                   help="comma-separated prompt categories from prompts.json (default: edit,summarise)")
    p.add_argument("--n-prompts", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--repeat", type=int, default=2,
                   help="runs of each (prompt, config); the fastest counts (robust to other load on the machine)")
    add_engine_options(p, json_help="print the result as JSON")
    p.set_defaults(func=run)


def _timed(model, tok, prompt_ids, *, spec, kappa, backend, max_tokens, draft_layers, ngram=(3, 1)):
    from specverify.engine.api import RunOptions, SpecOptions, generate
    from specverify.engine.engine import SamplingParams
    stamps = []
    t0 = time.perf_counter()
    res = generate(model, None, [prompt_ids], sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens),
                   spec=SpecOptions(spec, kappa=kappa, draft_layers=draft_layers, ngram_n=ngram[0], ngram_min=ngram[1]),
                   run=RunOptions(backend=backend, eos_token_id=tok.eos_id,
                                  on_step=lambda ev: stamps.append(time.perf_counter())))
    prefill = stamps[0] - t0
    decode = stamps[-1] - stamps[0]
    return res, prefill, decode


def run(args) -> int:
    import torch
    apply_threads(args)
    from specverify.engine.bitwise import encode_prompts, load_prompts
    from specverify.engine.loader import load_smollm2
    from specverify.errors import InputError

    cats = [c.strip() for c in args.prompts.split(",") if c.strip()]
    prompts = load_prompts(args.n_prompts, categories=cats)
    if not prompts:
        raise InputError(f"no prompts in categories {cats}")
    model, tok = load_smollm2(args.backend)
    ids = encode_prompts(tok, prompts)
    configs = [("none", 0)] + [(s, k) for s in (args.spec or ["ngram"]) for k in (args.kappa or [3, 7])]
    acc = {c: {"tokens": 0, "decode_tokens": 0, "decode_s": 0.0, "prefill_s": 0.0, "metrics": []} for c in configs}
    _timed(model, tok, ids[0], spec="none", kappa=0, backend=args.backend, max_tokens=8, draft_layers=1)  # warm-up
    same = 0
    for i, p in enumerate(ids):
        outs = {}
        best = {}
        for _ in range(max(1, args.repeat)):
            for c in configs:                       # configs interleaved, so drift hits all alike
                got = _timed(model, tok, p, spec=c[0], kappa=c[1], backend=args.backend,
                             max_tokens=args.max_tokens, draft_layers=args.draft_layers,
                             ngram=(args.ngram_max, args.ngram_min))
                if c not in best or got[2] < best[c][2]:
                    best[c] = got
        for c in configs:
            res, prefill, decode = best[c]
            a = acc[c]
            n = len(res.tokens[0])
            a["tokens"] += n
            a["decode_tokens"] += n - 1
            a["decode_s"] += decode
            a["prefill_s"] += prefill
            a["metrics"].append(res.metrics)
            outs[c] = res.tokens[0]
        same += all(o == outs[("none", 0)] for o in outs.values())
        if not args.json:
            print(f"prompt {i + 1}/{len(ids)} done", file=sys.stderr)
    base = acc[("none", 0)]
    base_tps = base["decode_tokens"] / base["decode_s"]
    rows = []
    for c in configs:
        a = acc[c]
        tps = a["decode_tokens"] / a["decode_s"]
        ms = a["metrics"]
        verifies = sum(m.num_verifies for m in ms)
        accepted = sum(m.num_accepted for m in ms)
        rej = sum(m.num_rejections for m in ms)
        k = max((len(m.drafted_at) for m in ms), default=0)
        drafted = [sum(m.drafted_at[i] for m in ms if len(m.drafted_at) > i) for i in range(k)]
        acc_at = [sum(m.accepted_at[i] for m in ms if len(m.accepted_at) > i) for i in range(k)]
        rows.append({
            "spec": c[0], "kappa": c[1], "decode_tokens_per_s": tps, "speedup_vs_plain": tps / base_tps,
            "tokens": a["tokens"], "decode_s": a["decode_s"], "prefill_s": a["prefill_s"],
            "E": 1 + accepted / verifies if verifies else None,
            "r_i": [x / d if d else None for x, d in zip(acc_at, drafted)],
            "alpha": accepted / (accepted + rej) if accepted + rej else None,
            "target_passes_per_token": sum(m.num_request_steps for m in ms) / max(1, a["tokens"]),
        })
    result = {"model": "SmolLM2-135M-Instruct (Q4_1 dequantised, fp32)", "backend": args.backend, "batch": 1,
              "threads": torch.get_num_threads(), "ngram": [args.ngram_max, args.ngram_min],
              "draft_layers": args.draft_layers,
              "prompts": cats, "n_prompts": len(ids), "max_tokens": args.max_tokens,
              "outputs_identical_to_plain": f"{same}/{len(ids)}", "configs": rows}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"{'spec':6} {'kappa':>5} {'tok/s':>7} {'speedup':>7} {'E':>5} {'alpha':>6}  r_i")
        for r in rows:
            E = f"{r['E']:.2f}" if r["E"] else "-"
            al = f"{r['alpha']:.2f}" if r["alpha"] is not None else "-"
            ri = " ".join(f"{x:.2f}" for x in r["r_i"] if x is not None)
            print(f"{r['spec']:6} {r['kappa']:>5} {r['decode_tokens_per_s']:7.1f} {r['speedup_vs_plain']:7.2f} {E:>5} {al:>6}  {ri}")
        note = " (the default backend is not batch-invariant: greedy outputs may differ)" if args.backend == "default" else ""
        print(f"outputs identical to plain decode: {same}/{len(ids)}{note}")
    return 0
