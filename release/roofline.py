"""Sealed roofline rows: our FLOPs, bytes and roofline time per problem and hardware (from the torch-free
operator registry), beside the published catalogue's W, Q and SOL time where a problem came from it."""

from __future__ import annotations

import json

import polars as pl
import pyarrow as pa

from catalogue.hardware import load_hardware
from catalogue.roofline import problem_roofline
from release.schema import ROOFLINE

OUR_ROOFLINE = ("flops", "bytes_read", "bytes_written", "path", "t_roofline_s", "t_roofline_measured_s")


def load_hardware_or_none() -> dict | None:
    """The hardware table (kept under this name: callers may pass None to build without rooflines)."""
    return load_hardware()


def _field(result, name):
    return result.get(name) if isinstance(result, dict) else getattr(result, name, None)


def our_roofline(operator: str, init_kwargs: dict, input_kwargs: dict, hardware: dict | None) -> dict[str, dict]:
    """hardware name → our flops, bytes and roofline time for one problem; {} without a hardware table."""
    if not hardware:
        return {}
    out = {}
    for name in sorted(hardware):
        if hardware[name] is None:
            continue  # a name without a hardware-table entry (tests, or the table not installed)
        try:
            result = problem_roofline(operator, init_kwargs, input_kwargs, hardware[name])
        except (LookupError, ValueError, NotImplementedError):
            # Operator not in the registry or a dtype path this hardware lacks: no row, not a failure.
            continue
        out[name] = {f: _field(result, f) for f in OUR_ROOFLINE}
    return out


def roofline_rows(problem_id: str, operator: str, init_kwargs: dict, input_kwargs: dict,
                  published: dict | None, hardware: dict | None) -> list[dict]:
    """Roofline rows of one problem: ours per hardware, beside Atrex-Bench's published W, Q and SOL."""
    ours = our_roofline(operator, init_kwargs, input_kwargs, hardware)
    pub = {"published_flops": None, "published_flops_dtype": None, "published_bytes_read": None, "published_bytes_written": None}
    sol = {}
    if published is not None:
        w = published.get("semantic_W_flops") or {}
        if len(w) > 1:
            raise ValueError(f"{operator}: semantic_W_flops with several dtypes {sorted(w)} is not supported")
        if w:
            (pub["published_flops_dtype"], pub["published_flops"]), = w.items()
        pub["published_bytes_read"] = published.get("semantic_Q_read_bytes")
        pub["published_bytes_written"] = published.get("semantic_Q_write_bytes")
        sol = published.get("SOL_time_ms") or {}
    names = sorted(set(ours) | set(sol))
    if not names and published is not None:
        names = [""]  # keep published W/Q even when no hardware has a SOL time
    rows = []
    for hw in names:
        mine = ours.get(hw, {})
        rows.append({"problem_id": problem_id, "hardware": hw, **{f: mine.get(f) for f in OUR_ROOFLINE},
                     **pub, "published_t_sol_s": None if sol.get(hw) is None else sol[hw] / 1000})
    return rows


def roofline_frame(rows: list[dict]) -> pl.DataFrame:
    """sealed/roofline rows as a frame with the ROOFLINE schema (empty when there are none)."""
    return pl.from_arrow(pa.Table.from_pylist(rows, schema=ROOFLINE))


def regained_roofline(manifest: pl.DataFrame, old: pl.DataFrame | None, hardware: dict) -> pl.DataFrame:
    """Roofline rows of every problem recomputed with the registry, keeping old rows' published numbers."""
    pub_cols = ("published_flops", "published_bytes_read", "published_bytes_written", "published_t_sol_s")
    rows = []
    for p in manifest.iter_rows(named=True):
        mine = old.filter(pl.col("problem_id") == p["problem_id"]) if old is not None else pl.DataFrame()
        has_pub = mine.height > 0 and any(mine[c].null_count() < mine.height for c in pub_cols)
        rows += roofline_rows(p["problem_id"], p["operator"], json.loads(p["init_kwargs"]),
                              json.loads(p["input_kwargs"]), published_roofline(mine) if has_pub else None, hardware)
    return roofline_frame(rows)


def published_roofline(rows: pl.DataFrame) -> dict:
    """Atrex-Bench's roofline.json entry of one problem from its sealed roofline rows."""
    first = rows.row(0, named=True)
    w = {} if first["published_flops"] is None else {first["published_flops_dtype"]: first["published_flops"]}
    # Stored in seconds like every time of a release; published in ms (×1000 gives the published float back:
    # tests/release/test_atrex.py checks the round trip on every published value).
    sol = {r["hardware"]: r["published_t_sol_s"] * 1000 for r in rows.iter_rows(named=True)
           if r["published_t_sol_s"] is not None and r["hardware"]}
    return {"semantic_W_flops": w, "semantic_Q_read_bytes": first["published_bytes_read"],
            "semantic_Q_write_bytes": first["published_bytes_written"], "SOL_time_ms": sol}


def has_our_roofline(roofline: pl.DataFrame) -> bool:
    """True when any row holds our roofline time (the registry was there at build time)."""
    return roofline.height > 0 and roofline["t_roofline_s"].null_count() < roofline.height
