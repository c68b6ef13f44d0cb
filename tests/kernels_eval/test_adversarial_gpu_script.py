"""benchmarks/adversarial_gpu.py's leftover-process check with cases running side by side (--jobs above 1): a
marker process under the eval of a case still running is that case's, not a survivor of the one being judged.

On one H200 (2026-12-05, --jobs 4) reply_times_rewrite was judged not contained for an escape-marker process that
was setsid_grandchild's sandboxed child, alive because setsid_grandchild was still running beside it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import load_script

REPO = Path(__file__).resolve().parents[2]
adversarial_gpu = load_script(REPO / "benchmarks" / "adversarial_gpu.py")

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)", adversarial_gpu.MARKER]
# a stand-in for a running case's eval: its child carries the marker, as a sandboxed case's child does
CASE_EVAL = [sys.executable, "-c",
             f"import subprocess, time; subprocess.Popen({SLEEPER!r}); time.sleep(60)"]


def _marker_child_of(root: int, deadline_s: float = 20.0) -> int:
    began = time.monotonic()
    while time.monotonic() - began < deadline_s:
        for pid in adversarial_gpu.survivors():
            if adversarial_gpu.parent_pid(pid) == root:
                return pid
        time.sleep(0.05)
    raise AssertionError(f"no marker process appeared under {root}")


def test_a_marker_process_under_another_running_case_is_not_a_survivor():
    case_eval = subprocess.Popen(CASE_EVAL)
    orphan = subprocess.Popen(SLEEPER)  # under no running case: a survivor whichever case looks
    child = None
    try:
        child = _marker_child_of(case_eval.pid)
        assert adversarial_gpu.descends_from(child, {case_eval.pid})
        assert not adversarial_gpu.descends_from(orphan.pid, {case_eval.pid})
        beside = adversarial_gpu.survivors({case_eval.pid})
        assert child not in beside and orphan.pid in beside
        alone = adversarial_gpu.survivors()  # with no case beside it, both are left over
        assert child in alone and orphan.pid in alone
    finally:
        if child is not None:
            os.kill(child, signal.SIGKILL)
        for proc in (case_eval, orphan):
            proc.kill()
            proc.wait()


def test_parent_pid_reads_a_live_process_and_none_for_a_gone_one():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert adversarial_gpu.parent_pid(proc.pid) is None
    assert adversarial_gpu.parent_pid(os.getpid()) == os.getppid()
