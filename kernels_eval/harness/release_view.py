"""What the evaluator reads of a release — problems and the sealed roofline — with pyarrow only, so that
`hotshape eval` runs on GPU machines without polars. File paths and the sha256 check mirror release/bundle.py."""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

MANIFEST_FILE = "public/manifest.parquet"
ROOFLINE_FILE = "sealed/roofline.parquet"


class ReleaseViewError(ValueError):
    """The release cannot be read; the message names the file."""


@dataclass
class ReleaseView:
    """A release's name, its problems (manifest rows) and its sealed roofline rows."""

    path: Path
    name: str
    problems: list[dict]
    roofline_rows: list[dict]

    def roofline(self, hardware: str) -> dict[str, float]:
        """problem_id → t_roofline_s on `hardware` (empty when the release has none for it)."""
        return {r["problem_id"]: r["t_roofline_s"] for r in self.roofline_rows if r["hardware"] == hardware}

    @property
    def hardware_names(self) -> list[str]:
        """Accelerators the sealed roofline covers."""
        return sorted({r["hardware"] for r in self.roofline_rows})


def _read(root: Path, files: dict, rel: str) -> bytes | None:
    if rel not in files:
        return None
    data = (root / rel).read_bytes()
    if hashlib.sha256(data).hexdigest() != files[rel]:
        raise ReleaseViewError(f"{root / rel}: sha256 does not match release.json (corrupted or edited)")
    return data


def read_release_view(path: str | Path) -> ReleaseView:
    """The release at `path`, its manifest and roofline checked against release.json's sha256s."""
    root = Path(path)
    try:
        info = json.loads((root / "release.json").read_bytes())
    except FileNotFoundError as exc:
        raise ReleaseViewError(f"{root}: not a release (no release.json)") from exc
    files = info.get("files") or {}
    manifest = _read(root, files, MANIFEST_FILE)
    if manifest is None:
        raise ReleaseViewError(f"{root}: release.json lists no {MANIFEST_FILE}")
    roofline = _read(root, files, ROOFLINE_FILE)
    return ReleaseView(path=root, name=info.get("name", root.name),
                       problems=pq.read_table(io.BytesIO(manifest)).to_pylist(),
                       roofline_rows=pq.read_table(io.BytesIO(roofline)).to_pylist() if roofline else [])
