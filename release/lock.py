"""The writers' lock of a release: `.NAME.lock` beside it, held with fcntl.flock by one build or refresh at a time.

fcntl rather than the `filelock` package: one call does it on the POSIX machines releases are built on,
the kernel drops the lock when its holder dies (a killed run never leaves a stale lock), and the lock
file can say who holds it. The file is removed on release; a waiter that locked a removed file sees its
inode is no longer the path's and tries again, so two writers never hold two different files.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

# Re-entrant within a process: refresh holds the lock and the bundle write it calls takes it again.
_HELD: dict[str, int] = {}
_POLL_S = 0.05


class ReleaseLocked(ValueError):
    """Another process holds a release's lock; the message names it (pid, host, since)."""


def lock_path(release: str | Path) -> Path:
    """The lock file of a release: `.NAME.lock` in the release's parent directory."""
    release = Path(os.path.abspath(release))
    return release.parent / f".{release.name}.lock"


def _holder(path: Path) -> str:
    try:
        h = json.loads(path.read_text())
        return f"pid {h['pid']} on {h['host']} since {h['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that has not yet said who it is"


def _try_lock(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            return fd
        # The holder removed the file as we locked it: lock the file that is there now.
        fcntl.flock(fd, fcntl.LOCK_UN)
    except BlockingIOError:
        pass
    os.close(fd)
    return None


@contextmanager
def release_lock(release: str | Path, wait_s: float = 0.0):
    """Hold the release's writers' lock; waits up to `wait_s` seconds, then a ReleaseLocked naming the holder."""
    path = lock_path(release)
    key = str(path)
    if key in _HELD:
        _HELD[key] += 1
        try:
            yield path
        finally:
            _HELD[key] -= 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + max(wait_s, 0.0)
    while (fd := _try_lock(path)) is None:
        if time.monotonic() >= deadline:
            waited = f" (waited {wait_s:g} s)" if wait_s > 0 else ""
            raise ReleaseLocked(f"{release}: being written by {_holder(path)}{waited}; "
                                f"wait for it with --wait-s SECONDS (lock file {path})")
        time.sleep(_POLL_S)
    since = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": since}).encode())
    _HELD[key] = 1
    try:
        yield path
    finally:
        del _HELD[key]
        try:
            os.unlink(path)
        finally:
            os.close(fd)
