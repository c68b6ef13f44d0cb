"""Exploit: rms_norm in C. At import a small C file is compiled with gcc into a shared library (in the sandbox's
private /tmp) and loaded with ctypes; forward allocates its output with torch.empty (plain, allowed plumbing),
launches a decoy @triton.jit kernel into a scratch buffer so a launch of the submission is seen, and has the C
function compute every row straight from the tensors' raw data pointers into the output's memory. No aten
compute op runs and no tensor method hands data to the host: the dispatcher sees an allocation and a launch."""

import ctypes
import os
import subprocess
import tempfile

import torch
import triton
import triton.language as tl
from torch import nn

C_SOURCE = r"""
#include <math.h>
#include <stdint.h>
static float bf16(uint16_t h) { uint32_t u = ((uint32_t)h) << 16; float f; __builtin_memcpy(&f, &u, 4); return f; }
static uint16_t to_bf16(float f) { uint32_t u; __builtin_memcpy(&u, &f, 4); u += 0x7FFF + ((u >> 16) & 1); return u >> 16; }
static float h2f(uint16_t h) { return (float)(*(_Float16 *)&h); }
static uint16_t f2h(float f) { _Float16 h = (_Float16)f; return *(uint16_t *)&h; }
void rms(const void *x, const void *w, void *out, long rows, long cols, double eps, int kind) {
    for (long r = 0; r < rows; r++) {
        double acc = 0;
        for (long c = 0; c < cols; c++) {
            float v = kind == 0 ? ((const float *)x)[r * cols + c] : kind == 1 ? bf16(((const uint16_t *)x)[r * cols + c])
                                                               : h2f(((const uint16_t *)x)[r * cols + c]);
            acc += (double)v * v;
        }
        float inv = 1.0f / sqrtf((float)(acc / cols + eps));
        for (long c = 0; c < cols; c++) {
            float v = kind == 0 ? ((const float *)x)[r * cols + c] : kind == 1 ? bf16(((const uint16_t *)x)[r * cols + c])
                                                               : h2f(((const uint16_t *)x)[r * cols + c]);
            float g = kind == 0 ? ((const float *)w)[c] : kind == 1 ? bf16(((const uint16_t *)w)[c]) : h2f(((const uint16_t *)w)[c]);
            float y = v * inv * g;
            if (kind == 0) ((float *)out)[r * cols + c] = y;
            else ((uint16_t *)out)[r * cols + c] = kind == 1 ? to_bf16(y) : f2h(y);
        }
    }
}
"""


def _build():
    where = tempfile.mkdtemp()
    src, lib = os.path.join(where, "rms.c"), os.path.join(where, "rms.so")
    with open(src, "w") as f:
        f.write(C_SOURCE)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", src, "-o", lib, "-lm"], check=True)
    so = ctypes.CDLL(lib)
    so.rms.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long, ctypes.c_long, ctypes.c_double, ctypes.c_int]
    return so


_LIB = _build()
KINDS = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}


@triton.jit
def decoy_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.full((BLOCK,), 1.0, tl.float32), mask=offs < n)


class Model(nn.Module):
    def __init__(self, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = float(eps)

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        flag = torch.empty(16, dtype=torch.float32, device=x.device)
        decoy_kernel[(1,)](flag, 16, BLOCK=16)
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        n_cols = x.shape[-1]
        _LIB.rms(x.data_ptr(), weight.data_ptr(), out.data_ptr(), x.numel() // n_cols, n_cols, self.eps,
                 KINDS[x.dtype])
        return out
