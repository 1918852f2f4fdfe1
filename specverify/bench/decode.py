"""Plain vs speculative decode on the real model, over several decode paths, as ratios measured in
one run: the timing harness behind `specverify bench` (`specverify/cli/bench.py` parses, calls
`run_bench`, prints).

A *path* is how SmolLM2-135M-Instruct (the bundled Q4_1 GGUF) is run:

    q8            our engine, invariant-q8 backend: activations rounded to 8-bit blocks of 32 and
                  exact integer dot products against the Q4_1 blocks and the Q8_0 head
                  (`kernels/cpu_linear_q8`); batch-invariant, but not the fp32 path's logits
    quantized     our engine, invariant backend, Q4_1/Q8_0 blocks dequantized inside the kernels
    fp32          our engine, invariant backend, weights dequantized to fp32 at load
    default       our engine, torch's default ops (not batch-invariant), fp32 weights
    transformers  transformers' own Llama from the same GGUF (fp32, eager attention); its n-gram
                  speculation is prompt lookup (`prompt_lookup_num_tokens` = kappa)
    llama.cpp     llama-cpp-python on the same file, in its own Q4_1/Q8_0 kernels (not batch-
                  invariant); n-gram speculation is its LlamaPromptLookupDecoding (a sample-match
                  verifier). Only if `llama_cpp` is importable (it compiles llama.cpp at install)

Each prompt (input-grounded editing/summarising by default) is run at batch 1, greedy, on every
path with plain decode and each speculative configuration, interleaved (so drift in the machine's
load hits all alike), `--repeat` times; the fastest run counts. Decode tokens/s excludes the prefill
(our engine: timed by step; transformers: a 1-token generate of the same prompt is subtracted).
In the same run the bench measures this machine's single-thread read bandwidth and reports, per
path, the weight bytes a decode step reads and the fraction of that bandwidth the plain decode
reaches. Ratios: `speedup` (vs the same path's plain decode) and `vs_fp32` (vs the fp32 path's
plain decode).
"""

from __future__ import annotations

import time

from specverify.engine.scheduler import spec_kappa

PATHS = ("q8", "quantized", "fp32", "default", "transformers", "llama.cpp")
EXTERNAL = ("transformers", "llama.cpp")
"""Paths that are not our engine: n-gram speculation only, no per-step metrics."""
ENGINE_PATHS = {"q8": ("invariant-q8", "quantized"), "quantized": ("invariant", "quantized"), "fp32": ("invariant", "fp32"), "default": ("default", "fp32")}
"""Our engine's paths: (backend, weights)."""
LLAMA_CPP_INSTALL = ('CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF '
                     '-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" pip install llama-cpp-python==0.3.36')
"""How llama-cpp-python was built here: a native build on this VM (its CPU reports AVX-512 and AMX)
died with SIGILL (exit 132) at the first decode; the AVX2 build runs. ~22 min to compile on one core."""
REFERENCE_PATH = "fp32"
"""The path `vs_fp32` divides by (when it is among --paths)."""


def check_paths(text: str, spec=None) -> list[str]:
    """The decode paths named in `text` (comma-separated), checked: known, none twice, and none external
    when a draft-model proposer is asked for (`spec`: the proposers); InputError otherwise."""
    from specverify.errors import InputError
    paths = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [x for x in paths if x not in PATHS]
    if unknown or not paths:
        raise InputError(f"--paths: unknown path(s) {', '.join(unknown) or '(none given)'}; known: {', '.join(PATHS)}")
    if len(set(paths)) != len(paths):
        raise InputError(f"--paths {text}: a path is named twice")
    for ext in EXTERNAL:
        if ext in paths and "draft" in (spec or []):
            raise InputError(f"--spec draft has no {ext} counterpart here; drop it or the {ext} path")
    return paths


