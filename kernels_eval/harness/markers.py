"""The evaluator's own kernels around each timed call: the L2 flush, which is also the call's start marker, and a
one-thread end marker. Their names are spans.START_MARKER / END_MARKER; the kernel records between them in
launch order are the call's (kernels_eval.harness.spans). Launched only on a GPU."""

from __future__ import annotations

import os
import tempfile

import triton
import triton.language as tl

from kernels_eval.harness import spans

FLUSH_BLOCK = 8192


@triton.jit
def _hotshape_l2_flush(buf_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(buf_ptr + offs, tl.zeros([BLOCK], dtype=tl.int32), mask=offs < n)


@triton.jit
def _hotshape_call_end(flag_ptr):
    tl.store(flag_ptr, tl.load(flag_ptr) + 1)


assert _hotshape_l2_flush.__name__ == spans.START_MARKER and _hotshape_call_end.__name__ == spans.END_MARKER

FILE = __file__


class Markers:
    """The flush buffer (int32 words over `flush_bytes`) and the end marker's one-word flag, on the GPU."""

    def __init__(self, flush_bytes: int) -> None:
        import torch

        self.n = flush_bytes // 4
        self.buf = torch.empty(self.n, dtype=torch.int32, device="cuda")
        self.flag = torch.zeros(1, dtype=torch.int32, device="cuda")
        self.grid = (triton.cdiv(self.n, FLUSH_BLOCK),)

    def start(self) -> None:
        """Flush L2 (write the whole buffer) on the current stream: the call's start marker."""
        _hotshape_l2_flush[self.grid](self.buf, self.n, BLOCK=FLUSH_BLOCK, num_warps=8)

    def end(self) -> None:
        """The call's end marker on the current stream."""
        _hotshape_call_end[(1,)](self.flag, num_warps=1)

    def warm(self) -> None:
        """A flush without the marker's identity (warm-up calls are not timed)."""
        self.buf.zero_()


def compile_privately(seed: str | None = None) -> None:
    """Compile both markers into this process's kernel cache through a fresh private Triton cache directory,
    before the candidate is imported: the persistent per-file cache (harness/triton_cache.py) is writable by the
    candidate, which could otherwise plant binaries under the markers' keys for its own later runs. `seed`: a
    directory the evaluator compiled them into (`compile_into`, shown read-only), copied in first, so that this
    loads them instead of compiling (a second or two per worker)."""
    import shutil

    private = tempfile.mkdtemp(prefix="hotshape-markers-")
    if seed and os.path.isdir(seed):
        shutil.copytree(seed, private, dirs_exist_ok=True, symlinks=False)
    _compile_in(private)


def compile_into(path: str | os.PathLike) -> None:
    """Compile both markers into the Triton cache directory `path` (the evaluator's, once per run: the seed
    every worker copies, see `compile_privately`)."""
    os.makedirs(path, exist_ok=True)
    _compile_in(os.fspath(path))


def _compile_in(cache_dir: str) -> None:
    import torch

    shared = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = cache_dir
    try:
        n = 16 * FLUSH_BLOCK  # divisible by 16, as the real flush length is: the same specialisation
        buf = torch.empty(n, dtype=torch.int32, device="cuda")
        flag = torch.zeros(1, dtype=torch.int32, device="cuda")
        _hotshape_l2_flush[(triton.cdiv(n, FLUSH_BLOCK),)](buf, n, BLOCK=FLUSH_BLOCK, num_warps=8)
        _hotshape_call_end[(1,)](flag, num_warps=1)
        torch.cuda.synchronize()
    finally:
        if shared is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = shared
