"""llama-cpp-python 0.3.36: with `swa_full=False`, `Llama.generate` reuses a cached prefix whose sliding-window
keys llama.cpp has already overwritten, and decodes with them missing -- silently wrong tokens.

With swa_full=False llama.cpp keeps a sliding-window layer's KV in a ring of n_swa + n_ubatch cells
(padded; 256 here) and reuses the cells of positions that the window masks for the sequence's last
position. After a 300-token context the ring holds positions 44..299 (`llama_memory_seq_pos_min` = 44).
A new prompt sharing its first c tokens with that context makes generate (llama_cpp/llama.py, the
"prefix-match hit" branch) call `kv_cache_seq_rm(-1, c, -1)`: llama.cpp returns true, generate keeps
positions < c and decodes the rest. For c < 44 + n_swa the first new positions need keys below 44 that
are gone; nothing checks `seq_pos_min` (llama.cpp's own server does, and reprocesses the prompt:
"forcing full prompt re-processing due to lack of cache data (likely due to SWA or hybrid/recurrent
memory)", tools/server/server-context.cpp), so the logits -- and the greedy tokens -- differ from a fresh
context's. With the default swa_full=True every cell is kept and the reuse is exact.

The model is a tiny random sliding-window Llama (llama.cpp arch "granite_swa": the Llama graph on the
SWA cache; window 8 on every layer, attention sinks -inf so they take no mass), 16 tokens "t0".."t15",
written below with the standard library and numpy only. Run: python llamacpp_swa_prefix_reuse.py
"""
import os
import struct
import tempfile

import numpy as np
import llama_cpp
from llama_cpp import Llama

V, D, FF, HEADS, LAYERS, WINDOW = 16, 32, 64, 2, 2, 8
GREEDY = dict(temp=0.0, top_k=0, top_p=1.0, min_p=0.0, typical_p=1.0, repeat_penalty=1.0)
U32, I32, F32, BOOL, STR, ARR = 4, 5, 6, 7, 8, 9           # GGUF value types
GGML_F32 = 0


def _s(b: str) -> bytes:
    e = b.encode()
    return struct.pack("<Q", len(e)) + e


def _kv(key, vtype, value) -> bytes:
    out = _s(key) + struct.pack("<I", vtype)
    if vtype == U32:
        return out + struct.pack("<I", value)
    if vtype == F32:
        return out + struct.pack("<f", value)
    if vtype == BOOL:
        return out + struct.pack("<?", value)
    if vtype == STR:
        return out + _s(value)
    sub, items = value                                     # ARR: (element type, list)
    out += struct.pack("<IQ", sub, len(items))
    for x in items:
        out += _s(x) if sub == STR else struct.pack({I32: "<i", F32: "<f", BOOL: "<?"}[sub], x)
    return out


