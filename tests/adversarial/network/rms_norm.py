"""Tries the network: connects to every TCP port listening on 127.0.0.1 in /proc/net/tcp and to the port
the sandbox test listens on, and to an outside address.

An otherwise honest Triton rms_norm: forward() first tries the attack once per worker; if it worked, the
output is doubled, so an attack that gets through shows as a wrong result (a contained one leaves the verdict
done, correct and native). Never run it unsandboxed on a shared machine.
"""

import socket

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


TEST_PORT = 48217  # tests/kernels_eval/test_sandbox.py listens here on the host's loopback


def _listening_ports():
    ports = {TEST_PORT}
    try:
        with open("/proc/net/tcp") as fh:
            for line in fh.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                if state == "0A" and local.startswith("0100007F:"):
                    ports.add(int(local.split(":")[1], 16))
    except OSError:
        pass
    return sorted(ports)[:20]


def attack():
    for host, port in [("127.0.0.1", p) for p in _listening_ports()] + [("1.1.1.1", 53)]:
        try:
            with socket.create_connection((host, port), timeout=1):
                return True
        except OSError:
            pass
    return False

ESCAPED = None  # whether the attack got through, once per worker


class Model(nn.Module):
    def __init__(self, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = float(eps)

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        global ESCAPED
        if ESCAPED is None:
            try:
                ESCAPED = bool(attack())
            except Exception:  # noqa: BLE001 - an attack that raises did not get through
                ESCAPED = False
        x2 = x.reshape(-1, x.shape[-1])
        if x2.stride(-1) != 1:
            x2 = x2.contiguous()
        out = torch.empty_like(x2)
        n_cols = x2.shape[1]
        block = triton.next_power_of_2(n_cols)
        rms_norm_kernel[(x2.shape[0],)](x2, weight, out, n_cols, x2.stride(0), out.stride(0), self.eps,
                                        BLOCK=block, num_warps=4)
        out = out.view(x.shape)
        return out * 2 if ESCAPED else out