def weight_bytes(model, backend: str) -> int:
    """Bytes of weights one decode step streams on `backend`: every matrix once, as that backend
    reads it (a QuantizedWeight: its kernel's panels on the invariant backend, fp32 on the default)."""
    from specverify.kernels import cpu_linear_q, cpu_linear_q8
    from specverify.kernels.quant import QuantizedWeight
    mats = [m for w in model.layers for m in (w.wqkv, w.wo, w.w_gate_up, w.w_down)] + [model.head]
    kernel = cpu_linear_q8 if backend == "invariant-q8" else cpu_linear_q
    total = 0
    for m in mats:
        if isinstance(m, QuantizedWeight) and backend.startswith("invariant"):
            total += sum(a.nbytes for a in m.packed(kernel.PACK_KEY, lambda m=m: kernel.pack(m))[1:])
        else:
            total += 4 * m.shape[0] * m.shape[1]
    return total


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
    return res.tokens[0], res.metrics, prefill, decode


def _timed_hf(model, prompt_ids, *, spec, kappa, max_tokens, ngram_max, eos_id):
    """transformers' greedy generate of exactly max_tokens tokens; decode time = that minus a
    1-token generate (the prefill and first token) of the same prompt."""
    import torch
    ids = torch.tensor([prompt_ids])
    common = dict(do_sample=False, pad_token_id=eos_id)
    extra = {} if spec == "none" else dict(prompt_lookup_num_tokens=kappa, max_matching_ngram_size=ngram_max)
    with torch.inference_mode():
        t0 = time.perf_counter()
        model.generate(ids, max_new_tokens=1, min_new_tokens=1, **common)
        t1 = time.perf_counter()
        out = model.generate(ids, max_new_tokens=max_tokens, min_new_tokens=max_tokens, **common, **extra)
        t2 = time.perf_counter()
    return out[0, len(prompt_ids):].tolist(), None, t1 - t0, max(1e-9, (t2 - t1) - (t1 - t0))


class _LlamaCpp:
    """llama-cpp-python on the bundled GGUF: one Llama per speculative setting (its draft model is
    fixed at construction), greedy (top_k 1), the KV cache reset before every run."""

    def __init__(self, path, threads: int, ngram_max: int):
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
        self._new = lambda kappa: Llama(
            model_path=str(path), n_ctx=2048, n_threads=max(1, threads), n_threads_batch=max(1, threads), verbose=False,
            draft_model=LlamaPromptLookupDecoding(num_pred_tokens=kappa, max_ngram_size=ngram_max) if kappa else None)
        self._models = {}

    def __call__(self, prompt_ids, spec, kappa, max_tokens):
        kappa = spec_kappa(spec, kappa)
        llm = self._models.get(kappa) or self._models.setdefault(kappa, self._new(kappa))
        llm.reset()
        out, stamps = [], []
        t0 = time.perf_counter()
        for tok in llm.generate(prompt_ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True):
            stamps.append(time.perf_counter())
            out.append(int(tok))
            if len(out) == max_tokens:
                break
        return out, None, stamps[0] - t0, stamps[-1] - stamps[0]


def _load(path: str, threads: int = 1, ngram_max: int = 4):
    """(the model, or for llama.cpp its runner, and the weight bytes one decode step reads)."""
    from specverify.errors import InputError
    if path == "transformers":
        try:
            from specverify.findings.smollm2_greedy import load
        except ImportError:
            raise InputError("the transformers path needs transformers: pip install 'specverify[transformers]'") from None
        _, model = load()
        n_bytes = 4 * sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2 and "embed" not in n)
        n_bytes += 4 * model.get_output_embeddings().weight.numel()
        return model, n_bytes
    if path == "llama.cpp":
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            raise InputError(f"the llama.cpp path needs llama-cpp-python (it compiles llama.cpp): {LLAMA_CPP_INSTALL}") from None
        from specverify.models import smollm2
        from specverify.models.gguf import read_gguf
        f = read_gguf(smollm2.path(), quantized=True)
        n_bytes = sum(t.nbytes for t in f.tensors.values() if hasattr(t, "blocks"))
        return _LlamaCpp(smollm2.path(), threads, ngram_max), n_bytes
    from specverify.engine.loader import load_smollm2
    backend, weights = ENGINE_PATHS[path]
    model, _ = load_smollm2(backend, weights)
    return model, weight_bytes(model, backend)


