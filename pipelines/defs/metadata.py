"""Metadata the Dagster UI shows: markdown tables and inline plots."""

from __future__ import annotations

import base64

import dagster as dg
import polars as pl


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|")


def markdown_table(frame: pl.DataFrame, limit: int = 15) -> dg.MetadataValue:
    """The first `limit` rows of `frame` as a markdown table."""
    rows = frame.head(limit)
    lines = ["| " + " | ".join(rows.columns) + " |", "|" + "---|" * len(rows.columns)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows.iter_rows()]
    if frame.height > limit:
        lines.append(f"\n… {frame.height - limit} more rows")
    return dg.MetadataValue.md("\n".join(lines))


def png_markdown(png: bytes, title: str) -> dg.MetadataValue:
    """A PNG plot embedded in markdown, so the UI shows it without a file server."""
    return dg.MetadataValue.md(f"![{title}](data:image/png;base64,{base64.b64encode(png).decode()})")


def svg_markdown(svg: str, title: str) -> dg.MetadataValue:
    """An SVG plot embedded in markdown."""
    return dg.MetadataValue.md(f"![{title}](data:image/svg+xml;base64,{base64.b64encode(svg.encode()).decode()})")


def top_operators(frame: pl.DataFrame, time_col: str, limit: int = 10) -> pl.DataFrame:
    """Operators by total `time_col`, hottest first, with their share of the total."""
    total = frame[time_col].sum() or 1
    return (
        frame.group_by("operator").agg(pl.col(time_col).sum())
        .with_columns((pl.col(time_col) / total).alias("share"))
        .sort([time_col, "operator"], descending=[True, False]).head(limit)
    )
