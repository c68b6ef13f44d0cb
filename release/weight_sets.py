"""Weight sets read from releases and weights files: what `hotshape drift` and the pipeline's drift compare."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl

from release.bundle import read_release
from weighting.drift import as_weight_set, shape_labels


def read_weight_set(path: str | Path) -> tuple[pl.DataFrame, str]:
    """A weight set and its label from a weights Parquet file or a release directory (its latest weights).

    A weights file without `operator` (a release's public/weights/vN.parquet) takes it from the
    release's public/manifest.parquet, joined on problem_id.
    """
    path = Path(path)
    release = _release_of(path)
    if release is not None:
        return _release_weight_set(path, release)
    if path.is_dir():
        versions = {}
        for f in (path / "public" / "weights").glob("v*.parquet"):
            m = re.fullmatch(r"v(\d+)\.parquet", f.name)
            if m:
                versions[int(m.group(1))] = f
        if not versions:
            raise ValueError(f"{path}: not a release directory (no public/weights/vN.parquet)")
        file, label = versions[max(versions)], f"{path.name}/v{max(versions)}"
    elif path.is_file():
        file, label = path, path.stem if path.parent.name != "weights" else f"{path.parent.parent.parent.name}/{path.stem}"
    else:
        raise ValueError(f"{path}: no such weights file or release directory")
    frame = pl.read_parquet(file)
    if "operator" not in frame.columns and "problem_id" in frame.columns:
        manifest = file.parent.parent / "manifest.parquet"
        if not manifest.is_file():
            raise ValueError(f"{file}: no column 'operator' and no {manifest} to take it from")
        ops = pl.read_parquet(manifest, columns=["problem_id", "operator"])
        frame = frame.join(ops, on="problem_id", how="left")
        lost = frame.filter(pl.col("operator").is_null())
        if lost.height:
            raise ValueError(f"{file}: problem_id {lost['problem_id'][0]!r} is not in {manifest}")
    return as_weight_set(frame, str(file)), label


def _release_of(path: Path) -> Path | None:
    """The release directory `path` is (or whose public/weights/vN.parquet it is), when it has a release.json."""
    if path.is_dir():
        return path if (path / "release.json").is_file() else None
    up = path.parent.parent.parent
    return up if path.parent.name == "weights" and (up / "release.json").is_file() else None


def _release_weight_set(path: Path, root: Path) -> tuple[pl.DataFrame, str]:
    """A weight set of a release read through the release's whole check (release/integrity.py)."""
    rel = read_release(root)
    if path == root:
        version = rel.versions[-1] if rel.versions else None
    else:
        m = re.fullmatch(r"v(\d+)\.parquet", path.name)
        version = int(m.group(1)) if m else None
    if version is None or version not in rel.versions:
        raise ValueError(f"{path}: not a weights version of the release {root}")
    frame = rel.weights(version).join(rel.manifest.select("problem_id", "operator"), on="problem_id", how="left")
    return as_weight_set(frame, str(path)), f"{root.name}/v{version}"


def read_context(path: str | Path) -> tuple[dict[str, str], dict | None]:
    """(shape labels, the version's sealed inputs or None) of a release or a release's weights file; ({}, None)
    for a bare weights file. The inputs (flow/build.py's sealed/inputs/vN.json) exist from this release format on."""
    path = Path(path)
    root = _release_of(path)
    if root is None:
        return {}, None
    rel = read_release(root)
    m = re.fullmatch(r"v(\d+)\.parquet", path.name)
    version = int(m.group(1)) if m and path != root else rel.versions[-1]
    entry = rel.meta.weights_version(version)
    name = entry.inputs if entry is not None else None
    inputs = json.loads(rel.read_bytes(name)) if name and name in rel.meta.files else None
    return shape_labels(rel.manifest), inputs

