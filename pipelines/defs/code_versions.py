"""Each asset's code version: a digest of the source of the packages its body calls, so that the UI marks an
asset whose code changed since its last materialisation (and nothing is bumped by hand)."""

import hashlib
from functools import cache
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SOURCE_SUFFIXES = (".py", ".yaml", ".json", ".html")  # .html: the pages' jinja2 templates


@cache
def _package_digest(package: str) -> bytes:
    digest = hashlib.sha256()
    root = REPO_ROOT / package
    for path in sorted(p for p in root.rglob("*") if p.suffix in SOURCE_SUFFIXES and "__pycache__" not in p.parts):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.digest()


def code_version(*packages: str) -> str:
    """The first 12 hex digits of a digest of the sources (.py, .yaml, .json) of `packages` (top-level package
    folders, for instance "ingest")."""
    return hashlib.sha256(b"".join(_package_digest(p) for p in sorted(packages))).hexdigest()[:12]
