"""Run every catalogue shape (440) through its torch reference on a GPU and record one CSV row per shape.

Usage (on the GPU machine, from the repo root):
    python benchmarks/run_references.py --out benchmarks/results/references_H200.csv
    python benchmarks/run_references.py --ops fused_moe,rms_norm --out /tmp/part.csv   # a subset

Each row: operator, shape_id, status (ok / error), error, wall_s (forward only, synchronised),
inputs_s (make_inputs), peak_mem_gb, outputs (name:dtype:shape), nan_outputs (outputs holding NaN),
flops, bytes_read, bytes_written, path, t_roofline_s and t_roofline_measured_s on --hardware.
A failing shape (out of memory, an exception) is recorded and the run continues.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
import traceback
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kernels_eval import registry  # noqa: E402
from catalogue.hardware import load_hardware  # noqa: E402
from catalogue.roofline import problem_roofline  # noqa: E402
from catalogue.operators import CATALOGUE_OPERATORS  # noqa: E402

FIELDS = ["operator", "shape_id", "status", "error", "wall_s", "inputs_s", "peak_mem_gb", "outputs", "nan_outputs",
          "flops", "bytes_read", "bytes_written", "path", "t_roofline_s", "t_roofline_measured_s"]


def _outputs(name: str, out) -> dict:
    names = registry.spec(name).outputs
    if isinstance(out, torch.Tensor):
        return {"out": out}
    if isinstance(out, (tuple, list)):
        return dict(zip(names, out))
    return dict(out)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_shape(name: str, sid: str, shape: dict, hw, device: str, seed: int) -> dict:
    """Build inputs, run the reference once, and describe the result."""
    init, inputs_kw = shape.get("init_kwargs") or {}, shape.get("input_kwargs") or {}
    row = {"operator": name, "shape_id": sid, "status": "ok", "error": ""}
    row.update({k: v for k, v in problem_roofline(name, init, inputs_kw, hw).items() if k in FIELDS})
    ref = registry.load_reference(name)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    gen = torch.Generator(device=device).manual_seed(seed)
    t0 = time.perf_counter()
    inputs = ref.make_inputs(**inputs_kw, device=device, generator=gen)
    _sync(device)
    t1 = time.perf_counter()
    with torch.no_grad():
        out = _outputs(name, ref.Model(**init)(**inputs))
    _sync(device)
    row["inputs_s"], row["wall_s"] = round(t1 - t0, 4), round(time.perf_counter() - t1, 4)
    if device.startswith("cuda"):
        row["peak_mem_gb"] = round(torch.cuda.max_memory_allocated() / 2 ** 30, 3)
    row["outputs"] = " ".join(f"{k}:{str(v.dtype).replace('torch.', '')}:{'x'.join(map(str, v.shape))}"
                              for k, v in out.items())
    row["nan_outputs"] = " ".join(k for k, v in out.items()
                                  if v.is_floating_point() and v.dtype.itemsize > 1 and bool(torch.isnan(v).any()))
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--atrex-dir", type=Path, default=REPO / "examples" / "atrex-bench",
                        help="the published Atrex-Bench data (default: examples/atrex-bench)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ops", default="", help="comma-separated operators (default: all 30)")
    parser.add_argument("--hardware", default="H200")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    ops = [o for o in args.ops.split(",") if o] or list(CATALOGUE_OPERATORS)
    hw = load_hardware()[args.hardware]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    failures = 0
    with args.out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()
        for name in ops:
            shapes = json.loads((args.atrex_dir / "data" / name / "shapes.json").read_text())
            for sid, shape in shapes.items():
                try:
                    row = run_shape(name, sid, shape, hw, args.device, args.seed)
                except Exception as exc:  # recorded, not fatal: one bad shape must not hide the other 439
                    failures += 1
                    row = {"operator": name, "shape_id": sid, "status": "error",
                           "error": f"{type(exc).__name__}: {exc}"[:300]}
                    traceback.print_exc()
                writer.writerow(row)
                fh.flush()
                print(f"{row['status']:5s} {name}[{sid}] wall_s={row.get('wall_s', '')} "
                      f"peak_gb={row.get('peak_mem_gb', '')} {row.get('error', '')}", flush=True)
                if args.device.startswith("cuda"):
                    torch.cuda.empty_cache()
    print(f"{failures} failures; wrote {args.out}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
