"""What the evaluator reads of a release — problems and the sealed roofline — with pyarrow only, so that
`hotshape eval` runs on GPU machines without polars. The whole release is checked first by
release/integrity.py (standard library only), the same check score, refresh and drift use."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from release.integrity import IntegrityError, read_verified

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
    integrity: str = ""  # one line: what the check verified, and whether the signature was checked
    digest: str = ""  # release.json's digest, as verified

    def roofline(self, hardware: str) -> dict[str, float]:
        """problem_id → t_roofline_s on `hardware` (empty when the release has none for it)."""
        return {r["problem_id"]: r["t_roofline_s"] for r in self.roofline_rows if r["hardware"] == hardware}

    @property
    def hardware_names(self) -> list[str]:
        """Accelerators the sealed roofline covers."""
        return sorted({r["hardware"] for r in self.roofline_rows})


# Parquet bytes are read through pyarrow's own buffer, never a Python file object: pyarrow's I/O threads
# reading a BytesIO abort the interpreter at exit now and then ("terminate called without an active exception",
# 14 of 40 runs here), after the command has done its work.
def read_release_view(path: str | Path, public_key: bytes | None = None) -> ReleaseView:
    """The release at `path` once it passes the whole check (digest, every file, signature when present)."""
    root = Path(path)
    try:
        check = read_verified(root, public_key)
    except IntegrityError as exc:
        raise ReleaseViewError(str(exc)) from exc
    manifest, roofline = check.data.get(MANIFEST_FILE), check.data.get(ROOFLINE_FILE)
    if manifest is None:
        raise ReleaseViewError(f"{root}: release.json lists no {MANIFEST_FILE}")
    return ReleaseView(path=root, name=check.info.get("name", root.name),
                       problems=pq.read_table(pa.BufferReader(manifest)).to_pylist(),
                       roofline_rows=pq.read_table(pa.BufferReader(roofline)).to_pylist() if roofline else [],
                       integrity=check.summary(), digest=check.info["digest"])
