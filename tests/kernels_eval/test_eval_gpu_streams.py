"""benchmarks/eval_gpu_streams.sh, the runner of multi-GPU evaluation plans: one stream per GPU in parallel,
a plan's lines of one GPU in order, each step under its own time limit and OUT folder, its exit status
reported, and comments and blank lines skipped."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "eval_gpu_streams.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                reason="needs bash and coreutils timeout")


def test_streams_run_per_gpu_in_order_in_parallel_with_limits(tmp_path):
    plan = tmp_path / "p.plan"
    plan.write_text(
        "# a comment\n"
        "\n"
        "0 5 a sh -c 'date +%s.%N > \"$OUT/start\"; sleep 2; echo first >> \"$OUT/order\"'\n"
        "0 5 a sh -c 'echo second >> \"$OUT/order\"; echo $CUDA_VISIBLE_DEVICES > \"$OUT/gpu\"'\n"
        "0 1 a sleep 30\n"
        "1 5 b sh -c 'date +%s.%N > \"$OUT/start\"; echo $CUDA_VISIBLE_DEVICES > \"$OUT/gpu\"'\n")
    out = tmp_path / "out"
    began = time.monotonic()
    proc = subprocess.run(["bash", str(SCRIPT), str(plan)], env={"PATH": "/usr/bin:/bin", "OUT": str(out)},
                          capture_output=True, text=True, timeout=60)
    took = time.monotonic() - began
    starts = [float((out / d / "start").read_text()) for d in ("a", "b")]
    assert proc.returncode == 0, proc.stderr
    assert (out / "a" / "order").read_text().split() == ["first", "second"]
    assert (out / "a" / "gpu").read_text().strip() == "0" and (out / "b" / "gpu").read_text().strip() == "1"
    assert "gpu 0: rc=124" in proc.stdout and "sleep 30" in proc.stdout  # cut at its 1 s limit
    assert proc.stdout.count("rc=0") == 3
    assert abs(starts[0] - starts[1]) < 1.5  # GPU 1's stream started beside GPU 0's, not after its 2 s step
    assert took < 15  # and the 30 s sleep was cut


def test_a_plan_needs_out(tmp_path):
    plan = tmp_path / "p.plan"
    plan.write_text("0 5 a true\n")
    proc = subprocess.run(["bash", str(SCRIPT), str(plan)], env={"PATH": "/usr/bin:/bin"}, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode != 0 and "OUT" in proc.stderr
