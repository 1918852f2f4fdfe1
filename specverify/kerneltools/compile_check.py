"""Compile every Triton kernel ahead of time for a CUDA target, on any machine (no GPU needed:
Triton's front end, its LLVM back end and the bundled ptxas run on the CPU). CI has no GPU, and the
interpreter executes kernels as Python, so this is what catches a kernel that would not compile
for a real device (a loop-carried type change, an unsupported construct).

    compile_all(arch=90) -> {kernel name: CompiledKernel or the error text}

Signatures are those the launchers use (pointer dtypes, int32 scalars, the constexprs of a
SmolLM2-sized launch).
"""

from __future__ import annotations


def _specs():
    from specverify.kernels import (sampler_bonus, sampler_chain, sampler_greedy, sampler_recovered, sampler_tree, triton_attention,
                   triton_linear, triton_rms_norm, triton_rotary, triton_silu_mul, triton_softmax)
    i32 = "*i32"
    f64 = "*fp64"
    return [
        ("linear[fp32]", triton_linear._linear_kernel, {},
         dict(BLOCK_M=triton_linear.BLOCK_M, BLOCK_N=triton_linear.BLOCK_N, BLOCK_K=triton_linear.BLOCK_K,
              IEEE=True, SUM_DOT=False), True),
        ("linear[bf16]", triton_linear._linear_kernel, {"x_ptr": "*bf16", "w_ptr": "*bf16"},
         dict(BLOCK_M=triton_linear.BLOCK_M, BLOCK_N=triton_linear.BLOCK_N, BLOCK_K=triton_linear.BLOCK_K,
              IEEE=False, SUM_DOT=False), True),
        ("rms_norm", triton_rms_norm._rms_norm_kernel, {"eps": "fp32"}, dict(BLOCK_D=triton_rms_norm.BLOCK_D), True),
        ("log_softmax", triton_softmax._softmax_kernel, {}, dict(LOG=True, BLOCK_V=triton_softmax.BLOCK_V), True),
        ("softmax", triton_softmax._softmax_kernel, {}, dict(LOG=False, BLOCK_V=triton_softmax.BLOCK_V), True),
        ("rotary", triton_rotary._rotary_kernel, {"pos_ptr": "*i64", "freq_ptr": f64}, dict(HALF=32, BLOCK_H=16), True),
        ("silu_mul", triton_silu_mul._silu_mul_kernel, {}, dict(BLOCK_F=triton_silu_mul.BLOCK_F), True),
        ("attention", triton_attention._attention_kernel,
         {"bt_ptr": i32, "req_ptr": "*i64", "pos_ptr": "*i64", "scale": "fp32"},
         dict(HEAD_DIM=64, BLOCK_D=64, BLOCK_KV=triton_attention.BLOCK_KV), True),
        ("sampler_greedy", sampler_greedy._greedy_kernel,
         {"target_ptr": f64, "draft_ids_ptr": i32, "num_draft_ptr": i32, "draft_start_ptr": i32,
          "row_start_ptr": i32, "greedy_ptr": i32, "out_ptr": "*i64"}, dict(BLOCK_V=sampler_greedy.BLOCK_V), False),
        ("sampler_recovered", sampler_recovered._recovered_kernel,
         {"target_ptr": f64, "draft_ptr": f64, "draft_ids_ptr": i32, "req_ptr": i32, "local_ptr": i32,
          "row_start_ptr": i32, "greedy_ptr": i32, "final_ptr": f64, "out_ptr": "*i64"}, dict(HAS_Q=True), False),
        ("sampler_bonus", sampler_bonus._bonus_kernel,
         {"target_ptr": f64, "num_draft_ptr": i32, "row_start_ptr": i32, "greedy_ptr": i32, "final_ptr": f64,
          "out_ptr": "*i64"}, {}, False),
        ("sampler_chain", sampler_chain._chain_kernel,
         {"target_ptr": f64, "draft_ptr": f64, "draft_ids_ptr": i32, "num_draft_ptr": i32, "draft_start_ptr": i32,
          "row_start_ptr": i32, "greedy_ptr": i32, "accept_ptr": f64, "recovered_ptr": "*i64", "bonus_ptr": "*i64",
          "out_ptr": "*i64"}, dict(HAS_Q=True), False),
        ("sampler_tree", sampler_tree._tree_kernel,
         {"tokens_ptr": i32, "parents_ptr": i32, "target_ptr": f64, "draft_ptr": f64, "coins_ptr": f64,
          "final_ptr": f64, "r_ptr": f64, "w_ptr": f64, "out_tokens_ptr": "*i64", "out_path_ptr": "*i64"},
         dict(HAS_Q=False, BLOCK_V=sampler_tree.BLOCK_V), False),
    ]


def compile_all(arch: int = 90) -> dict:
    """Compile each kernel for CUDA sm_<arch>; the value is the compiled kernel or the error text.
    Model kernels compile with Triton's default options, sampler kernels with enable_fp_fusion=False
    (as their launchers run them)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    target = GPUTarget("cuda", arch, 32)
    out = {}
    for name, fn, types, constexprs, fusion in _specs():
        sig = {a: ("constexpr" if a in constexprs else types.get(a, "*fp32" if a.endswith("_ptr") else "i32"))
               for a in fn.arg_names}
        try:
            out[name] = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=constexprs), target=target,
                                       options={"enable_fp_fusion": fusion})
        except Exception as exc:                   # noqa: BLE001 -- reported per kernel
            out[name] = f"{type(exc).__name__}: {exc}"
    return out
