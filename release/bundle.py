"""Release bundles on disk: deterministic Parquet, atomic write, sha256 manifest verified on read."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from release.schema import TABLES, validate

RELEASE_JSON = "release.json"
FORMAT = "hotshape-release/1"
MANIFEST_FILE = "public/manifest.parquet"
SEALED_FILES = {
    "provenance": "sealed/provenance.parquet",
    "roofline": "sealed/roofline.parquet",
    "atrex_operators": "sealed/atrex_operators.parquet",
}


class ReleaseError(ValueError):
    """A release cannot be read or written; the message names the release and the file."""


class ReleaseIntegrityError(ReleaseError):
    """A file of a release is missing, unlisted, or does not match its sha256 in release.json."""


def weights_file(version: int) -> str:
    """Relative path of weights version `version`."""
    return f"public/weights/v{version}.parquet"


def candidates_file(version: int) -> str:
    """Relative path of the candidate list that came with weights version `version`."""
    return f"public/candidates/v{version}.parquet"


def drift_file(version: int) -> str:
    """Relative path of the drift report of weights version `version` against the one before."""
    return f"public/drift/v{version}.json"


def sha256(data: bytes) -> str:
    """Hex sha256 of some bytes."""
    return hashlib.sha256(data).hexdigest()


def parquet_bytes(table: pa.Table | pl.DataFrame, name: str, sort_by: tuple[str, ...],
                  compression: str = "zstd") -> bytes:
    """The table as Parquet bytes that depend only on its rows: schema-checked, sorted, no metadata."""
    if isinstance(table, pl.DataFrame):
        table = table.to_arrow()
    table = validate(table, TABLES[name], name)
    if sort_by and table.num_rows:
        table = table.sort_by([(c, "ascending") for c in sort_by])
    table = table.replace_schema_metadata(None)
    sink = io.BytesIO()
    # store_schema=False: no ARROW:schema blob in the footer; row groups, page sizes and writer
    # version are pinned so that the same rows give the same bytes.
    pq.write_table(
        table, sink, compression=compression, store_schema=False, version="2.6",
        data_page_version="1.0", write_statistics=True, use_dictionary=True,
        row_group_size=1 << 20,
    )
    return sink.getvalue()


def table_file(rel: str, table: pa.Table | pl.DataFrame, name: str, sort_by: tuple[str, ...]) -> bytes:
    """Parquet bytes for file `rel`: public files uncompressed so the leak check sees their raw bytes."""
    return parquet_bytes(table, name, sort_by, "none" if rel.startswith("public/") else "zstd")


def json_bytes(value) -> bytes:
    """JSON bytes in the one layout a release uses: sorted keys, indent 2, final newline."""
    return (json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode()


def _check_rel(rel: str) -> str:
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or not p.parts or rel == RELEASE_JSON:
        raise ReleaseError(f"bad file path in a release: {rel!r}")
    return str(p)


def write_bundle(out: str | Path, files: dict[str, bytes], info: dict, replace: bool = False,
                 check: Callable[[Path], object] | None = None) -> dict:
    """Write files + release.json into a temporary directory and rename it to `out`; the info written.

    A crash leaves either no release or the previous one, never a partial one. `check` (the leak
    check) runs on the finished temporary directory and, by raising, stops the release from
    appearing. `replace` allows an existing release at `out` to be swapped out (used by refresh).
    """
    out = Path(out)
    files = {_check_rel(k): v for k, v in files.items()}
    info = {k: v for k, v in info.items() if k != "digest"}
    info = dict(info, format=FORMAT, files={k: sha256(files[k]) for k in sorted(files)})
    # release.json cannot list its own sha256; it carries the digest of the rest of itself instead.
    info["digest"] = sha256(json_bytes(info))
    if out.exists() and not replace:
        if out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        else:
            raise ReleaseError(f"{out}: already exists; give a new --out (releases are never overwritten)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        for rel, data in files.items():
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        (tmp / RELEASE_JSON).write_bytes(json_bytes(info))
        if check is not None:
            check(tmp)
        _fsync_tree(tmp)
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            os.rename(out, old)
            os.rename(tmp, out)
            shutil.rmtree(old)
        else:
            os.rename(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return info


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())


def _listed_files(root: Path) -> list[str]:
    return sorted(
        p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and p.name != RELEASE_JSON
    )


def load_info(path: str | Path) -> dict:
    """release.json of a release, parsed; a ReleaseError naming the file when unreadable."""
    f = Path(path) / RELEASE_JSON
    try:
        info = json.loads(f.read_bytes())
    except FileNotFoundError as exc:
        raise ReleaseError(f"{f}: not a release (no release.json)") from exc
    except json.JSONDecodeError as exc:
        raise ReleaseIntegrityError(f"{f}: not valid JSON ({exc})") from exc
    if info.get("format") != FORMAT or not isinstance(info.get("files"), dict):
        raise ReleaseIntegrityError(f"{f}: not a {FORMAT} release.json")
    if info.get("digest") != sha256(json_bytes({k: v for k, v in info.items() if k != "digest"})):
        raise ReleaseIntegrityError(f"{f}: its digest does not match its content (corrupted or edited)")
    return info


def verify_release(path: str | Path) -> dict:
    """release.json once every file matches its sha256 and no file is missing or unlisted."""
    root = Path(path)
    info = load_info(root)
    listed = info["files"]
    on_disk = _listed_files(root)
    problems = [f"{rel}: missing" for rel in sorted(set(listed) - set(on_disk))]
    problems += [f"{rel}: not listed in release.json" for rel in sorted(set(on_disk) - set(listed))]
    for rel in sorted(set(listed) & set(on_disk)):
        if sha256((root / rel).read_bytes()) != listed[rel]:
            problems.append(f"{rel}: sha256 does not match release.json (corrupted or edited)")
    if problems:
        raise ReleaseIntegrityError(f"{root}: " + "; ".join(problems))
    return info


@dataclass
class Release:
    """A release read from disk: its release.json, manifest and weight versions; sealed on request."""

    path: Path
    info: dict
    manifest: pl.DataFrame
    verified: bool
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def versions(self) -> list[int]:
        """Weight versions, oldest first."""
        return [int(v["version"]) for v in self.info.get("weights", [])]

    @property
    def name(self) -> str:
        """The release's name."""
        return self.info.get("name", self.path.name)

    def read_bytes(self, rel: str) -> bytes:
        """One listed file's bytes, checked against its sha256 when the release was verified."""
        if rel not in self.info["files"]:
            raise ReleaseError(f"{self.path}: no file {rel} in this release")
        data = (self.path / rel).read_bytes()
        if self.verified and sha256(data) != self.info["files"][rel]:
            raise ReleaseIntegrityError(f"{self.path / rel}: sha256 does not match release.json")
        return data

    def _frame(self, rel: str) -> pl.DataFrame:
        if rel not in self._cache:
            self._cache[rel] = pl.read_parquet(io.BytesIO(self.read_bytes(rel)))
        return self._cache[rel]

    def weights(self, version: int | str | None = None) -> pl.DataFrame:
        """Weights of one version (default: the latest); 'v2', '2' and 2 all mean version 2."""
        if not self.versions:
            raise ReleaseError(f"{self.path}: release has no weights")
        v = self.versions[-1] if version is None else int(str(version).lstrip("v"))
        if v not in self.versions:
            raise ReleaseError(f"{self.path}: no weights version v{v} (has {self.versions})")
        return self._frame(weights_file(v))

    def candidates(self, version: int | None = None) -> pl.DataFrame | None:
        """Candidate shapes listed with a weights version, or None when there are none."""
        v = self.versions[-1] if version is None else int(version)
        rel = candidates_file(v)
        return self._frame(rel) if rel in self.info["files"] else None

    def drift(self, version: int | None = None) -> dict | None:
        """Drift report of a weights version against the previous one, or None for v1."""
        v = self.versions[-1] if version is None else int(version)
        rel = drift_file(v)
        return json.loads(self.read_bytes(rel)) if rel in self.info["files"] else None

    def sealed(self, name: str) -> pl.DataFrame | None:
        """A sealed table (provenance, roofline, atrex_operators), or None when absent."""
        if name not in SEALED_FILES:
            raise ReleaseError(f"no sealed table {name!r}; known: {sorted(SEALED_FILES)}")
        rel = SEALED_FILES[name]
        return self._frame(rel) if rel in self.info["files"] else None

    def all_files(self) -> dict[str, bytes]:
        """Every listed file's bytes (for building the next version of this release)."""
        return {rel: self.read_bytes(rel) for rel in sorted(self.info["files"])}


def read_release(path: str | Path, verify: bool = True) -> Release:
    """The release at `path`; with verify (the default) every file's sha256 is checked first."""
    root = Path(path)
    info = verify_release(root) if verify else load_info(root)
    release = Release(path=root, info=info, manifest=pl.DataFrame(), verified=verify)
    release.manifest = release._frame(MANIFEST_FILE)
    return release
