"""Where a release's versions live and how a new one replaces the old: NAME is a symlink to `.NAME.d/<id>`.

A new version is written into `.NAME.d/tmp-<pid>`, renamed to `.NAME.d/<id>`, and published by
os.replace of a fresh symlink onto NAME, so a reader opening NAME sees the old version or the new one,
never neither. Callers hold the release's lock (release/lock.py); everything in `.NAME.d/` other than
the current version, and the `.NAME.tmp-PID` / `.NAME.old-PID` of the earlier two-rename swap, is a
leftover of a killed run and is removed under that lock.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
from pathlib import Path

_RENAME_EXCHANGE = 2


def versions_dir(release: Path) -> Path:
    """The directory holding a release's versions: `.NAME.d` beside NAME."""
    return release.parent / f".{release.name}.d"


def current(release: Path) -> Path | None:
    """The versioned directory NAME points to, NAME itself when it is a plain directory, or None."""
    if release.is_symlink():
        return Path(os.path.realpath(release))
    return release if release.is_dir() else None


def leftovers(release: Path) -> list[Path]:
    """Temporaries and old copies that no finished run leaves: temp dirs, replaced versions, temp links."""
    now = current(release)
    found = [p for p in release.parent.glob(f".{release.name}.*")
             if p.name.startswith((f".{release.name}.tmp-", f".{release.name}.old-", f".{release.name}.link-"))]
    vdir = versions_dir(release)
    if vdir.is_dir():
        found += [p for p in vdir.iterdir() if now is None or p.resolve() != now]
    return sorted(found)


def remove(path: Path) -> None:
    """Remove a file, symlink or directory tree, whichever it is."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path)


def clean(release: Path) -> list[str]:
    """Remove the leftovers of killed runs (the caller holds the lock); the names removed."""
    gone = leftovers(release)
    for p in gone:
        remove(p)
    vdir = versions_dir(release)
    if vdir.is_dir() and not any(vdir.iterdir()) and not release.is_symlink():
        vdir.rmdir()
    return [p.name for p in gone]


def new_temp(release: Path) -> Path:
    """An empty directory to write the next version into, inside `.NAME.d`."""
    tmp = versions_dir(release) / f"tmp-{os.getpid()}"
    remove(tmp)
    tmp.mkdir(parents=True)
    return tmp


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (renames, new links) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE); False where the system cannot."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError, TypeError):
        return False
    at_fdcwd = -100
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) == 0


def publish(release: Path, tmp: Path, version_id: str) -> Path:
    """Move the finished `tmp` to `.NAME.d/<version_id>` and point NAME at it; the versioned directory."""
    vdir = versions_dir(release)
    target = vdir / version_id
    before = current(release)
    if before is not None and before == target.resolve():
        remove(tmp)  # the same bytes are already the current version
        return target
    remove(target)
    os.rename(tmp, target)
    link = release.parent / f".{release.name}.link-{os.getpid()}"
    remove(link)
    os.symlink(os.path.relpath(target, release.parent), link)
    fsync_dir(vdir)
    if release.is_dir() and not release.is_symlink():
        # A release from before versioned directories: a symlink cannot replace a directory by
        # rename, so the two are exchanged in one step and the old directory is removed after.
        if not _exchange(link, release):
            os.rename(release, release.parent / f".{release.name}.old-{os.getpid()}")
            os.rename(link, release)
        remove(link)
    else:
        os.replace(link, release)
    fsync_dir(release.parent)
    for old in leftovers(release):
        remove(old)
    return target
