"""The parent's handle on one worker process: spawn (in the sandbox), request with a deadline, limits, kill."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from kernels_eval.harness import channel, safe_io, sandbox
from kernels_eval.harness.limits import Cgroup, ProcessTree, parent_pid as _parent

BWRAP_PROCESSES = 2  # bwrap outside the sandbox and its pid 1 inside: not the candidate's


def read_log(path: Path, nbytes: int = safe_io.LOG_TAIL_BYTES) -> bytes:
    """The last `nbytes` of a worker's log, read without following links or waiting on a FIFO (safe_io.read_tail):
    the log lies in the sandbox's writable directory, and a candidate that swapped it for a symlink to a file
    outside (the results key, say) would have the evaluator copy that file into its error text."""
    return safe_io.read_tail(path, nbytes)


# Observation lines buffered between two replies: an honest call sends each (kind, detail) once, a few hundred
# lines at most; beyond this the rest of a call's lines are read and dropped, and the flood is a tamper record.
MAX_OBSERVED_BYTES = 1 << 20


class WorkerDied(RuntimeError):
    """The worker crashed, exited, hung past its deadline or went over a limit (it is gone)."""


class NoMemoryCgroup(WorkerDied):
    """A worker was to be started under a cgroup (its memory limit counting memfd and shm) and none could be made."""


class WorkerProcess:
    """A running worker; `request` sends one command and waits for its reply within a deadline."""

    def __init__(self, *, device: str, log_path: Path, memory_bytes: int, start_timeout_s: float,
                 wait: bool = True, sandboxed: bool = True, max_processes: int = 64, scratch: Path | None = None,
                 files: tuple[Path, ...] = (), use_cgroup: bool = True, visible_device: int | None = None,
                 triton_cache: Path | None = None, keep_autotuning: bool = True,
                 module: str = "kernels_eval.harness.worker", require_cgroup: bool = False) -> None:
        """Spawn the worker (in the sandbox unless sandboxed=False; `scratch` is its one writable directory,
        `files` the candidate files it may read); with wait=False return at once and let the first request
        wait for its ready line (so the next operator's worker can import torch while the current one is
        judged). `visible_device` (a CUDA index of this process) is the one GPU the worker is shown;
        `triton_cache` the candidate file's persistent compile cache (None: the run's own, in `scratch`), where
        Triton also keeps the file's autotuning (with keep_autotuning=False it reuses what was kept there and
        keeps nothing). `module`: the program it runs (the worker, or the trusted replay, harness/replay.py).
        With `require_cgroup` a worker whose cgroup cannot be made is not started (NoMemoryCgroup)."""
        bwrap = sandbox.find_bwrap() if sandboxed else None
        if sandboxed and bwrap is None:
            raise sandbox.SandboxUnavailable(sandbox.check_bwrap(None))
        cmd_r, cmd_w = os.pipe()
        res_r, res_w = os.pipe()
        obs_r, obs_w = os.pipe()  # observations of each call, written as they happen (harness/observe.py)
        os.set_blocking(obs_r, False)
        argv = [sys.executable, "-m", module, str(cmd_r), str(res_w), str(obs_w)]
        if bwrap is not None:
            argv, env = sandbox.bwrap_command(bwrap, argv, device=device, scratch=scratch or log_path.parent,
                                              files=files, visible_device=visible_device, file_cache=triton_cache,
                                              keep_autotuning=keep_autotuning)
        else:
            env = {k: v for k, v in os.environ.items() if not k.startswith("HOTSHAPE_")}
            # the worker imports kernels_eval from this checkout even where the package is not installed
            root = str(Path(__file__).resolve().parents[2])
            env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
            if triton_cache is not None:
                env["TRITON_CACHE_DIR"] = str(triton_cache)
                env.update(sandbox.autotuning_env(keep_autotuning))
            if device == "cpu":
                env["TRITON_INTERPRET"] = "1"
            else:
                env.pop("TRITON_INTERPRET", None)
            if visible_device is not None:
                env["CUDA_VISIBLE_DEVICES"] = sandbox.visible_devices(visible_device, os.environ)
        self.sandboxed = bwrap is not None
        self.log_path = log_path
        self.memory_bytes = memory_bytes
        self.max_processes = max_processes
        self.cgroup = Cgroup.create(memory_bytes, max_processes + BWRAP_PROCESSES) if use_cgroup else None
        if self.cgroup is None and require_cgroup:
            for fd in (cmd_r, cmd_w, res_r, res_w, obs_r, obs_w):
                os.close(fd)
            raise NoMemoryCgroup("no cgroup could be made for the worker's memory limit (memfd and shared memory would "
                                 "go uncounted); worker not started")
        if self.cgroup is not None:
            argv = self.cgroup.wrap(argv)
        try:
            log = safe_io.open_log(log_path)  # never through a link or FIFO an earlier worker left at that name
            try:
                self.proc = subprocess.Popen(argv, pass_fds=(cmd_r, res_w, obs_w), stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT, env=env, start_new_session=True)
            finally:
                os.close(log)
        except BaseException:
            for fd in (cmd_r, cmd_w, res_r, res_w, obs_r, obs_w):
                os.close(fd)
            if self.cgroup is not None:
                self.cgroup.remove()
            raise
        os.close(cmd_r)
        os.close(res_w)
        os.close(obs_w)
        self.obs_r, self.observed, self.observed_closed = obs_r, b"", False
        self.observed_dropped = 0  # bytes of observation lines past MAX_OBSERVED_BYTES since the last reply
        self.tree = ProcessTree(self.proc.pid)
        self.cmd_w, self.res_r = cmd_w, res_r
        self.start_timeout_s = start_timeout_s
        self.ready = False
        self.warming = None  # a thread waiting for this worker's "warm" reply (runner._warm_ahead), if any
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
            ready, _, _ = select.select([self.res_r, self.obs_r], [], [], 0.1)
            if self.obs_r in ready:
                self._drain_observed()
            if self.res_r in ready:
                try:
                    reply = channel.recv(self.res_r, deadline)
                    self._drain_observed()
                    lines = self.observed.decode(errors="replace").split("\n")
                    self.observed = lines.pop().encode()  # a partial last line waits for the next reply
                    if self.observed_dropped:
                        lines.append(f"tamper\tthe observation channel carried over {MAX_OBSERVED_BYTES} bytes in "
                                     f"one call ({self.observed_dropped} more dropped): records forged")
                        self.observed, self.observed_dropped = b"", 0
                    # set here, never taken from the worker's own reply
                    reply["observed"] = {"lines": lines, "closed": self.observed_closed}
                    return reply
                except EOFError:
                    code = self.proc.wait()
                    raise self._died(code) from None
                except TimeoutError:
                    self.kill()
                    raise WorkerDied(f"no whole answer within {timeout_s:g} s (a reply begun and not finished); "
                                     "worker killed") from None
                except ValueError as exc:
                    self.kill()
                    raise WorkerDied(f"worker sent a malformed reply ({exc})") from exc
            code = self.proc.poll()
            if code is not None:
                raise self._died(code)
            over = self._over_limit()
            if over:
                self.kill()
                raise WorkerDied(over)
            if time.monotonic() > deadline:
                self.kill()
                raise WorkerDied(f"no answer within {timeout_s:g} s (hang or too slow); worker killed")

    def _drain_observed(self) -> None:
        for _ in range(64):  # at most 4 MiB a turn: a worker writing without end cannot keep the deadline away
            if self.observed_closed or self.obs_r < 0:
                return
            try:
                chunk = os.read(self.obs_r, 1 << 16)
            except BlockingIOError:
                return
            if not chunk:
                self.observed_closed = True
                return
            room = MAX_OBSERVED_BYTES - len(self.observed)
            if len(chunk) > room:  # read on (the worker must not block on a full pipe), keep nothing more
                self.observed_dropped += len(chunk) - max(room, 0)
                chunk = chunk[:max(room, 0)]
            self.observed += chunk

    def usage(self) -> tuple[int, int, bool]:
        """(the candidate's processes, memory bytes, whether the kernel killed one for memory) now."""
        procs, memory, oom = (self.cgroup or self.tree).usage()
        return max(0, procs - (BWRAP_PROCESSES if self.sandboxed else 0)), memory, oom

    def _over_limit(self) -> str | None:
        """Why the worker must be stopped for a limit now, or None."""
        procs, memory, oom = self.usage()
        limit_gb = self.memory_bytes / 2**30
        if procs > self.max_processes:
            return f"worker started {procs} processes (limit {self.max_processes}); worker killed"
        if oom:
            return (f"worker went over its host memory limit of {limit_gb:.1f} GiB (peak {memory / 2**30:.1f} "
                    f"GiB over its processes; the kernel killed one); worker killed")
        if self.cgroup is None and memory > self.memory_bytes:
            return (f"worker used {memory / 2**30:.1f} GiB of host memory over {procs} processes (limit "
                    f"{limit_gb:.1f} GiB); worker killed")
        return None

    def _died(self, code: int) -> WorkerDied:
        """The error of a worker that exited by itself (or was ended by the kernel for the memory limit)."""
        over = self._over_limit() if self.cgroup is not None else None
        self.kill()
        return WorkerDied(over or f"worker process exited with status {code} during the call{self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            tail = read_log(self.log_path).decode(errors="replace").strip()
        except OSError as exc:
            return f"; its log was not read ({exc})" if isinstance(exc, safe_io.UnsafeEntry) else ""
        return f"; its output ends: {tail}" if tail else ""

    def kill(self) -> None:
        """Kill the worker and every process it started, close the pipes (idempotent). In the sandbox the
        pid namespace's init goes first: the kernel then kills everything in the namespace before that init
        exits, and bwrap outside exits with it, so once bwrap is reaped nothing of the candidate is left."""
        pids = self.tree.scan() if self.proc.poll() is None else set()
        if self.sandboxed:
            _signal([p for p in pids if p != self.proc.pid and _parent(p) == self.proc.pid])
            try:
                self.proc.wait(timeout=5)
                pids = set()  # gone with the namespace; their numbers may already be another process's
            except subprocess.TimeoutExpired:
                pass
        _signal(pids)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self.cgroup is not None:
            self.cgroup.remove()
        for fd in (self.cmd_w, self.res_r, self.obs_r):
            try:
                os.close(fd)
            except OSError:
                pass
        self.cmd_w = self.res_r = self.obs_r = -1

    def close(self) -> None:
        """Stop the worker."""
        self.kill()


def _signal(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
