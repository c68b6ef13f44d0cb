"""Nsight Compute per kernel: run one problem of a candidate in a small driver under `ncu`, read DRAM and SM
throughput, achieved occupancy and duration per kernel, and classify each memory-, compute- or latency-bound.

The driver runs the candidate outside the evaluator's sandbox (the profiler needs the GPU's counters): use it
on files you wrote, never on a submission you were sent."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from kernels_eval.agent.records import Struct

METRICS = ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
           "sm__warps_active.avg.pct_of_peak_sustained_active", "gpu__time_duration.sum")
RANGE = "hotshape-measured"  # the NVTX range around the one profiled call
LATENCY_PCT = 40.0  # below this on both DRAM and SM throughput a kernel is waiting, not streaming or computing
TIME_UNITS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6,
              "s": 1e6}


class KernelProfile(Struct, kw_only=True):
    """Nsight Compute's view of one kernel over one call, and the bound it implies."""

    name: str
    launches: int
    time_us: float
    dram_pct: float
    sm_pct: float
    occupancy_pct: float | None
    bound: str  # memory, compute or latency (see classify)


DRIVER = '''
import importlib.util, json, sys
import torch
from kernels_eval.registry import load_reference
spec = json.loads(sys.argv[1])
ref = load_reference(spec["operator"])
loader = importlib.util.spec_from_file_location("candidate", spec["file"])
mod = importlib.util.module_from_spec(loader)
loader.loader.exec_module(mod)
model = mod.Model(**spec["init_kwargs"]).to("cuda")
g = torch.Generator(device="cuda")
g.manual_seed(0)
inputs = ref.make_inputs(**spec["input_kwargs"], device="cuda", generator=g)
with torch.no_grad():
    for _ in range(3):  # compile and autotune outside the profiled range
        model(**inputs)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("''' + RANGE + '''")
    model(**inputs)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
'''


class NcuUnavailable(RuntimeError):
    """Nsight Compute is not installed here, or the profiled run failed; the message says which."""


def find_ncu() -> str | None:
    """Path of the ncu executable: $HOTSHAPE_NCU, ncu on PATH, or CUDA's default place."""
    for path in (os.environ.get("HOTSHAPE_NCU"), shutil.which("ncu"), "/usr/local/cuda/bin/ncu"):
        if path and os.access(path, os.X_OK):
            return path
    return None


def classify(dram_pct: float, sm_pct: float) -> str:
    """latency when neither DRAM nor SM throughput reaches 40% of peak; else memory when DRAM's is the
    larger, compute otherwise."""
    if max(dram_pct, sm_pct) < LATENCY_PCT:
        return "latency"
    return "memory" if dram_pct >= sm_pct else "compute"


def _number(text: str) -> float:
    return float(text.replace(",", "")) if text and text.strip() not in ("", "n/a") else 0.0


def parse_csv(text: str) -> list[dict]:
    """Per kernel name (launches summed, percentages time-weighted): launches, time_us, dram_pct, sm_pct,
    occupancy_pct and bound, from `ncu --csv` output (the program's own lines before the table ignored)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    launches: dict[str, dict] = {}
    for r in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        key = r.get("ID", "")
        one = launches.setdefault(key, {"name": r.get("Kernel Name", "?")})
        metric, value = r.get("Metric Name", ""), r.get("Metric Value", "")
        if metric == "gpu__time_duration.sum":
            one["time_us"] = _number(value) * TIME_UNITS.get(r.get("Metric Unit", "nsecond"), 1e-3)
        elif metric:
            one[metric] = _number(value)
    by_name: dict[str, dict] = {}
    for one in launches.values():
        k = by_name.setdefault(one["name"], {"name": one["name"], "launches": 0, "time_us": 0.0, "dram": 0.0,
                                            "sm": 0.0, "occ": 0.0})
        t = one.get("time_us", 0.0)
        k["launches"] += 1
        k["time_us"] += t
        w = t or 1e-9
        k["dram"] += w * one.get(METRICS[0], 0.0)
        k["sm"] += w * one.get(METRICS[1], 0.0)
        k["occ"] += w * one.get(METRICS[2], 0.0)
    out = []
    for k in by_name.values():
        total = k["time_us"] or 1e-9 * k["launches"]
        dram, sm, occ = k["dram"] / total, k["sm"] / total, k["occ"] / total
        out.append({"name": k["name"], "launches": k["launches"], "time_us": k["time_us"], "dram_pct": dram,
                    "sm_pct": sm, "occupancy_pct": occ, "bound": classify(dram, sm)})
    return sorted(out, key=lambda k: -k["time_us"])


def ncu_command(ncu: str, driver: Path, spec: dict) -> list[str]:
    """The profiler's command line over the driver: the one NVTX-marked call, the four metrics, CSV."""
    return [ncu, "--clock-control", "none", "--nvtx", "--nvtx-include", f"{RANGE}/", "--metrics", ",".join(METRICS),
            "--csv", sys.executable, str(driver), json.dumps(spec)]


def profile_problem(file: str | Path, operator: str, init_kwargs: dict, input_kwargs: dict,
                    timeout_s: float = 300.0) -> list:
    """KernelProfile records of one call of the candidate on one problem; NcuUnavailable where it cannot run."""

    ncu = find_ncu()
    if ncu is None:
        raise NcuUnavailable("Nsight Compute (ncu) is not installed here; set HOTSHAPE_NCU to its path")
    with tempfile.TemporaryDirectory(prefix="hotshape-ncu-") as tmp:
        driver = Path(tmp) / "driver.py"
        driver.write_text(DRIVER)
        spec = {"file": str(Path(file).resolve()), "operator": operator, "init_kwargs": init_kwargs,
                "input_kwargs": input_kwargs}
        try:
            run = subprocess.run(ncu_command(ncu, driver, spec), capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise NcuUnavailable(f"ncu did not finish in {timeout_s:.0f} s") from None
    kernels = parse_csv(run.stdout)
    if run.returncode != 0 or not kernels:
        tail = (run.stderr or run.stdout).strip().splitlines()[-3:]
        raise NcuUnavailable(f"ncu exited {run.returncode} with no kernel table: {' | '.join(tail)[:400]}")
    return [KernelProfile(**k) for k in kernels]
