"""The persistent Triton compile cache: one directory per candidate file's sha256 (and Triton version), under a
root the sandbox never shows; a worker sees only its own file's directory, at TRITON_CACHE_DIR (see
docs/threat-model.md "The sandbox")."""

from __future__ import annotations

import hashlib
import os
import shutil
from importlib import metadata
from pathlib import Path

MAX_BYTES = 4 << 30  # a file's cache past this is dropped after its operator is judged (the disk is the host's)


def default_root() -> Path:
    """$XDG_CACHE_HOME/hotshape/triton, else ~/.cache/hotshape/triton."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hotshape" / "triton"


def triton_version() -> str:
    """The installed Triton's version ('none' without one)."""
    try:
        return metadata.version("triton")
    except metadata.PackageNotFoundError:
        return "none"


def file_cache_dir(root: Path, file: Path) -> Path:
    """<root>/triton-<version>/<sha256 of file>, created (owner only)."""
    sha = hashlib.sha256(Path(file).read_bytes()).hexdigest()
    path = Path(os.path.abspath(root)) / f"triton-{triton_version()}" / sha
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def prune(path: Path, max_bytes: int = MAX_BYTES) -> bool:
    """Remove the cache directory `path` when its files (symlinks not followed) exceed max_bytes; True if so."""
    total = 0
    for top, _, names in os.walk(path):
        total += sum(os.lstat(os.path.join(top, n)).st_size for n in names)
    if total > max_bytes:
        shutil.rmtree(path, ignore_errors=True)
        return True
    return False