def run_bench(paths, *, specs=("ngram",), kappas=(3, 7), ngram=(4, 2), categories=("edit", "summarise"),
              n_prompts: int = 8, max_tokens: int = 128, repeat: int = 2, draft_layers: int = 6, threads: int = 1,
              backend_of=None, progress=None) -> dict:
    """Run every (prompt, path, config) `repeat` times, interleaved, and return the result document
    (`format_table` renders it). `paths` from `check_paths`; `ngram` = (longest, shortest) n-gram;
    `backend_of(name)` turns a backend name into what the engine runs (default: the name itself);
    `progress(str)` hears of each prompt done."""
    import torch
    from specverify.models.prompts import encode_prompts, load_prompts
    from specverify.engine.loader import load_smollm2
    from specverify.errors import InputError
    from specverify.kerneltools.bandwidth import cpu_description, read_bandwidth

    backend_of = backend_of or (lambda name: name)
    cats = list(categories)
    prompts = load_prompts(n_prompts, categories=cats)
    if not prompts:
        raise InputError(f"no prompts in categories {cats}")
    _, tok = load_smollm2("default")
    ids = encode_prompts(tok, prompts)
    ngram = tuple(ngram)
    runners, wbytes = {}, {}
    for path in paths:
        model, wbytes[path] = _load(path, threads, ngram[0])
        if path == "llama.cpp":
            runners[path] = model
        elif path == "transformers":
            runners[path] = (lambda m: lambda p, s, k, n: _timed_hf(
                m, p, spec=s, kappa=k, max_tokens=n, ngram_max=ngram[0], eos_id=tok.eos_id))(model)
        else:
            backend = backend_of(ENGINE_PATHS[path][0])
            runners[path] = (lambda m, b: lambda p, s, k, n: _timed(
                m, tok, p, spec=s, kappa=k, backend=b, max_tokens=n, draft_layers=draft_layers, ngram=ngram))(model, backend)
        runners[path](ids[0], "none", 0, 4)                                 # warm-up (compiles, packs)
    bandwidth = read_bandwidth()
    configs = [(p, "none", 0) for p in paths] + [(p, s, k) for p in paths for s in specs for k in kappas
                                                 if not (p in EXTERNAL and s != "ngram")]
    acc = {c: {"tokens": 0, "decode_tokens": 0, "decode_s": 0.0, "prefill_s": 0.0, "metrics": []} for c in configs}
    same = {p: 0 for p in paths}
    for i, p_ids in enumerate(ids):
        best = {}
        for _ in range(max(1, repeat)):
            for c in configs:                       # paths and configs interleaved
                got = runners[c[0]](p_ids, c[1], c[2], max_tokens)
                if c not in best or got[3] < best[c][3]:
                    best[c] = got
        for c in configs:
            tokens, metrics, prefill, decode = best[c]
            a = acc[c]
            a["tokens"] += len(tokens)
            a["decode_tokens"] += len(tokens) - 1
            a["decode_s"] += decode
            a["prefill_s"] += prefill
            if metrics is not None:
                a["metrics"].append(metrics)
        for path in paths:
            same[path] += all(best[c][0] == best[(path, "none", 0)][0] for c in configs if c[0] == path)
        if progress:
            progress(f"prompt {i + 1}/{len(ids)} done")
    rows = [_row(c, acc, wbytes, bandwidth) for c in configs]
    ref = next((r for r in rows if r["path"] == REFERENCE_PATH and r["spec"] == "none"), None)
    for r in rows:
        plain = next(x for x in rows if x["path"] == r["path"] and x["spec"] == "none")
        r["speedup_vs_plain"] = r["decode_tokens_per_s"] / plain["decode_tokens_per_s"]
        r["vs_fp32"] = r["decode_tokens_per_s"] / ref["decode_tokens_per_s"] if ref else None
    return {"model": "SmolLM2-135M-Instruct (the bundled Q4_1 GGUF)", "batch": 1, "cpu": cpu_description(),
            "threads": torch.get_num_threads(), "ngram": list(ngram), "draft_layers": draft_layers,
            "prompts": cats, "n_prompts": len(ids), "max_tokens": max_tokens, "repeat": repeat,
            "bandwidth": bandwidth.to_dict(), "paths": list(paths),
            "weight_bytes_per_step": wbytes,
            "outputs_identical_to_plain": {p: f"{same[p]}/{len(ids)}" for p in paths}, "configs": rows}


