"""Release bundles on disk: deterministic Parquet, locked atomic write, whole-release check on read."""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from release import integrity, layout
from release.info import InfoError, ReleaseInfo, parse_info
from release.integrity import FORMAT, RELEASE_JSON, UNFINISHED_MARKER, json_bytes, sha256
from release.lock import release_lock
from release.schema import TABLES, validate

MANIFEST_FILE = "public/manifest.parquet"
SEALED_FILES = {
    "provenance": "sealed/provenance.parquet",
    "roofline": "sealed/roofline.parquet",
    "atrex_operators": "sealed/atrex_operators.parquet",
}


class ReleaseError(ValueError):
    """A release cannot be read or written; the message names the release and the file."""


class ReleaseIntegrityError(ReleaseError, integrity.IntegrityError):
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


def intervals_files(version: int) -> tuple[str, str]:
    """Relative paths of the bootstrap intervals of weights version `version`: per problem, per operator."""
    return f"public/intervals/v{version}.parquet", f"public/intervals/v{version}_operators.parquet"


def parquet_bytes(table: pa.Table | pl.DataFrame, name: str, sort_by: tuple[str, ...],
                  compression: str = "zstd") -> bytes:
    """The table as Parquet bytes that depend only on its rows: schema-checked, sorted, no metadata but each
    column's description and unit (release.schema.COLUMNS, in the ARROW:schema footer entry)."""
    if isinstance(table, pl.DataFrame):
        table = table.to_arrow()
    table = validate(table, TABLES[name], name)
    if sort_by and table.num_rows:
        table = table.sort_by([(c, "ascending") for c in sort_by])
    table = table.replace_schema_metadata(None)
    sink = io.BytesIO()
    # The ARROW:schema footer entry carries the field metadata (description, unit) and depends only on the
    # schema; row groups, page sizes and writer version are pinned so that the same rows give the same bytes.
    pq.write_table(
        table, sink, compression=compression, store_schema=True, version="2.6",
        data_page_version="1.0", write_statistics=True, use_dictionary=True,
        row_group_size=1 << 20,
    )
    return sink.getvalue()


def table_file(rel: str, table: pa.Table | pl.DataFrame, name: str, sort_by: tuple[str, ...]) -> bytes:
    """Parquet bytes for file `rel`: public files uncompressed so the leak check sees their raw bytes."""
    return parquet_bytes(table, name, sort_by, "none" if rel.startswith("public/") else "zstd")


def _check_rel(rel: str) -> str:
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or not p.parts or rel in integrity.ENVELOPE or rel == UNFINISHED_MARKER:
        raise ReleaseError(f"bad file path in a release: {rel!r}")
    return str(p)


def write_bundle(out: str | Path, files: dict[str, bytes], info: dict, replace: bool = False,
                 check: Callable[[Path], object] | None = None, signing_key: str | Path | None = None,
                 wait_s: float = 0.0) -> dict:
    """Write files + release.json as a new version of the release at `out` and point `out` at it; the info written.

    Under the release's lock. A crash leaves the previous version (or nothing) in place, never a
    partial one, and the next write removes what it left. `check` (the leak check) runs on the
    finished temporary directory and, by raising, stops the release from appearing. `replace`
    allows an existing release at `out` to be replaced (used by refresh). `signing_key` (an
    Ed25519 private key file) adds release.sig and release.pub.
    """
    out = Path(out)
    files = {_check_rel(k): v for k, v in files.items()}
    info = {k: v for k, v in info.items() if k != "digest"}
    info = dict(info, format=FORMAT, files={k: sha256(files[k]) for k in sorted(files)})
    # release.json cannot list its own sha256; it carries the digest of the rest of itself instead.
    info["digest"] = integrity.info_digest(info)
    typed_info(info, out / RELEASE_JSON)  # what is written is what every reader will accept
    signer = None
    if signing_key is not None:
        from release.signing import load_signing_key  # lazy: it needs cryptography, which the GPU machine lacks

        signer = load_signing_key(signing_key)
    with release_lock(out, wait_s):
        layout.clean(out)
        if os.path.lexists(out) and not replace:
            if out.is_dir() and not out.is_symlink() and not any(out.iterdir()):
                out.rmdir()
            else:
                raise ReleaseError(f"{out}: already exists; give a new --out (releases are never overwritten)")
        tmp = layout.new_temp(out)
        try:
            _write_tree(tmp, files, info, check, signer)
            layout.publish(out, tmp, info["digest"][:16])
        finally:
            layout.remove(tmp)
            layout.clean(out)
    return info


