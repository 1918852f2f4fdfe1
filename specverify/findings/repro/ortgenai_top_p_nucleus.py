"""ONNX Runtime GenAI 0.18.0: top-p sampling without top-k keeps more tokens than the nucleus once the
vocabulary has more than 64 tokens, so its law is not the top-p law (plain and speculative decoding
alike: both build their distributions with `ComputeSampledCategorical`).

`FindNucleus` (src/sampling_distribution.h) stops at the first sorted position i where
prefix_sum >= p * (prefix_sum + (V - i - 1) * exp_i), a bound on the tail that is loose unless the
distribution is very peaked; its comment says so ("may include a few extra tokens"). (It scans windows
of 16, 64, ... sorted tokens, and a hit at a window's last position is not taken as one: the scan goes
on into the next window, one token more again.) The exact cutoff
(smallest prefix with cumulative probability >= p) is computed only when V <= 64. With top_k > 1 the
top-k path computes the cutoff exactly.

Standalone (no specverify): a tiny random Llama with 128 tokens (transformers, float32), exported by the
engine's own model builder; 40,000 one-token runs after a fixed prompt with do_sample, temperature 1,
top_p 0.8, once with top_k = 0 (the nucleus path) and once with top_k = V (the top-k + top-p path, the
same law if both were exact). Each histogram is tested (Pearson, cells pooled to >= 10 expected) against
the exact top-p law of the same weights in float64, and against the law of the bound-based cutoff.

    python specverify/findings/repro/ortgenai_top_p_nucleus.py     # ~1-2 min on 2 cores
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime_genai as og
import torch
from scipy import stats
from transformers import LlamaConfig, LlamaForCausalLM

V, TOP_P, RUNS, PROMPT = 128, 0.8, 40_000, [3, 1, 4, 1, 5]


def build(root: Path) -> Path:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                         bos_token_id=0, eos_token_id=0, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1 + 0.1 * torch.randn(p.shape) if "norm" in name else torch.randn(p.shape) / p.shape[-1] ** 0.5)
        model.lm_head.weight *= 3.0                    # logits of spread ~1: a law far from uniform
    hf = root / "hf"
    model.save_pretrained(hf)
    from tokenizers import Tokenizer, models, pre_tokenizers
    tok = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(V)}, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(hf / "tokenizer.json"))
    (hf / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    out = root / "onnx"
    subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-o", str(out),
                    "-p", "fp32", "-e", "cpu", "-c", str(root / "cache")], check=True, capture_output=True)
    return out


def top_p_law(logits, keep_count):
    """The renormalised softmax over the `keep_count` largest logits."""
    order = np.argsort(-logits, kind="stable")
    q = np.zeros(len(logits))
    kept = order[:keep_count]
    q[kept] = np.exp(logits[kept] - logits.max())
    return q / q.sum()


def exact_count(logits, p):
    """Smallest prefix of the sorted probabilities whose sum is >= p."""
    q = np.sort(np.exp(logits - logits.max()))[::-1]
    q /= q.sum()
    return int(np.searchsorted(np.cumsum(q), p) + 1)


def bound_count(logits, p):
    """The cutoff as FindNucleus computes it, in float32: windows of 16 sorted tokens, growing x4; in a
    window, the first position i where prefix >= p * (prefix + (V - i - 1) * exp_i). A hit at a window's
    last position gives cutoff == window size, which the loop does not take as a hit (it continues
    into the next window, `cutoff_index < k`): then the next position that satisfies the bound counts."""
    x = np.where(np.isfinite(logits), logits, np.finfo(np.float32).min).astype(np.float32)
    e = np.exp(np.sort(x)[::-1] - x.max()).astype(np.float32)
    n, k, done, prefix, p32 = len(e), min(16, len(e)), 0, np.float32(0.0), np.float32(p)
    while True:
        cutoff = k
        for i in range(done, k):
            prefix = np.float32(prefix + e[i])
            if prefix >= p32 * np.float32(prefix + np.float32(n - i - 1) * e[i]):
                cutoff = i + 1
                break
        done = k
        if cutoff < k or k == n:
            return cutoff
        k = min(k * 4, n)


def histogram(model, top_k):
    counts = np.zeros(V, np.int64)
    for seed in range(RUNS):
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=True, temperature=1.0, top_p=TOP_P, top_k=top_k, random_seed=seed,
                                  max_length=len(PROMPT) + 1, min_length=len(PROMPT) + 1)
        gen = og.Generator(model, params)
        gen.append_tokens(np.array(PROMPT, dtype=np.int32))
        gen.generate_next_token()
        counts[int(gen.get_sequence(0)[-1])] += 1
    return counts


def pearson(counts, law):
    expected = law * counts.sum()
    order = np.argsort(expected)
    obs, exp, acc_o, acc_e = [], [], 0, 0.0
    for i in order:                                    # pool the smallest cells up to >= 10 expected
        acc_o, acc_e = acc_o + counts[i], acc_e + expected[i]
        if acc_e >= 10:
            obs.append(acc_o)
            exp.append(acc_e)
            acc_o, acc_e = 0, 0.0
    if acc_e > 0 or acc_o > 0:
        obs[-1] += acc_o
        exp[-1] += acc_e
    obs, exp = np.array(obs), np.array(exp)
    if (counts[law == 0] > 0).any():
        return float("inf"), 0.0, int((counts[law == 0]).sum())
    stat = float(((obs - exp) ** 2 / exp).sum())
    return stat, float(stats.chi2.sf(stat, len(obs) - 1)), 0


def main():
    with tempfile.TemporaryDirectory() as tmp:
        out = build(Path(tmp))
        ref = LlamaForCausalLM.from_pretrained(str(Path(tmp) / "hf"), dtype=torch.float64, attn_implementation="eager")
        with torch.no_grad():
            logits = ref(torch.tensor([PROMPT])).logits[0, -1].numpy()
        # the EOS (token 0) is masked by min_length = max_length in the engine: masked here too
        logits[0] = -np.inf
        k_exact, k_bound = exact_count(logits, TOP_P), bound_count(logits, TOP_P)
        exact, bound = top_p_law(logits, k_exact), top_p_law(logits, k_bound)
        print(f"onnxruntime-genai {og.__version__}; V = {V}, top_p = {TOP_P}, {RUNS} runs of one token")
        print(f"exact nucleus: {k_exact} tokens; bound-based cutoff: {k_bound} tokens; "
              f"TV(exact law, bound law) = {0.5 * np.abs(exact - bound).sum():.4f}")
        model = og.Model(str(out))
        for top_k, path in ((0, "nucleus path (top_k=0)"), (V, f"top-k + top-p path (top_k={V})")):
            counts = histogram(model, top_k)
            kept = int((counts > 0).sum())
            s1, p1, z1 = pearson(counts, exact)
            s2, p2, _ = pearson(counts, bound)
            print(f"{path}: {kept} distinct tokens drawn; vs exact top-p law: chi2 {s1:.1f}, p = {p1:.3g}"
                  + (f" ({z1} draws of tokens outside the exact nucleus)" if z1 else "")
                  + f"; vs bound law: chi2 {s2:.1f}, p = {p2:.3g}")


if __name__ == "__main__":
    main()
