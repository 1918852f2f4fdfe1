"""One bench run of the q8 path (issue 30): `python reports/bench/run_q8.py [OUT.json]`.

In one process, for each thread count (1, then 2): `specverify.bench.decode.run_bench` over the
paths q8 (8-bit activations, `kernels/cpu_linear_q8.py`), fp32 (the invariant fp32 path) and
llama.cpp (llama-cpp-python on the same GGUF; installed from its wheel with
`LLAMACPP_WHEEL=... bash specverify/findings/install_llamacpp.sh VENV`), plain decode and n-gram
kappa 3, each measuring this machine's read bandwidth in the same run; the load average
(`os.getloadavg`) before and after each. Writes the JSON document after each thread count (a run
stopped later keeps the earlier ones) and prints the tables.

Environment: Q8_BENCH_PROMPTS (default 4), Q8_BENCH_REPEAT (2), Q8_BENCH_PATHS (q8,fp32,llama.cpp),
Q8_BENCH_THREADS (1,2), Q8_BENCH_TOKENS (64): a shorter run on a loaded machine.
"""

import os
import platform
import sys

import numba
import torch

from specverify.bench.decode import check_paths, format_table, run_bench
from specverify.cli.engine_options import backend_for
from specverify.io import write_json

PATHS = tuple(check_paths(os.environ.get("Q8_BENCH_PATHS", "q8,fp32,llama.cpp")))
N_PROMPTS = int(os.environ.get("Q8_BENCH_PROMPTS", "4"))
REPEAT = int(os.environ.get("Q8_BENCH_REPEAT", "2"))
TOKENS = int(os.environ.get("Q8_BENCH_TOKENS", "64"))
THREADS = tuple(int(t) for t in os.environ.get("Q8_BENCH_THREADS", "1,2").split(","))


def main(out: str) -> None:
    from specverify.kernels.cpu_intdot import HOST_MODE, MODE_VNNI
    runs = []
    for threads in THREADS:
        torch.set_num_threads(threads)
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        load_before = os.getloadavg()
        res = run_bench(PATHS, specs=("ngram",), kappas=(3,), n_prompts=N_PROMPTS, max_tokens=TOKENS, repeat=REPEAT,
                        threads=threads, backend_of=lambda name, t=threads: backend_for(name, t),
                        progress=lambda line: print(line, file=sys.stderr, flush=True))
        res["loadavg_before"], res["loadavg_after"] = load_before, os.getloadavg()
        res["q8_block_sums"] = "vpdpbusd (AVX-512 VNNI)" if HOST_MODE == MODE_VNNI else "generic vector IR"
        res["python"] = platform.python_version()
        runs.append(res)
        print(f"threads {threads}, load average before {load_before}, after {res['loadavg_after']}; "
              f"q8 block sums: {res['q8_block_sums']}")
        print(format_table(res), flush=True)
        write_json(out, {"runs": runs})            # after each thread count: a stopped run keeps the first


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "reports/bench/q8-paths.json")