def write_swa_llama(path):
    rng = np.random.default_rng(0)
    t = {"token_embd.weight": rng.normal(0, 1, (V, D)), "output_norm.weight": np.ones(D),
         "output.weight": rng.normal(0, 0.3, (V, D))}
    for i in range(LAYERS):
        t[f"blk.{i}.attn_norm.weight"] = np.ones(D)
        t[f"blk.{i}.ffn_norm.weight"] = np.ones(D)
        for n in ("attn_q", "attn_k", "attn_v", "attn_output"):
            t[f"blk.{i}.{n}.weight"] = rng.normal(0, 2 * D ** -0.5, (D, D))
        t[f"blk.{i}.attn_sinks.weight"] = np.full(HEADS, -np.inf)
        t[f"blk.{i}.ffn_gate.weight"] = rng.normal(0, D ** -0.5, (FF, D))
        t[f"blk.{i}.ffn_up.weight"] = rng.normal(0, D ** -0.5, (FF, D))
        t[f"blk.{i}.ffn_down.weight"] = rng.normal(0, FF ** -0.5, (D, FF))
    a = "granite_swa"
    kvs = [("general.architecture", STR, a), (f"{a}.context_length", U32, 512), (f"{a}.embedding_length", U32, D),
           (f"{a}.block_count", U32, LAYERS), (f"{a}.feed_forward_length", U32, FF),
           (f"{a}.attention.head_count", U32, HEADS), (f"{a}.attention.head_count_kv", U32, HEADS),
           (f"{a}.rope.dimension_count", U32, D // HEADS), (f"{a}.rope.freq_base", F32, 10000.0),
           (f"{a}.attention.layer_norm_rms_epsilon", F32, 1e-5), (f"{a}.vocab_size", U32, V),
           (f"{a}.attention.sliding_window", U32, WINDOW),
           (f"{a}.attention.sliding_window_pattern", ARR, (BOOL, [True] * LAYERS)),
           (f"{a}.logit_scale", F32, 1.0), ("general.file_type", U32, 0),
           ("tokenizer.ggml.model", STR, "llama"), ("tokenizer.ggml.tokens", ARR, (STR, [f"t{i}" for i in range(V)])),
           ("tokenizer.ggml.scores", ARR, (F32, [0.0] * V)), ("tokenizer.ggml.token_type", ARR, (I32, [1] * V)),
           ("tokenizer.ggml.add_bos_token", BOOL, False)]
    head = b"GGUF" + struct.pack("<IQQ", 3, len(t), len(kvs)) + b"".join(_kv(*kv) for kv in kvs)
    infos, blobs, off = b"", [], 0
    for name, arr in t.items():
        arr = np.ascontiguousarray(arr, np.float32)
        infos += _s(name) + struct.pack("<I", arr.ndim) + b"".join(struct.pack("<Q", n) for n in reversed(arr.shape))
        infos += struct.pack("<IQ", GGML_F32, off)
        blob = arr.tobytes() + b"\0" * (-arr.nbytes % 32)
        blobs.append(blob)
        off += len(blob)
    meta = head + infos
    with open(path, "wb") as f:
        f.write(meta + b"\0" * (-len(meta) % 32) + b"".join(blobs))


def greedy(llm, prompt, n):
    out = []
    for tok in llm.generate(prompt, **GREEDY):            # reset=True: generate's own prefix matching
        out.append(int(tok))
        if len(out) == n:
            break
    return out


path = os.path.join(tempfile.mkdtemp(), "swa-llama-tiny-f32.gguf")
write_swa_llama(path)
print("llama_cpp", llama_cpp.__version__, "| window", WINDOW, "| n_ubatch 8")
rng = np.random.default_rng(1)
long_prompt = [int(x) for x in rng.integers(0, V, 300)]
findings = 0
for swa_full in (True, False):
    kw = dict(n_ctx=512, n_batch=8, n_ubatch=8, n_threads=1, type_k=GGML_F32, type_v=GGML_F32, verbose=False,
              swa_full=swa_full, logits_all=True)
    llm = Llama(path, **kw)
    for shared in (40, 48, 60):
        greedy(llm, long_prompt, 1)                       # a long context first (the ring wraps)
        mem = llama_cpp.llama_get_memory(llm._ctx.ctx)
        pos_min = llama_cpp.llama_memory_seq_pos_min(mem, 0)
        prompt = long_prompt[:shared] + [int(x) for x in rng.integers(0, V, 6)]
        reused = greedy(llm, prompt, 16)                  # shares `shared` tokens with the cached context
        other = Llama(path, **kw)
        fresh = greedy(other, prompt, 16)
        rows = slice(shared, len(prompt) + 15)            # the logits rows both decoded: new prompt + outputs
        diff = float(np.abs(llm.scores[rows] - other.scores[rows]).max())
        bad = reused != fresh or diff > 1e-4
        findings += bad
        print(f"swa_full={swa_full!s:5}  cached positions {pos_min}..  new prompt shares {shared}: "
              f"max |logits reused - fresh| {diff:.3g}, tokens {'DIFFERENT' if reused != fresh else 'same'}"
              f"\n    reused {reused}\n    fresh  {fresh}")
print("FINDING: prefix reuse on the SWA ring gives other logits than a fresh context" if findings else "no difference")
