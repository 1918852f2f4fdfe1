"""One bench run of the q8 path (issue 30): `python reports/bench/run_q8.py [OUT.json]`.

In one process, for 1 and then 2 threads: `specverify.bench.decode.run_bench` over the paths q8
(8-bit activations), quantized (exact Q4_1/Q8_0 kernels) and fp32 (the invariant fp32 path), plain
decode and n-gram kappa 3, each measuring this machine's read bandwidth in the same run; the load
average (`os.getloadavg`) before and after each. Writes the documents (and prints the tables).
Q8_BENCH_PROMPTS=N runs N prompts instead of 4 (a shorter run on a loaded machine).
"""

import os
import sys

import numba
import torch

from specverify.bench.decode import format_table, run_bench
from specverify.cli.engine_options import backend_for
from specverify.io import write_json

PATHS = ("q8", "quantized", "fp32")
N_PROMPTS = int(os.environ.get("Q8_BENCH_PROMPTS", "4"))


def main(out: str) -> None:
    runs = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        load_before = os.getloadavg()
        res = run_bench(PATHS, specs=("ngram",), kappas=(3,), n_prompts=N_PROMPTS, max_tokens=64, repeat=2, threads=threads,
                        backend_of=lambda name, t=threads: backend_for(name, t),
                        progress=lambda line: print(line, file=sys.stderr, flush=True))
        res["loadavg_before"], res["loadavg_after"] = load_before, os.getloadavg()
        runs.append(res)
        print(f"threads {threads}, load average before {load_before}, after {res['loadavg_after']}")
        print(format_table(res), flush=True)
        write_json(out, {"runs": runs})            # after each thread count: a stopped run keeps the first


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "reports/bench/q8-paths.json")
