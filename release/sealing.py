"""The leak check: no sealed string appears in any public file of a release, raw or decoded."""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

# Provenance columns whose strings are sealed.
SEALED_COLUMNS = ("deployments", "models", "frameworks", "raw_ops", "kernels", "trace_ids", "trace_files")
# Shorter strings match by chance in any binary file; no real model/framework/kernel name is this short.
MIN_SEALED_LEN = 3
SEALED_DIR = "sealed"


class LeakError(ValueError):
    """A sealed string was found in a public file of a release."""


@dataclass
class LeakReport:
    """What the leak check looked at and what it found."""

    files: list[str] = field(default_factory=list)
    sealed: int = 0
    exempt: list[str] = field(default_factory=list)  # sealed strings that are public vocabulary
    findings: list[tuple[str, str, str]] = field(default_factory=list)  # (file, where, string)

    @property
    def ok(self) -> bool:
        """True when nothing sealed was found."""
        return not self.findings

    def summary(self) -> dict:
        """A JSON-able summary that does not repeat the sealed strings themselves."""
        return {"ok": self.ok, "files_checked": len(self.files), "sealed_strings": self.sealed,
                "exempt_strings": len(self.exempt), "findings": len(self.findings)}


def sealed_strings(provenance: pl.DataFrame | None, extra: tuple[str, ...] | list[str] = ()) -> set[str]:
    """Every sealed string of a release: provenance's names and ids, trace file paths and basenames."""
    found: set[str] = set(s for s in extra if s)
    if provenance is not None:
        for col in SEALED_COLUMNS:
            if col not in provenance.columns:
                continue
            for value in provenance[col].explode().drop_nulls().unique().to_list():
                found.add(str(value))
                if col == "trace_files":
                    found.add(PurePosixPath(str(value)).name)
    return {s.strip() for s in found if len(s.strip()) >= MIN_SEALED_LEN}


def public_vocabulary(manifest: pl.DataFrame | None) -> set[str]:
    """Words a release must publish: operator names, kwarg names, dtype names and values."""
    vocab: set[str] = set()
    if manifest is None:
        return vocab
    vocab.update(manifest["operator"].unique().to_list())

    def walk(v):
        if isinstance(v, dict):
            for k, x in v.items():
                vocab.add(str(k))
                walk(x)
        elif isinstance(v, str):
            vocab.add(v)

    for col in ("init_kwargs", "input_kwargs", "dtypes"):
        if col in manifest.columns:
            for text in manifest[col].unique().to_list():
                if text:
                    walk(json.loads(text))
    return vocab


def split_exempt(sealed: set[str], vocabulary: set[str]) -> tuple[set[str], list[str]]:
    """Sealed strings to search for, and those exempt because they are part of a public word.

    A kernel called `rmsnorm` cannot be hidden in a release that has an operator called
    `fused_qk_rmsnorm`: the operator taxonomy is public by design, so such names are reported
    as exempt instead of failing every release.
    """
    vocab = [v.lower() for v in vocabulary]
    exempt = sorted(s for s in sealed if any(s.lower() in v for v in vocab))
    return sealed - set(exempt), exempt


def public_files(root: str | Path) -> list[str]:
    """Every file of a release outside sealed/ (public/, README.md, plots, release.json)."""
    root = Path(root)
    return sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and p.relative_to(root).parts[0] != SEALED_DIR
    )


def parquet_strings(data: bytes) -> list[tuple[str, str]]:
    """(where, text) for every string a Parquet file decodes to: metadata, names and values."""
    out: list[tuple[str, str]] = []
    meta = pq.read_metadata(pa.BufferReader(data))
    out.append(("created_by", meta.created_by or ""))
    for k, v in (meta.metadata or {}).items():
        out.append(("key-value metadata", k.decode(errors="replace") + "=" + v.decode(errors="replace")))
    table = pq.read_table(pa.BufferReader(data))  # not a BytesIO: see release_view
    for f in table.schema:
        out.append(("column name", f.name))
    for name in table.column_names:
        col = table.column(name)
        while pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
            col = pa.chunked_array([c.flatten() for c in col.chunks], type=col.type.value_type)
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            for value in col.unique().to_pylist():
                if value is not None:
                    out.append((f"column {name}", value))
    return out


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_text(data: bytes) -> bytes:
    """Every byte of a PNG except its compressed pixels (IDAT): text chunks, with zTXt inflated."""
    if not data.startswith(PNG_SIGNATURE):
        return data
    out, pos = [], len(PNG_SIGNATURE)
    while pos + 8 <= len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"zTXt" and b"\0" in body:
            name, rest = body.split(b"\0", 1)
            body = name + b"\0" + zlib.decompress(rest[1:])
        if kind != b"IDAT":
            out.append(kind + body)
        pos += 12 + length
    return b"\n".join(out)


def _is_text(rel: str) -> bool:
    # .py: agent workspaces (kernels_eval/agent/workspace.py) carry Python source, searched ignoring case too
    return rel.endswith((".md", ".json", ".txt", ".csv", ".yaml", ".html", ".py"))


def _find(haystack: bytes, needle: str, fold: bool) -> bool:
    raw = needle.encode("utf-8")
    return raw in haystack or (fold and raw.lower() in haystack.lower())


def leak_check(root: str | Path, sealed: set[str], vocabulary: set[str] = frozenset()) -> LeakReport:
    """Search every public file's raw bytes, and every Parquet file's decoded strings, for sealed strings.

    Text files are searched ignoring case. Binary files are searched case-sensitively (random
    bytes match a short name ignoring case too often), plus their decoded strings ignoring case:
    every Parquet value, name and metadata entry, and a PNG's chunks other than compressed pixels.
    """
    root = Path(root)
    search, exempt = split_exempt(set(sealed), set(vocabulary))
    report = LeakReport(files=public_files(root), sealed=len(search), exempt=exempt)
    needles = sorted(search)
    for rel in report.files:
        data = (root / rel).read_bytes()
        text = _is_text(rel)
        if rel.endswith(".png"):
            data, text = png_text(data), True
        for s in needles:
            if _find(data, s, fold=text):
                report.findings.append((rel, "raw bytes", s))
        if rel.endswith(".parquet"):
            try:
                strings = parquet_strings(data)
            except (pa.ArrowInvalid, OSError) as exc:
                report.findings.append((rel, f"unreadable Parquet ({exc})", ""))
                continue
            for where, value in strings:
                low = value.lower()
                for s in needles:
                    if s.lower() in low:
                        report.findings.append((rel, where, s))
    return report


def assert_no_leak(root: str | Path, sealed: set[str], vocabulary: set[str] = frozenset()) -> LeakReport:
    """The leak report, or a LeakError naming each public file and where a sealed string was found."""
    report = leak_check(root, sealed, vocabulary)
    if not report.ok:
        lines = [f"{rel} ({where}): {s!r}" for rel, where, s in report.findings[:20]]
        more = len(report.findings) - len(lines)
        raise LeakError(
            f"{root}: sealed strings in public files:\n  " + "\n  ".join(lines)
            + (f"\n  ... and {more} more" if more > 0 else "")
        )
    return report
