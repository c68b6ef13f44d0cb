"""Where a checked or timed call's fixed costs go on a GPU: the profiler's start and stop (torch.profiler's
context manager against Kineto's own calls), the host copies of a large output through the exchange directory
(the transport's path against a plain one-thread write and read), and the parts of `time_calls` on a small
kernel. Imports only torch and kernels_eval; prints a table and writes it as JSON.

    python benchmarks/eval_cost_gpu.py --out $OUT/eval_cost.json [--copy-gib 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch._C._profiler import _ExperimentalConfig  # noqa: E402
from torch.autograd import (ProfilerActivity, ProfilerConfig, ProfilerState, _disable_profiler,  # noqa: E402
                            _enable_profiler, _prepare_profiler)

from kernels_eval.harness import channel  # noqa: E402
from kernels_eval.harness.timing import L2_FLUSH_BYTES, gpu_profiler, time_calls  # noqa: E402


def work(x: torch.Tensor, n: int = 20) -> None:
    for _ in range(n):
        x.mul_(1.0001)


def profiler_costs(repeats: int = 6) -> dict:
    """Seconds of enter, exit and reading the records, per profiled window of 20 small kernels."""
    x = torch.ones(1 << 20, device="cuda")
    rows: dict[str, list[float]] = {"profile_enter": [], "profile_exit": [], "profile_events": [],
                                    "kineto_prepare_enable": [], "kineto_disable": [], "kineto_events": []}
    for _ in range(repeats):
        t0 = time.perf_counter()
        prof = gpu_profiler()
        prof.__enter__()
        t1 = time.perf_counter()
        work(x)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        prof.__exit__(None, None, None)
        t3 = time.perf_counter()
        n = len(prof.profiler.kineto_results.events())
        t4 = time.perf_counter()
        rows["profile_enter"].append(t1 - t0)
        rows["profile_exit"].append(t3 - t2)
        rows["profile_events"].append(t4 - t3)
    acts = {ProfilerActivity.CUDA}
    try:  # the trace id argument is newer than some torch releases
        config = ProfilerConfig(ProfilerState.KINETO, False, False, False, False, False, _ExperimentalConfig(), "")
    except TypeError:
        config = ProfilerConfig(ProfilerState.KINETO, False, False, False, False, False, _ExperimentalConfig())
    for _ in range(repeats):
        t0 = time.perf_counter()
        _prepare_profiler(config, acts)
        _enable_profiler(config, acts)
        t1 = time.perf_counter()
        work(x)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        results = _disable_profiler()
        t3 = time.perf_counter()
        m = len(results.events())
        t4 = time.perf_counter()
        rows["kineto_prepare_enable"].append(t1 - t0)
        rows["kineto_disable"].append(t3 - t2)
        rows["kineto_events"].append(t4 - t3)
    out = {k: statistics.median(v[1:]) for k, v in rows.items()}  # the first window pays CUPTI's start
    out["first_profile_enter"] = rows["profile_enter"][0]
    out["events_per_window"] = [n, m]
    return out


def copy_costs(gib: float, directory: str) -> dict:
    """Seconds to export and import a CUDA tensor of `gib` GiB: the transport against one-thread os.write/read."""
    t = torch.randint(0, 255, (int(gib * 2**30),), dtype=torch.uint8, device="cuda")
    staging = channel.Staging()
    out = {}
    for label in ("transport", "transport_again"):
        t0 = time.perf_counter()
        desc = channel.export_tensor(t, directory, "x", cuda_ipc=False, staging=staging)
        t1 = time.perf_counter()
        back = channel.import_tensor(desc, directory, staging)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        assert torch.equal(back, t)
        del back
        out[f"{label}_export_s"], out[f"{label}_import_s"] = t1 - t0, t2 - t1
    flat, path = t.view(-1), os.path.join(directory, "plain.raw")
    buf, view = staging._pinned()
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    for start in range(0, flat.numel(), staging.nbytes):
        n = min(staging.nbytes, flat.numel() - start)
        buf[:n].copy_(flat[start:start + n])
        v = view[:n]
        while v:
            v = v[os.write(fd, v):]
    os.close(fd)
    t1 = time.perf_counter()
    back = torch.empty_like(flat)
    fd = os.open(path, os.O_RDONLY)
    for start in range(0, flat.numel(), staging.nbytes):
        n = min(staging.nbytes, flat.numel() - start)
        channel._read_into(fd, view[:n], start)
        back[start:start + n].copy_(buf[:n])
    os.close(fd)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    os.unlink(path)
    out["plain_export_s"], out["plain_import_s"] = t1 - t0, t2 - t1
    out["gib"] = gib
    return out


def timing_costs() -> dict:
    """Wall seconds of time_calls on a 1M-element multiply under the profiler, with its settle blocks and
    warm-up as they are and cut down."""
    sets = [{"x": torch.ones(1 << 20, device="cuda")} for _ in range(4)]
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device="cuda")
    out = {}
    for label, kw in (("default", {}), ("default_again", {}), ("settle_2", {"settle_blocks": 2}),
                      ("budget_0.25", {"budget_s": 0.25}), ("no_warmup_s", {"warmup_s": 0.0})):
        t0 = time.perf_counter()
        with gpu_profiler():
            times = time_calls(lambda x: x * 2.0, sets, flush=flush, **kw)
        out[f"{label}_s"] = time.perf_counter() - t0
        out[f"{label}_median_us"] = statistics.median(times) * 1e6
        out[f"{label}_marked"] = times.marked
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--copy-gib", type=float, default=4.0)
    args = ap.parse_args()
    scratch = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    shm = os.statvfs(scratch)
    report = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cpus": os.cpu_count(),
              "scratch": scratch, "scratch_free_gib": shm.f_bavail * shm.f_frsize / 2**30,
              "read_threads": channel.READ_THREADS, "torch_threads": torch.get_num_threads(),
              "profiler": profiler_costs(), "timing": timing_costs(), "copy": copy_costs(args.copy_gib, scratch)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    for part in ("profiler", "timing", "copy"):
        for k, v in report[part].items():
            print(f"{part:9s} {k:28s} {v if not isinstance(v, float) else round(v, 4)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
