"""The parent's handle on one worker process: spawn, request with a deadline, memory watch, kill."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from kernels_eval.harness import channel


class WorkerDied(RuntimeError):
    """The worker crashed, exited, hung past its deadline or went over its memory limit (it is gone)."""


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class WorkerProcess:
    """A running worker; `request` sends one command and waits for its reply within a deadline."""

    def __init__(self, *, device: str, log_path: Path, memory_bytes: int, start_timeout_s: float,
                 wait: bool = True) -> None:
        """Spawn the worker; with wait=False return at once and let the first request wait for its ready
        line (so the next operator's worker can import torch while the current one is judged)."""
        cmd_r, cmd_w = os.pipe()
        res_r, res_w = os.pipe()
        env = dict(os.environ)
        # the worker imports kernels_eval from this checkout even where the package is not installed
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        if device == "cpu":
            env["TRITON_INTERPRET"] = "1"
        else:
            env.pop("TRITON_INTERPRET", None)
        self.log_path = log_path
        self.memory_bytes = memory_bytes
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kernels_eval.harness.worker", str(cmd_r), str(res_w)],
                pass_fds=(cmd_r, res_w), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=env, start_new_session=True)
        os.close(cmd_r)
        os.close(res_w)
        self.cmd_w, self.res_r = cmd_w, res_r
        self.start_timeout_s = start_timeout_s
        self.ready = False
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Block until the worker has started (imported torch and said so); WorkerDied if it cannot."""
        if not self.ready:
            self.request(None, self.start_timeout_s)
            self.ready = True

    def request(self, message: dict | None, timeout_s: float) -> dict:
        """The worker's reply to `message` (None: wait for its ready line); WorkerDied when it cannot answer."""
        if self.res_r < 0:
            raise WorkerDied(f"worker was stopped{self._log_tail()}")
        if message is not None and not self.ready:
            self.wait_ready()
        try:
            if message is not None:
                channel.send(self.cmd_w, message)
        except OSError as exc:
            self.kill()
            raise WorkerDied(f"worker is gone ({exc}){self._log_tail()}") from exc
        deadline = time.monotonic() + timeout_s
        while True:
            ready, _, _ = select.select([self.res_r], [], [], 0.1)
            if ready:
                try:
                    return channel.recv(self.res_r)
                except EOFError:
                    code = self.proc.wait()
                    self.kill()
                    raise WorkerDied(f"worker process exited with status {code} during the call{self._log_tail()}")
                except ValueError as exc:
                    self.kill()
                    raise WorkerDied(f"worker sent a malformed reply ({exc})") from exc
            code = self.proc.poll()
            if code is not None:
                self.kill()
                raise WorkerDied(f"worker process exited with status {code} during the call{self._log_tail()}")
            rss = _rss_bytes(self.proc.pid)
            if rss > self.memory_bytes:
                self.kill()
                raise WorkerDied(f"worker used {rss / 2**30:.1f} GiB of host memory (limit "
                                 f"{self.memory_bytes / 2**30:.1f} GiB)")
            if time.monotonic() > deadline:
                self.kill()
                raise WorkerDied(f"no answer within {timeout_s:g} s (hang or too slow); worker killed")

    def _log_tail(self) -> str:
        try:
            tail = self.log_path.read_bytes()[-600:].decode(errors="replace").strip()
        except OSError:
            return ""
        return f"; its output ends: {tail}" if tail else ""

    def kill(self) -> None:
        """Kill the worker's process group and close the pipes (idempotent)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for fd in (self.cmd_w, self.res_r):
            try:
                os.close(fd)
            except OSError:
                pass
        self.cmd_w = self.res_r = -1

    def close(self) -> None:
        """Stop the worker."""
        self.kill()
