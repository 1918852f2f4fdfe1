"""llama-cpp-python 0.3.36: speculative decoding on a hybrid (recurrent + attention) model fails at the
first rejected draft, because `Llama.generate` ignores the refusal of llama.cpp's partial removal.

On a rejection, generate (llama_cpp/llama.py, the loop after `self.sample`) sets `n_tokens` back and
calls `self._ctx.kv_cache_seq_rm(-1, n_tokens, -1)` without looking at its boolean result. For a
hybrid model's memory (LFM2: short-convolution state + KV cache) llama.cpp's `llama_memory_seq_rm`
returns false for a partial removal of the tail -- the recurrent state cannot be rewound -- and leaves
the memory as it was: the rejected drafts stay in it (seq_pos_max is unchanged). The next decode at
position n_tokens is then refused by llama.cpp's batch check ("inconsistent sequence positions ... Y =
X + 1"), and generate raises `RuntimeError: llama_decode returned -1`. So it is an error, not silently
wrong tokens; but llama-cpp-python accepts `draft_model=` (here its own LlamaPromptLookupDecoding) for
such a model, decodes until the first rejection, and the error names neither the cause nor the model.

The model is a tiny random LFM2 (layers conv, attention; 16 tokens "t0".."t15") written below as a
GGUF file with the standard library and numpy only; the weights do not matter: the failure is in the
memory, not the numbers. Run: python llamacpp_hybrid_rollback.py
"""
import ctypes
import os
import struct
import tempfile

import numpy as np
import llama_cpp
from llama_cpp import Llama
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

V, D, FF, HEADS, L_CACHE = 16, 32, 64, 2, 3
LAYERS = ("conv", "attention")
GREEDY = dict(temp=0.0, top_k=0, top_p=1.0, min_p=0.0, typical_p=1.0, repeat_penalty=1.0)
U32, F32, BOOL, STR, ARR = 4, 6, 7, 8, 9                  # GGUF value types
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
        out += _s(x) if sub == STR else struct.pack({U32: "<I", F32: "<f", 5: "<i"}[sub], x)
    return out


