"""transformers' bitwise level on SmolLM2-135M at a size these 2 shared cores afford, as a findings report.

The battery's `bitwise` check at its standard size (`specverify audit transformers-bitwise --checks
bitwise --size standard`: 32 prompts x 64 tokens x kappa {1, 3, 7} x three proposers, plus padded batch
8) runs 2,048 greedy tokens per configuration; transformers decodes SmolLM2-135M in float32 at
~0.1-0.25 s a token on one loaded core, and the truncated assistant costs ~3x that, so the whole run
is hours here. This runs the same check (`checks.bitwise.run`: the same comparisons and divergence
classes) at `--prompts` x `--tokens` with the given kappas and padded batch, on the repo's prompts,
and writes `reports/transformers-bitwise-<version>/` like `specverify findings run` (audit.json,
README.md):

    specverify findings hf-bitwise [--engine transformers-bitwise[-tiny]] [--prompts 32] [--tokens 64] [--kappas 3] [--batch 8]
    specverify findings hf-bitwise --readme reports/transformers-bitwise-<version>   # README from audit.json

The README carries, besides the verdict table, the figures per proposer and kappa (bitwise identical /
total, token ids identical / total, tokens per target forward), each first divergence (prompt, output
index, tokens, logits, top-2 margin, kind), the seconds and the command (`readme`).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from specverify.verdicts import SKIP

ENGINE = "transformers-bitwise"
ENGINES = (ENGINE, "transformers-bitwise-tiny")
COMMAND = "specverify findings hf-bitwise --engine {engine} --prompts {n_prompts} --tokens {max_tokens} --kappas {kappas} --batch {batch}"


def _progress(message: str) -> None:
    """Each run as it starts, with the wall-clock time, on stderr (a long run shows where it is)."""
    import time
    print(time.strftime("%H:%M:%S"), message, file=sys.stderr, flush=True)


def _divergence_text(d) -> str:
    from specverify.checks.bitwise import Divergence
    return "none" if d is None else Divergence(**d).text()


def figures(audit: dict) -> list:
    """Markdown lines: one table row per run (proposer, kappa, layout) of every bitwise row of `audit`
    (an audit.json), its first divergence, and the rows not covered."""
    lines = ["## Figures", "",
             "| row | run | layout | ids and logits bytes identical | token ids identical | tokens per target forward | "
             "first divergence |", "| --- | --- | --- | --- | --- | --- | --- |"]
    skipped, shape = [], None
    for c in audit["checks"]:
        bw = c.get("data", {}).get("bitwise")
        if bw is None:
            if c["verdict"] == SKIP:
                skipped.append(c)
            continue
        shape = shape or bw
        for run in bw["runs"]:
            per_forward = run["info"].get("tokens_per_target_forward", "-")
            lines.append(f"| `{c['name']}` | {run['spec']} | {run['layout']} | {run['n_identical']}/{run['n_prompts']} | "
                         f"{run['n_tokens_identical']}/{run['n_prompts']} | {per_forward} | "
                         f"{_divergence_text(run['divergence'])} |")
    lines.append("")
    if shape is not None:
        lines += [f"Sizes: {shape['n_prompts']} prompts x {shape['max_tokens']} new tokens, kappa "
                  f"{{{', '.join(map(str, shape['kappas']))}}}; every run compared with plain greedy at batch 1. "
                  "A divergence's kind: `reduction-order (logits only)` = the ids agree and a logits row differs "
                  "in its last bits; `reduction-order` = a token flipped at a relative top-2 margin below "
                  "1e-3; `logic` = a flip at a larger margin. Tokens per target forward: the new tokens of a "
                  "call (the last 8 prompts' call) over the target's forward passes (1 for plain decode, kappa + "
                  "1 if every draft is kept).", ""]
    if skipped:
        lines += ["Not covered:", ""] + [f"- `{c['name']}`: {c['detail']}" for c in skipped] + [""]
    seconds = [f"`{c['name']}` {c['seconds']:.0f} s" for c in audit["checks"] if c.get("data", {}).get("bitwise")]
    base = next((c["data"]["baseline_seconds"] for c in audit["checks"] if "baseline_seconds" in c.get("data", {})), None)
    lines += [f"Wall time: {audit['seconds']:.0f} s in all (model load included)"
              + (f"; the plain batch-1 baseline {base:.0f} s, counted in each greedy row's seconds" if base else "")
              + "; " + ", ".join(seconds) + ".", ""]
    return lines


def readme(folder) -> Path:
    """Rewrite `folder`/README.md from its audit.json: the verdict line, the engine's note
    (`findings.NOTES`), the figures (`figures`), the command that made it and every row."""
    from . import NOTES
    from specverify.format import fmt
    folder = Path(folder)
    audit = json.loads((folder / "audit.json").read_text())
    bw = next(c["data"]["bitwise"] for c in audit["checks"] if c.get("data", {}).get("bitwise"))
    batch = next((int(b) for b in bw["batches"] if b != "1"), None)
    for c in audit["checks"]:
        if c["name"].startswith("batch.invariance") and c.get("data", {}).get("bitwise"):
            batch = int(c["data"]["bitwise"]["batches"][0])
    command = COMMAND.format(engine=audit["engine"], n_prompts=bw["n_prompts"], max_tokens=bw["max_tokens"],
                             kappas=",".join(map(str, bw["kappas"])), batch=batch)
    lines = [f"# {audit['engine']} {audit['engine_version']}: {audit['verdict'].upper()}", "",
             f"transformers' greedy `generate()` on the protocol's bitwise level (seed {audit['seed']}), made by "
             f"`{command}` ({audit['seconds']:.0f} s on this 2-core machine, shared).", ""]
    if audit["engine"] in NOTES:
        lines += [NOTES[audit["engine"]], ""]
    lines += figures(audit)
    lines += ["## Every row", "", "| check | verdict | n | seconds | detail |", "| --- | --- | --- | --- | --- |"]
    for c in audit["checks"]:
        lines.append(f"| `{c['name']}` | {c['verdict']}{' (exact)' if c['exact'] else ''} | {c['n']} | "
                     f"{fmt(c['seconds'], '.1f')} | {c['detail']} |")
    (folder / "README.md").write_text("\n".join(lines) + "\n")
    return folder / "README.md"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="specverify findings hf-bitwise", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", choices=ENGINES, default=ENGINE)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--kappas", default="3", help="comma-separated kappas (default 3)")
    ap.add_argument("--batch", type=int, default=8, help="the padded plain-decode layout (default 8)")
    ap.add_argument("--out", default="reports")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--readme", metavar="FOLDER", help="only rewrite FOLDER/README.md from its audit.json")
    args = ap.parse_args(argv)
    if args.readme:
        if not (Path(args.readme) / "audit.json").is_file():
            print(f"specverify findings hf-bitwise: no audit.json in {args.readme}", file=sys.stderr)
            return 2
        print(readme(args.readme))
        return 0
    from specverify.audit import prepare
    from specverify.checks import bitwise
    from specverify.errors import AdapterError, InputError

    from .report import write
    try:
        kappas = tuple(int(k) for k in args.kappas.split(","))
        if args.prompts < 1 or args.tokens < 1 or args.batch < 2 or not kappas or min(kappas) < 1:
            raise InputError("--prompts and --tokens must be >= 1, --batch >= 2, every kappa >= 1")
        sizes = bitwise.Sizes(args.prompts, args.tokens, kappas, (args.batch,), None)
        ready = prepare(args.engine, {"seed": args.seed, "checks": ["bitwise"], "timeout": 7200.0}, isolated=False,
                        progress=_progress)
        ready.settings = replace(ready.settings, checks=())
        result = ready.run(extra=lambda engine, ctx: bitwise.run(engine, ctx, sizes=sizes))
    except (InputError, AdapterError, ValueError) as exc:
        print(f"specverify findings hf-bitwise: {exc}", file=sys.stderr)
        return 2
    folder = write(result, args.engine, args.out)
    readme(folder)
    print(f"{args.engine} {result.engine_version}: {result.verdict.upper()} in {result.seconds:.0f} s, "
          f"{len(result.checks)} rows -> {folder}")
    return 0
