"""The parent's reads, writes and unlinks in directories a worker can write to, made so the worker cannot steer them.

A worker's scratch directory (its log, the exchange directories of tensor files) is bound read-write into its
sandbox, and the evaluator outside may run as root. Whatever the worker leaves there can be a symlink to a host
file, a FIFO, a device node or a sparse file of terabytes; a directory can be swapped for a symlink to a host
directory between two of the parent's steps. So every access here:
- goes through a directory fd opened with O_NOFOLLOW, and an exchange directory's fd is held from the moment the
  parent made it (before any worker ran), so renaming it away or swapping its name for a symlink changes nothing
  of what the parent opens or unlinks, and is refused by name (`ExchangeDir.check`);
- opens entries with O_NOFOLLOW | O_NONBLOCK (a FIFO neither blocks the open nor is read) and accepts regular
  files only (fstat after the open, never stat before it);
- reads a log's tail only (seek to its end less the bytes wanted), never the whole file;
- unlinks only an entry it opened and validated, with unlinkat inside the held directory fd: never a path.
Standard library only (the evaluator's GPU machine). docs/threat-model.md, "Harness I/O", states the bounds.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

LOG_TAIL_BYTES = 600  # of a dead worker's log, quoted in its row's error
KEPT_LOG_BYTES = 16 << 20  # of a worker's log copied into `eval --logs` (its last bytes; the cut is said)
COPY_CHUNK = 1 << 20
_FLAGS_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FLAGS_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NAME = re.compile(r"^[A-Za-z0-9_.#+-]{1,200}$")


class UnsafeEntry(OSError):
    """An entry of a worker-writable directory that is not what the parent made or asked for."""


class RefusedFile(ValueError):
    """A file the worker named that the parent refused to read (UnsafeEntry, a link, a FIFO): the candidate's
    doing, judged as its failure, never an evaluator error."""


def open_dir(path: str | Path) -> int:
    """A directory fd of `path`, whose last component must not be a symlink."""
    try:
        return os.open(path, _FLAGS_DIR)
    except OSError as exc:
        if exc.errno in (20, 40):  # ENOTDIR, ELOOP: a symlink or a file where a directory was
            raise UnsafeEntry(f"{path}: not a directory of the evaluator's (a symlink or another file)") from exc
        raise


def _name(name: str) -> str:
    if not _NAME.match(name) or name in (".", ".."):
        raise UnsafeEntry(f"{name!r}: not a file name the evaluator uses")
    return name


def open_regular(dir_fd: int, name: str, where: str = "") -> int:
    """An fd of the regular file `name` inside `dir_fd` (no link followed, a FIFO not waited for), else
    UnsafeEntry; the caller closes it."""
    fd = os.open(_name(name), _FLAGS_READ, dir_fd=dir_fd)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnsafeEntry(f"{where or name}: not a regular file ({_kind(mode)}); refused")
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _kind(mode: int) -> str:
    for test, word in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISLNK, "a symlink"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return word
    return "not a file"


def read_tail(path: str | Path, nbytes: int = LOG_TAIL_BYTES) -> bytes:
    """The last `nbytes` of the regular file at `path` (a log in a worker-writable directory), read without
    following a link, without waiting on a FIFO and without reading the rest of the file."""
    path = Path(path)
    dir_fd = open_dir(path.parent)
    try:
        fd = open_regular(dir_fd, path.name, str(path))
    finally:
        os.close(dir_fd)
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - nbytes)
        return _pread_upto(fd, min(nbytes, size), start)
    finally:
        os.close(fd)


def _pread_upto(fd: int, n: int, offset: int) -> bytes:
    chunks, done = [], 0
    while done < n:
        chunk = os.pread(fd, min(n - done, COPY_CHUNK), offset + done)
        if not chunk:
            break
        chunks.append(chunk)
        done += len(chunk)
    return b"".join(chunks)


def copy_tail(path: str | Path, dest: str | Path, nbytes: int = KEPT_LOG_BYTES) -> None:
    """Copy the last `nbytes` of the regular file at `path` to `dest` a chunk at a time (a log kept by
    `eval --logs`), with a first line saying how much was left out."""
    path = Path(path)
    dir_fd = open_dir(path.parent)
    try:
        fd = open_regular(dir_fd, path.name, str(path))
    finally:
        os.close(dir_fd)
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - nbytes)
        with open(dest, "wb") as out:
            if start:
                out.write(f"[hotshape: the first {start} bytes of this {size}-byte log are not kept]\n".encode())
            offset = start
            while offset < size:
                chunk = os.pread(fd, min(COPY_CHUNK, size - offset), offset)
                if not chunk:
                    break
                out.write(chunk)
                offset += len(chunk)
    finally:
        os.close(fd)


def open_log(path: str | Path) -> int:
    """An fd to append a worker's output to the log at `path`, made fresh (O_EXCL, no link followed) when the
    name holds anything but a regular file of ours: a symlink or FIFO that an earlier worker left under that
    name is removed (unlinkat removes the entry itself, never what it points to)."""
    path = Path(path)
    dir_fd = open_dir(path.parent)
    try:
        for _ in range(5):
            try:
                fd = os.open(_name(path.name), os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK
                             | os.O_CLOEXEC, dir_fd=dir_fd)
            except FileNotFoundError:
                try:
                    fd = os.open(path.name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                                 | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
                except FileExistsError:
                    continue
            except OSError:  # ELOOP (a symlink), ENXIO (a FIFO without a reader), ...: not our log
                _remove_entry(dir_fd, path.name)
                continue
            mode = os.fstat(fd).st_mode
            if stat.S_ISREG(mode):
                os.set_blocking(fd, True)
                return fd
            os.close(fd)
            _remove_entry(dir_fd, path.name)
        raise UnsafeEntry(f"{path}: the worker's log name keeps being replaced; refused")
    finally:
        os.close(dir_fd)


def _remove_entry(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except IsADirectoryError:
        pass
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno != 21:  # EISDIR
            raise


class ExchangeDir:
    """A directory the parent made for one worker's tensor files, held open from its creation: `path` is what the
    worker is told, every parent access goes through `fd`."""

    def __init__(self, path: str, fd: int) -> None:
        self.path, self.fd = path, fd
        info = os.fstat(fd)
        self.ident = (info.st_dev, info.st_ino)

    @classmethod
    def create(cls, parent: str | Path, prefix: str) -> ExchangeDir:
        """A new directory under `parent` (which the parent made), opened before any worker can see it."""
        import tempfile

        path = tempfile.mkdtemp(prefix=prefix, dir=parent)
        return cls(path, open_dir(path))

    def __fspath__(self) -> str:
        return self.path

    def __str__(self) -> str:
        return self.path

    def check(self) -> None:
        """UnsafeEntry when the directory's name no longer names the directory the parent made (the worker
        replaced it: by a symlink to a host directory, say)."""
        try:
            info = os.lstat(self.path)
        except OSError as exc:
            raise UnsafeEntry(f"exchange directory {self.path} was removed by the worker; refused") from exc
        if (info.st_dev, info.st_ino) != self.ident:
            raise UnsafeEntry(f"exchange directory {self.path} was replaced by the worker "
                              f"({_kind(info.st_mode)}); refused, nothing read or removed through it")

    def entry(self, path: str) -> str:
        """The name of the worker-named file `path` inside this directory (its text must be this directory's path
        and one plain name), after `check`; UnsafeEntry otherwise."""
        self.check()
        if not isinstance(path, str) or os.path.dirname(path) != self.path:
            raise UnsafeEntry(f"tensor file {str(path)[:200]!r} is outside the exchange directory")
        return _name(os.path.basename(path))

    def open(self, path: str) -> tuple[int, str]:
        """(fd, name) of the regular file the worker named `path` inside this directory."""
        name = self.entry(path)
        return open_regular(self.fd, name, path), name

    def unlink(self, name: str) -> None:
        """Remove entry `name` (one `open` validated) from this directory, through its fd."""
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        """Close the held fd (the directory itself is removed with the run's scratch directory or `remove`)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def remove(self) -> None:
        """Remove the directory's contents through its fd, then its name if that is still this directory; close."""
        import shutil

        if self.fd >= 0:
            try:
                for name in os.listdir(self.fd):
                    try:
                        os.unlink(name, dir_fd=self.fd)
                    except IsADirectoryError:
                        shutil.rmtree(name, dir_fd=self.fd, ignore_errors=True)
                    except OSError:
                        pass
                self.check()
                os.rmdir(self.path)
            except OSError:
                pass  # a replaced name, or a directory the worker keeps writing: the run's scratch removal takes it
        self.close()