def _write_tree(tmp: Path, files: dict[str, bytes], info: dict, check, signer) -> None:
    """The release's files in `tmp`, durable, the unfinished marker removed last."""
    marker = tmp / UNFINISHED_MARKER
    marker.write_bytes(b"")
    for rel, data in files.items():
        path = tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    body = json_bytes(info)
    (tmp / RELEASE_JSON).write_bytes(body)
    (tmp / integrity.SUMS_FILE).write_bytes(integrity.sha256sums(info["files"], body))
    if check is not None:
        check(tmp)
    if signer is not None:
        # After the leak check: a signature and a public key carry nothing sealed.
        (tmp / integrity.SIGNATURE_FILE).write_bytes(signer.sign(body))
        (tmp / integrity.PUBLIC_KEY_FILE).write_bytes(signer.public_pem)
    _fsync_tree(tmp)
    marker.unlink()
    layout.fsync_dir(tmp)


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
        elif path.is_dir():
            layout.fsync_dir(path)


def _integrity(fn, *args):
    try:
        return fn(*args)
    except integrity.IntegrityError as exc:
        raise ReleaseIntegrityError(str(exc)) from exc


def typed_info(info: dict, where: str | Path) -> ReleaseInfo:
    """release.json's content `info` as a ReleaseInfo; a ReleaseError naming `where` and the bad field otherwise."""
    try:
        return parse_info(info, where)
    except InfoError as exc:
        raise ReleaseError(str(exc)) from None


def load_info(path: str | Path) -> dict:
    """release.json of a release, parsed and its digest checked; a ReleaseError naming the file otherwise."""
    return _integrity(integrity.load_info, path)


def verify_release(path: str | Path, public_key: bytes | None = None) -> integrity.Verified:
    """The release once it passes the whole check (digest, every file, nothing unlisted, signature)."""
    return _integrity(integrity.read_verified, path, public_key)


@dataclass
class Release:
    """A release read from disk: its release.json (`info` as parsed, `meta` typed), manifest and weight
    versions; sealed on request."""

    path: Path
    info: dict
    meta: ReleaseInfo
    manifest: pl.DataFrame
    verified: bool
    _cache: dict = field(default_factory=dict, repr=False)
    root: Path | None = None  # the versioned directory `path` pointed to when read
    check: integrity.Verified | None = field(default=None, repr=False)

    @property
    def versions(self) -> list[int]:
        """Weight versions, oldest first."""
        return [v.version for v in self.meta.weights]

    @property
    def name(self) -> str:
        """The release's name."""
        return self.meta.name

    def read_bytes(self, rel: str) -> bytes:
        """One listed file's bytes: those the check read when the release was verified, else from disk."""
        if rel not in self.meta.files:
            raise ReleaseError(f"{self.path}: no file {rel} in this release")
        if self.check is not None:
            # The bytes that were verified are the bytes used: an edit after the check changes nothing.
            return self.check.data[rel]
        return ((self.root or self.path) / rel).read_bytes()

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
        return self._frame(rel) if rel in self.meta.files else None

    def drift(self, version: int | None = None) -> dict | None:
        """Drift report of a weights version against the previous one, or None for v1."""
        v = self.versions[-1] if version is None else int(version)
        rel = drift_file(v)
        return json.loads(self.read_bytes(rel)) if rel in self.meta.files else None

    def sealed(self, name: str) -> pl.DataFrame | None:
        """A sealed table (provenance, roofline, atrex_operators), or None when absent."""
        if name not in SEALED_FILES:
            raise ReleaseError(f"no sealed table {name!r}; known: {sorted(SEALED_FILES)}")
        rel = SEALED_FILES[name]
        return self._frame(rel) if rel in self.meta.files else None

    def all_files(self) -> dict[str, bytes]:
        """Every listed file's bytes (for building the next version of this release)."""
        return {rel: self.read_bytes(rel) for rel in sorted(self.meta.files)}


def read_release(path: str | Path, verify: bool = True, public_key: bytes | None = None) -> Release:
    """The release at `path`; with verify (the default) it passes the whole check first (integrity.py)."""
    path = Path(path)
    if verify:
        check = verify_release(path, public_key)
        info, root = check.info, check.root
    else:
        check, root = None, layout.current(path) or path
        info = load_info(root)
    release = Release(path=path, info=info, meta=typed_info(info, Path(root) / RELEASE_JSON), manifest=pl.DataFrame(),
                      verified=verify, root=Path(root), check=check)
    release.manifest = release._frame(MANIFEST_FILE)
    return release
