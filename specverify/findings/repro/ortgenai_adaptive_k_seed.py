"""ONNX Runtime GenAI 0.18.0: with adaptive proposal width (`min_adaptive_k > 0`), speculative sampling is
not reproducible from `random_seed`: the same seed gives different tokens from one pass to the next.

The adaptive controller picks K from smoothed committed-tokens-per-millisecond (docs/SpeculativeDecoding.md,
"Adaptive proposal width"), i.e. from wall-clock timing, and the number of random draws a round makes
depends on K; so the tokens drawn after a given seed depend on how fast the machine ran. With a fixed K
(`min_adaptive_k = 0`, the default) the same seeds give the same tokens. (Each round is still an exact
speculative-sampling step, so the output law is not in question here: only reproducibility.)

Standalone (no specverify): a tiny random Llama target and a noisy copy as its draft (transformers,
float32), both exported by the engine's model builder; 300 sampled runs of 40 tokens, seeds 0..299, run
twice with each setting; the count of runs whose tokens differ between the two passes.

    python specverify/findings/repro/ortgenai_adaptive_k_seed.py     # ~1-2 min on 2 cores
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime_genai as og
import torch
from transformers import LlamaConfig, LlamaForCausalLM

V, L, RUNS, PROMPT = 16, 40, 300, [1]


def export(model, root: Path, name: str) -> Path:
    hf = root / f"{name}-hf"
    model.save_pretrained(hf)
    from tokenizers import Tokenizer, models, pre_tokenizers
    tok = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(V)}, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(hf / "tokenizer.json"))
    (hf / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    out = root / name
    subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-o", str(out),
                    "-p", "fp32", "-e", "cpu", "-c", str(root / "cache")], check=True, capture_output=True)
    return out


def main():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128,
                         bos_token_id=0, eos_token_id=0, tie_word_embeddings=False)
    target = LlamaForCausalLM(config).float()
    draft = LlamaForCausalLM(config).float()
    with torch.no_grad():
        for (name, p), (_, q) in zip(target.named_parameters(), draft.named_parameters()):
            p.copy_(1 + 0.1 * torch.randn(p.shape) if "norm" in name else torch.randn(p.shape) / p.shape[-1] ** 0.5)
            q.copy_(p + 0.5 * float(p.std()) * torch.randn(p.shape))
    with tempfile.TemporaryDirectory() as tmp:
        t_dir, d_dir = export(target, Path(tmp), "target"), export(draft, Path(tmp), "draft")
        block = json.loads((d_dir / "genai_config.json").read_text())["model"]["decoder"]
        block["filename"] = os.path.relpath(d_dir / block["filename"], t_dir)
        cfg = og.Config(str(t_dir))
        cfg.overlay(json.dumps({"model": {"draft": block}}))
        model = og.Model(cfg)

        def runs(spec):
            out = []
            for seed in range(RUNS):
                params = og.GeneratorParams(model)
                params.set_search_options(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, random_seed=seed,
                                          max_length=len(PROMPT) + L, min_length=len(PROMPT) + L)
                params.set_speculative_options(**spec)
                gen = og.Generator(model, params)
                gen.append_tokens(np.array(PROMPT, dtype=np.int32))
                while not gen.is_done():
                    gen.generate_next_token()
                out.append(tuple(int(t) for t in gen.get_sequence(0)))
            return out

        print(f"onnxruntime-genai {og.__version__}; {RUNS} sampled runs of {L} tokens, draft-model speculation")
        for spec in ({"max_draft_tokens": 2, "min_adaptive_k": 0}, {"max_draft_tokens": 2, "min_adaptive_k": 2}):
            a, b = runs(spec), runs(spec)
            print(f"{spec}: {sum(x != y for x, y in zip(a, b))} of {RUNS} runs differ between two passes with the same seeds")


if __name__ == "__main__":
    main()
