"""Diagnostic (shim repaired): plain vLLM vs draft-model speculation on the audit's V=4 tiny Llama, 20,000 whole runs each, chi-squared against the float64 law. Usage: SPECVERIFY_CACHE=... VENV/bin/python -m specverify findings vllm-engine-plain-vs-spec none,probabilistic,draft 20000 (the audit's folders must be in the cache)."""
import sys, numpy as np, time
from scipy.stats import chi2


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) != 2:
        print("usage: specverify findings vllm-engine-plain-vs-spec none,probabilistic,draft N", file=sys.stderr)
        return 2
    from specverify.adapters import vllm_cpu_engine as v
    from specverify.models import tiny as tiny_llama
    from specverify.reference import laws
    from specverify.reference.transforms import Transform
    root = "/tmp/vle/cache/tiny-llama"
    t = tiny_llama.tabulated(f"{root}/target-V4-s183928741-x0")
    d = tiny_llama.tabulated(f"{root}/draft-V4-s183928741-x0-n0.5")
    N = int(argv[1])
    for tr in (Transform(), Transform(top_p=0.8)):
        law = laws.target_law(laws.Transformed(t, tr), (1,), 4)
        for method in argv[0].split(","):
            eng = v.VllmCpuEngine(method if method != "none" else v.DRAFT, fixed=True)
            tt = time.time()
            if method == "none":
                llm = eng.engines.get(v.export(t.handle), None, 0, "none")
                SP = eng.engines.SamplingParams
                outs = llm.generate([eng.engines.TokensPrompt(prompt_token_ids=[1])] * N,
                                    [SP(seed=5 + i, max_tokens=4, ignore_eos=True, **v.transform_kwargs(tr)) for i in range(N)], use_tqdm=False)
                tok = np.array([list(o.outputs[0].token_ids) for o in outs])
            else:
                tok, _ = eng.generate(t, d, (1,), 2, tr, 5, N, 4)
            codes = (tok * 4 ** np.arange(3, -1, -1)).sum(1)
            obs = np.bincount(codes, minlength=256).astype(float)
            exact = np.zeros(256)
            for sq, p in zip(law.sequences, law.probs):
                exact[int((np.array(sq) * 4 ** np.arange(3, -1, -1)).sum())] = p
            zero = int(obs[exact == 0].sum())
            m = exact * N >= 5
            stat = float(((obs[m] - exact[m] * N) ** 2 / (exact[m] * N)).sum())
            print(tr, method, "zero-prob runs", zero, "chi2", round(stat, 1), "dof", int(m.sum()) - 1, "p", chi2.sf(stat, m.sum() - 1), round(time.time() - tt, 1), flush=True)
    return 0
