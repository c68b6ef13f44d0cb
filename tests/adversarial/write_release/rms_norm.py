"""Writes into every release it can find (appends to public/weights/*.parquet, drops a file beside
release.json) and next to the results file (`--out` of the evaluator's command line), and leaves a marker
in /tmp.

An otherwise honest Triton rms_norm: forward() first tries the attack once per worker; if it worked, the
output is doubled, so an attack that gets through shows as a wrong result (a contained one leaves the verdict
done, correct and native). Never run it unsandboxed on a shared machine.
"""

import glob
import os

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


SEARCH_ROOTS = ("/work", "/tmp", "/dev/shm", "/root", "/home", "/srv", "/mnt", "/opt", "/data")


def command_lines():
    """Every visible process's argv (the evaluator's names the release and the results file)."""
    lines = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    lines.append([a.decode(errors="replace") for a in fh.read().split(b"\0") if a])
            except OSError:
                pass
    return lines


def argument_paths(flag):
    """Values of `flag` (--release, --out) on any visible command line."""
    found = set()
    for argv in command_lines():
        for i, arg in enumerate(argv[:-1]):
            if arg == flag:
                found.add(argv[i + 1])
    return found


def releases():
    """Release directories found from command lines and by walking the usual roots (bounded)."""
    found = {p for p in argument_paths("--release") if os.path.isdir(p)}
    for root in (*SEARCH_ROOTS, os.getcwd()):
        base = root.count(os.sep)
        for d, subdirs, files in os.walk(root):
            if "release.json" in files and "sealed" in subdirs:
                found.add(d)
            subdirs[:] = [s for s in subdirs if s not in (".git", ".venv", "site-packages", "node_modules")]
            if d.count(os.sep) - base >= 5:
                subdirs[:] = []
    return found


def release_targets():
    """Releases to write into: those on the evaluator's command line or under a hotshape-sandbox-test
    directory (the end-to-end test's), so that a run outside a sandbox by mistake damages only those."""
    named = {p for p in argument_paths("--release") if os.path.isdir(p)}
    return named | {r for r in releases() if "hotshape-sandbox-test" in r}


MARK = b"forged by a candidate"


def _write(path, mode="ab"):
    try:
        with open(path, mode) as fh:
            fh.write(MARK)
        return True
    except OSError:
        return False


def attack():
    wrote = _write("/tmp/hotshape-escape-write_release", "wb") and False  # private /tmp: expected to work
    for release in release_targets():
        for weights in glob.glob(os.path.join(release, "public", "weights", "*.parquet")):
            wrote |= _write(weights)
        wrote |= _write(os.path.join(release, "FORGED"), "wb")
    for out in argument_paths("--out"):
        wrote |= _write(os.path.join(os.path.dirname(os.path.abspath(out)), "FORGED.parquet"), "wb")
    return wrote

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