def _row(c, acc, wbytes, bandwidth) -> dict:
    path, spec, kappa = c
    a = acc[c]
    tps = a["decode_tokens"] / a["decode_s"]
    ms = a["metrics"]
    row = {"path": path, "spec": spec, "kappa": kappa, "decode_tokens_per_s": tps, "tokens": a["tokens"],
           "decode_s": a["decode_s"], "prefill_s": a["prefill_s"], "E": None, "r_i": [], "alpha": None}
    if spec == "none":
        row["weight_bytes_per_step"] = wbytes[path]
        row["bandwidth_fraction"] = wbytes[path] * tps / bandwidth.bytes_per_s
    if ms:
        verifies = sum(m.num_verifies for m in ms)
        accepted = sum(m.num_accepted for m in ms)
        rej = sum(m.num_rejections for m in ms)
        k = max((len(m.drafted_at) for m in ms), default=0)
        drafted = [sum(m.drafted_at[i] for m in ms if len(m.drafted_at) > i) for i in range(k)]
        acc_at = [sum(m.accepted_at[i] for m in ms if len(m.accepted_at) > i) for i in range(k)]
        row.update({"E": 1 + accepted / verifies if verifies else None,
                    "r_i": [x / d if d else None for x, d in zip(acc_at, drafted)],
                    "alpha": accepted / (accepted + rej) if accepted + rej else None})
    return row


def format_table(result: dict) -> str:
    bw = result["bandwidth"]["GB_per_s"]
    lines = [f"cpu: {result['cpu']}; memory read bandwidth (1 thread, measured now): {bw:.1f} GB/s",
             f"{'path':12} {'spec':6} {'kappa':>5} {'tok/s':>7} {'speedup':>7} {'vs fp32':>7} "
             f"{'MB/step':>7} {'of bw':>6} {'E':>5} {'alpha':>6}  r_i"]
    for r in result["configs"]:
        E = f"{r['E']:.2f}" if r["E"] else "-"
        al = f"{r['alpha']:.2f}" if r["alpha"] is not None else "-"
        vs = f"{r['vs_fp32']:.2f}" if r["vs_fp32"] is not None else "-"
        mb = f"{r['weight_bytes_per_step'] / 1e6:.0f}" if "weight_bytes_per_step" in r else ""
        fr = f"{r['bandwidth_fraction']:.0%}" if "bandwidth_fraction" in r else ""
        ri = " ".join(f"{x:.2f}" for x in r["r_i"] if x is not None)
        lines.append(f"{r['path']:12} {r['spec']:6} {r['kappa']:>5} {r['decode_tokens_per_s']:7.1f} "
                     f"{r['speedup_vs_plain']:7.2f} {vs:>7} {mb:>7} {fr:>6} {E:>5} {al:>6}  {ri}")
    same = ", ".join(f"{p} {v}" for p, v in result["outputs_identical_to_plain"].items())
    lines.append(f"speculative outputs identical to the same path's plain decode: {same} "
                 "(the default backend, transformers and llama.cpp are not batch-invariant: theirs may differ)")
    return "\n".join(lines)
