"""Shims for Triton's CPU interpreter (TRITON_INTERPRET=1), so honest kernels judged on CPU are judged
as a GPU would run them (research/kernels.md §6 lists the interpreter's gaps)."""

from __future__ import annotations


def patch_interpreter() -> None:
    """Install every shim: autotuning without a driver, and the casts and dots the interpreter gets wrong."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter
    from triton.runtime.autotuner import Autotuner

    # The autotuner cannot benchmark configs without a GPU driver: it takes the first.
    Autotuner.do_bench = property(lambda self: lambda fn, quantiles=None, **kw: (fn(), [0.0] * 3)[1])
    _round_fp32_to_bf16(interpreter, tl, np)
    _fp32_to_fp8_like_torch(interpreter, tl, np)
    _bf16_dot_in_fp32(interpreter, tl, np)


def _round_fp32_to_bf16(interpreter, tl, np) -> None:
    # The interpreter truncates fp32 -> bf16; GPUs round to nearest even, and truncation's bias
    # fails honest kernels against a reference computed on the GPU's rounding.
    truncating = interpreter.InterpreterBuilder.cast_impl

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            a = np.ascontiguousarray(src.data, dtype=np.float32)
            bits = a.view(np.uint32).astype(np.uint64)
            rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
            rounded = np.where(np.isnan(a), np.uint16(0x7FC0), rounded)
            return interpreter.TensorHandle(rounded, dst_type.scalar)
        return truncating(self, src, dst_type)

    interpreter.InterpreterBuilder.cast_impl = cast_impl


def _fp32_to_fp8_like_torch(interpreter, tl, np) -> None:
    # fp32 -> float8e4nv casts come out wrong in the interpreter; torch's conversion is the GPU's.
    import torch

    original = interpreter.InterpreterBuilder.create_fp_to_fp

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.float8e4nv:
            a = torch.from_numpy(np.ascontiguousarray(src.data, dtype=np.float32))
            return interpreter.TensorHandle(a.to(torch.float8_e4m3fn).view(torch.uint8).numpy(), dst_type.scalar)
        return original(self, src, dst_type, rounding_mode)

    interpreter.InterpreterBuilder.create_fp_to_fp = create_fp_to_fp


def _bf16_dot_in_fp32(interpreter, tl, np) -> None:
    # bf16 tl.dot is wrong in the interpreter; widening bf16 to fp32 is exact, and the GPU's tensor
    # cores accumulate bf16 products in fp32 too.
    original = interpreter.InterpreterBuilder.create_dot

    def widen(h):
        if h.dtype.scalar != tl.bfloat16:
            return h
        bits = np.ascontiguousarray(h.data).view(np.uint16).astype(np.uint32) << 16
        return interpreter.TensorHandle(bits.view(np.float32), tl.float32)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return original(self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)

    interpreter.InterpreterBuilder.create_dot = create_dot