def write_lfm2(path):
    rng = np.random.default_rng(0)
    t = {"token_embd.weight": rng.normal(0, 1, (V, D)), "token_embd_norm.weight": np.ones(D),
         "output.weight": rng.normal(0, 0.3, (V, D))}
    for i, kind in enumerate(LAYERS):
        t[f"blk.{i}.attn_norm.weight"] = np.ones(D)
        t[f"blk.{i}.ffn_norm.weight"] = np.ones(D)
        t[f"blk.{i}.ffn_gate.weight"] = rng.normal(0, D ** -0.5, (FF, D))
        t[f"blk.{i}.ffn_up.weight"] = rng.normal(0, D ** -0.5, (FF, D))
        t[f"blk.{i}.ffn_down.weight"] = rng.normal(0, FF ** -0.5, (D, FF))
        if kind == "conv":
            t[f"blk.{i}.shortconv.conv.weight"] = rng.normal(0, 0.5, (D, L_CACHE))
            t[f"blk.{i}.shortconv.in_proj.weight"] = rng.normal(0, D ** -0.5, (3 * D, D))
            t[f"blk.{i}.shortconv.out_proj.weight"] = rng.normal(0, D ** -0.5, (D, D))
        else:
            for n in ("attn_q", "attn_k", "attn_v", "attn_output"):
                t[f"blk.{i}.{n}.weight"] = rng.normal(0, D ** -0.5, (D, D))
            t[f"blk.{i}.attn_q_norm.weight"] = np.ones(D // HEADS)
            t[f"blk.{i}.attn_k_norm.weight"] = np.ones(D // HEADS)
    kvs = [("general.architecture", STR, "lfm2"), ("lfm2.context_length", U32, 128), ("lfm2.embedding_length", U32, D),
           ("lfm2.block_count", U32, len(LAYERS)), ("lfm2.feed_forward_length", U32, FF),
           ("lfm2.attention.head_count", U32, HEADS),
           ("lfm2.attention.head_count_kv", ARR, (5, [0 if k == "conv" else HEADS for k in LAYERS])),
           ("lfm2.rope.freq_base", F32, 1e6), ("lfm2.attention.layer_norm_rms_epsilon", F32, 1e-5),
           ("lfm2.shortconv.l_cache", U32, L_CACHE), ("lfm2.vocab_size", U32, V), ("general.file_type", U32, 0),
           ("tokenizer.ggml.model", STR, "llama"), ("tokenizer.ggml.tokens", ARR, (STR, [f"t{i}" for i in range(V)])),
           ("tokenizer.ggml.scores", ARR, (F32, [0.0] * V)), ("tokenizer.ggml.token_type", ARR, (5, [1] * V)),
           ("tokenizer.ggml.add_bos_token", BOOL, False)]
    head = b"GGUF" + struct.pack("<IQQ", 3, len(t), len(kvs)) + b"".join(_kv(*kv) for kv in kvs)
    infos, blobs, off = b"", [], 0
    for name, a in t.items():
        a = np.ascontiguousarray(a, np.float32)
        infos += _s(name) + struct.pack("<I", a.ndim) + b"".join(struct.pack("<Q", n) for n in reversed(a.shape))
        infos += struct.pack("<IQ", GGML_F32, off)
        blob = a.tobytes() + b"\0" * (-a.nbytes % 32)
        blobs.append(blob)
        off += len(blob)
    meta = head + infos
    with open(path, "wb") as f:
        f.write(meta + b"\0" * (-len(meta) % 32) + b"".join(blobs))


errors = []


last_level = [0]


@llama_cpp.llama_log_callback
def _log(level, text, user_data):                        # ggml's log levels: 3 WARN, 4 ERROR, 5 continued
    if level == 4 or (level == 5 and last_level[0] == 4):
        errors.append(text.decode(errors="replace").rstrip())
    if level != 5:
        last_level[0] = level


def greedy(llm, prompt, n):
    out = []
    llm.reset()
    try:
        for tok in llm.generate(prompt, **GREEDY):
            out.append(int(tok))
            if len(out) == n:
                break
    except RuntimeError as exc:
        return out, f"{type(exc).__name__}: {exc}"
    return out, None


path = os.path.join(tempfile.mkdtemp(), "lfm2-tiny-f32.gguf")
write_lfm2(path)
kw = dict(n_ctx=64, n_threads=1, type_k=GGML_F32, type_v=GGML_F32, verbose=False)
print("llama_cpp", llama_cpp.__version__)
llama_cpp.llama_log_set(_log, ctypes.c_void_p(0))

llm = Llama(path, logits_all=True, **kw)
print("model is hybrid:", llama_cpp.llama_model_is_hybrid(llm._model.model))
llm.eval(list(range(11)))                               # positions 0..10
mem = llama_cpp.llama_get_memory(llm._ctx.ctx)
ok = llama_cpp.llama_memory_seq_rm(mem, 0, 8, -1)       # what generate does on a rejection at position 8
print(f"llama_memory_seq_rm(seq 0, p0 8, p1 -1) -> {ok}; seq_pos_max now {llama_cpp.llama_memory_seq_pos_max(mem, 0)}"
      f" (was 10: the 3 'rejected' positions are still in the memory)")

prompt = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3]              # repeats: prompt lookup drafts from the first token on
plain, err = greedy(Llama(path, **kw), prompt, 24)
print("plain greedy:                 ", plain, err or "")
spec_llm = Llama(path, draft_model=LlamaPromptLookupDecoding(num_pred_tokens=3), **kw)
errors.clear()
spec, err = greedy(spec_llm, prompt, 24)
print("greedy with prompt lookup (3):", spec, err or "")
print("llama.cpp said:")
for line in "\n".join(errors).splitlines():
    if line.strip():
        print("   ", line)
verdict = ("FINDING: generate raised at a rejection (seq_rm refused, result ignored)" if err else
           "no error" + ("" if spec == plain else " but the tokens differ from plain greedy"))
print(verdict)
