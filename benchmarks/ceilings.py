"""Measure attainable ceilings on one GPU: device-to-device copy bandwidth and 8192^3 GEMM rates per dtype path.

Usage (on the GPU machine, from the repo root):
    python benchmarks/ceilings.py --out benchmarks/results/ceilings_H200.json

Copy bandwidth counts bytes read + bytes written (2 x buffer size per copy), the convention of
catalogue/hardware.yaml `measured.copy_tbps`. GEMM rates are 2*N^3 / median time of torch.mm
(cuBLAS/cuBLASLt), fp8 through torch._scaled_mm with per-tensor scales and a bf16 output. Every timing is
the median of `--repeats` CUDA-event measurements after warm-up; L2 is irrelevant at these sizes
(1 GiB copies, 384 MiB GEMM operands).
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
from pathlib import Path

import torch


def _median_ms(fn, repeats: int, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def copy_tbps(size_bytes: int, repeats: int) -> float:
    """Device-to-device copy rate in TB/s counting read + write."""
    src = torch.empty(size_bytes, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    ms = _median_ms(lambda: dst.copy_(src), repeats)
    return 2 * size_bytes / (ms * 1e-3) / 1e12


def gemm_tflops(path: str, n: int, repeats: int) -> float:
    """Dense n^3 GEMM rate in TFLOP/s on one dtype path."""
    torch.backends.cuda.matmul.allow_tf32 = path == "tf32_tensor"
    if path == "fp8_tensor":
        a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()  # cuBLASLt wants column-major B
        one = torch.ones((), device="cuda")
        fn = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
    else:
        dtype = {"bf16_tensor": torch.bfloat16, "fp16_tensor": torch.float16,
                 "tf32_tensor": torch.float32, "fp32_vector": torch.float32}[path]
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        fn = lambda: torch.mm(a, b)  # noqa: E731
    ms = _median_ms(fn, repeats)
    torch.backends.cuda.matmul.allow_tf32 = False
    return 2 * n ** 3 / (ms * 1e-3) / 1e12


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--n", type=int, default=8192, help="GEMM size (n x n x n)")
    parser.add_argument("--copy-gib", type=float, default=1.0, help="copy buffer size in GiB")
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("ceilings.py needs a CUDA GPU")
    result = {
        "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gemm_n": args.n, "copy_bytes": int(args.copy_gib * 2 ** 30), "repeats": args.repeats,
        "copy_tbps_read_plus_write": copy_tbps(int(args.copy_gib * 2 ** 30), args.repeats),
        "peak_tflops": {p: gemm_tflops(p, args.n, args.repeats)
                        for p in ("bf16_tensor", "fp16_tensor", "fp8_tensor", "tf32_tensor", "fp32_vector")},
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return result


if __name__ == "__main__":
    main()
