"""What a candidate can and cannot do inside the evaluator's sandbox on this machine (made for the GPU one).

Usage (from the repo root; bwrap from the bubblewrap .deb unpacked with `dpkg -x`):
    python3 benchmarks/sandbox_probe.py --bwrap /tmp/bwrap/usr/bin/bwrap --release out/atrex-release [--device cuda]

Builds the worker's bwrap command with kernels_eval.harness.sandbox (the evaluator's own code path) and runs a
probe inside that imports torch, allocates on the device, runs a small @triton.jit kernel and a
torch.profiler CUDA-activity profile (CUPTI), and tries to read /root, the release and its parent's /proc
entries. Prints a table; writes probe.json to $OUT when set. Imports only torch, triton, numpy, pyarrow,
pyyaml and kernels_eval.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels_eval.harness import sandbox  # noqa: E402

PROBE = r'''
import json, os, sys, traceback
release, device = sys.argv[1], sys.argv[2]
r = {}
def step(name, fn):
    try:
        r[name] = {"ok": True, "value": fn()}
    except BaseException as exc:  # noqa: BLE001 - each step reports its own failure
        r[name] = {"ok": False, "value": f"{type(exc).__name__}: {exc}"[:300]}
def cuda_alloc():
    import torch
    x = torch.ones(1 << 20, device=device)
    return float(x.sum().item())
import triton, triton.language as tl
@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)
def triton_kernel():
    import torch
    x = torch.zeros(1000, device=device)
    add_one[(4,)](x, 1000, BLOCK=256)
    return float(x.sum().item())
def profile():
    import torch
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    x = torch.randn(512, 512, device=device)
    with profile(activities=acts) as prof:
        (x @ x).sum().item()
    kernels = [e for e in prof.events() if getattr(e, "device_type", None) is not None
               and "CUDA" in str(e.device_type)]
    if device == "cuda" and not kernels:
        raise RuntimeError("the profile holds no CUDA kernel (CUPTI unavailable?)")
    return len(kernels)
def read(path):
    with open(path, "rb") as fh:
        return len(fh.read())
step("uid", os.getuid)
step("pids", lambda: sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
step("torch_import", lambda: __import__("torch").__version__)
step("device_alloc", cuda_alloc)
step("triton_kernel", triton_kernel)
step("profiler_device_kernels", profile)
def home_beyond_interpreter():
    # /root may hold the mount points of an interpreter installed under it, nothing else
    extra = [e for e in os.listdir("/root") if not any(p.startswith(f"/root/{e}") for p in (sys.prefix, sys.base_prefix))]
    if not extra:
        raise PermissionError("nothing of /root is visible beyond the interpreter")
    return extra
step("home_beyond_interpreter", home_beyond_interpreter)
step("read_release_json", lambda: read(os.path.join(release, "release.json")))
step("read_sealed_key", lambda: read(os.path.join(release, "sealed", "problem_id.key")))
step("parent_environ", lambda: read(f"/proc/{os.getppid()}/environ"))
step("pid1_environ_has_hotshape", lambda: b"HOTSHAPE" in open("/proc/1/environ", "rb").read())
step("hotshape_env", lambda: [k for k in os.environ if k.startswith("HOTSHAPE")])
print(json.dumps(r))
'''

# steps a sandbox must let through (True) or stop (False); others are informative
WANTED = {"torch_import": True, "device_alloc": True, "triton_kernel": True, "profiler_device_kernels": True,
          "home_beyond_interpreter": False, "read_release_json": False, "read_sealed_key": False}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bwrap", default=None, help="bwrap executable (default: $HOTSHAPE_BWRAP or PATH)")
    p.add_argument("--release", default="out/atrex-release", help="a release the probe must not see")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = p.parse_args()
    bwrap = args.bwrap or sandbox.find_bwrap()
    problem = sandbox.check_bwrap(bwrap)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    release = os.path.abspath(args.release)
    with tempfile.TemporaryDirectory(prefix="sandbox-probe-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as scratch:
        probe = Path(scratch, "probe.py")  # a file: @triton.jit reads its function's source
        probe.write_text(PROBE)
        argv, env = sandbox.bwrap_command(bwrap, [sys.executable, str(probe), release, args.device],
                                          device=args.device, scratch=Path(scratch))
        began = time.monotonic()
        run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        wall_s = time.monotonic() - began
    if run.returncode != 0 or not run.stdout.strip():
        print(f"probe failed ({run.returncode}):\n{run.stderr[-3000:]}", file=sys.stderr)
        return 1
    result = json.loads(run.stdout.strip().splitlines()[-1])
    failures = [name for name, want in WANTED.items() if result[name]["ok"] != want]
    print(f"{'step':<28} {'ok':<6} {'wanted':<7} value")
    for name, step in result.items():
        want = WANTED.get(name)
        print(f"{name:<28} {step['ok']!s:<6} {'' if want is None else str(want):<7} {str(step['value'])[:90]}")
    print(f"probe wall {wall_s:.1f} s; {'all as wanted' if not failures else 'NOT as wanted: ' + ', '.join(failures)}")
    record = {"device": args.device, "bwrap": bwrap, "command": shlex.join(argv[:argv.index("--") + 1]) + " ...",
              "wall_s": wall_s, "steps": result, "not_as_wanted": failures, "stderr_tail": run.stderr[-2000:]}
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "probe.json").write_text(json.dumps(record, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
