"""ONNX Runtime GenAI 0.18.0: prompt tokens equal to pad_token_id at the END of a prompt are taken for
right padding, even at batch 1: the next-token logits are those of the prompt without them.

Standalone (no specverify): a tiny random Llama (transformers, float32 weights) whose config has no pad
token -- as many models do -- exported by the engine's own model builder, which then writes
pad_token_id = eos_token_id (= bos_token_id here, the GPT-2 convention). The engine's logits after a
prompt are compared with the same weights' float64 forward in transformers:

  1. a prompt that ends with the EOS (= pad) token: the engine's row is the float64 row of the prompt
     WITHOUT its trailing pad tokens (a pad token at the start or inside the prompt is read as a token);
  2. a prompt of pad tokens only: the row is all zeros;
  3. a prompt left-padded in a batch of two (the convention of transformers and most servers): another
     row again; right padding (what `og.Tokenizer.encode_batch` does) gives the batch-1 row exactly.

    python specverify/findings/repro/ortgenai_trailing_pad.py      # needs onnxruntime-genai, onnx, onnx_ir,
                                                                  # torch, transformers; ~30 s
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime_genai as og
import torch
from transformers import LlamaConfig, LlamaForCausalLM

V, PAD = 16, 0


def build(root: Path) -> Path:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                         bos_token_id=PAD, eos_token_id=PAD, pad_token_id=None, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1 + 0.1 * torch.randn(p.shape) if "norm" in name else torch.randn(p.shape) / p.shape[-1] ** 0.5)
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


def engine_rows(model, prompts):
    """The engine's next-token logits after each prompt of one batch (rectangular, as given)."""
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompts[0]) + 2, batch_size=len(prompts))
    gen = og.Generator(model, params)
    gen.append_tokens(np.array(prompts, dtype=np.int32))
    return np.array(gen.get_logits()).reshape(len(prompts), -1)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        out = build(Path(tmp))
        cfg = json.loads((out / "genai_config.json").read_text())["model"]
        print(f"onnxruntime-genai {og.__version__}; export: eos_token_id {cfg['eos_token_id']}, "
              f"pad_token_id {cfg['pad_token_id']}, bos_token_id {cfg['bos_token_id']}")
        model = og.Model(str(out))
        ref = LlamaForCausalLM.from_pretrained(str(Path(tmp) / "hf"), dtype=torch.float64, attn_implementation="eager")

        def exact(prompt):
            with torch.no_grad():
                return ref(torch.tensor([prompt])).logits[0, -1].numpy()

        for prompt in ([5, 6, 7], [5, PAD, 7], [PAD, 6, 7], [5, 6, PAD], [5, PAD, PAD]):
            row = engine_rows(model, [prompt])[0]
            stripped = list(prompt)
            while stripped and stripped[-1] == PAD:
                stripped.pop()
            print(f"batch 1, prompt {prompt}: max |engine - float64({prompt})| = {np.abs(row - exact(prompt)).max():.3g}; "
                  f"vs float64({stripped}) = {np.abs(row - exact(stripped)).max():.3g}")
        row = engine_rows(model, [[PAD, PAD]])[0]
        print(f"batch 1, prompt [{PAD}, {PAD}]: engine row {np.round(row[:4], 3).tolist()}... "
              f"float64 {np.round(exact([PAD, PAD])[:4], 3).tolist()}...")
        alone = engine_rows(model, [[5, 6]])[0]
        left = engine_rows(model, [[PAD, 5, 6], [4, 5, 6]])[0]
        right = engine_rows(model, [[5, 6, PAD], [4, 5, 6]])[0]
        print(f"prompt [5, 6] alone vs left-padded in a batch of 2: max |diff| = {np.abs(alone - left).max():.3g}; "
              f"right-padded: {np.abs(alone - right).max():.3g}")


if __name__ == "__main__":
    main()
