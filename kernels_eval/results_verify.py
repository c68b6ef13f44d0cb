"""The results rows a score may use: signed by this host's results key, made against the given release, each
judged once; and what was left out or ran unsandboxed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from kernels_eval.results_key import host_key, row_verifies
from kernels_eval.results_schema import read_results

ROW_KEY = ("submission", "hardware", "run_id", "run", "problem_id")


class ResultsRejected(ValueError):
    """Results that may not be scored; the message names the file and how many rows failed."""


@dataclass
class CheckedResults:
    """Rows that verified, and counts of those that did not."""

    rows: pl.DataFrame
    total: int
    unverified: int  # no signature, a wrong one, another host's key, or a second copy of a row
    other_release: int  # signed, but made against another release (its name or its problems differ)
    unsandboxed: int  # among the rows kept
    earlier_version: int  # kept: made against this release before a refresh (same problems, older digest)


def check_results(path: str | Path, release, *, submission: str | None = None,
                  exclude_unverified: bool = False) -> CheckedResults:
    """The rows of results file `path` (of `submission` only, when given) that may be scored against
    `release`: signed by this host's key, of this release's name and either its release.json digest or, made
    before a refresh, its manifest; a ResultsRejected unless every row passes or `exclude_unverified`."""
    table = read_results(path)
    rows = table.to_pylist()
    try:
        key = host_key(create=False)
    except FileNotFoundError:
        key = None  # no key on this host: nothing here was signed here
    digest, name = release.info.get("digest"), release.name
    manifest = release.info["files"].get("public/manifest.parquet")
    seen: set[tuple] = set()
    keep, unverified, other, earlier = [], 0, 0, 0
    for i, row in enumerate(rows):
        if submission is not None and row["submission"] != submission:
            continue
        ident = tuple(row[c] for c in ROW_KEY)
        if key is None or not row_verifies(row, key) or ident in seen:
            unverified += 1  # a copied genuine row would still move the median over runs
        elif row["release"] != name or (row["release_digest"] != digest and row["manifest_sha256"] != manifest):
            other += 1
        else:
            keep.append(i)
            earlier += row["release_digest"] != digest
        seen.add(ident)
    total = len(keep) + unverified + other
    where = f"{path}: "
    if unverified and not exclude_unverified:
        holder = f"this host's key {key.path} (key id {key.key_id})" if key else "no results key on this host"
        raise ResultsRejected(f"{where}{unverified} of {total} rows fail signature verification with {holder}; "
                              f"--exclude-unverified scores the rest")
    if other and not exclude_unverified:
        raise ResultsRejected(f"{where}{other} of {total} rows were made against another release than "
                              f"{name} (digest {str(digest)[:12]}, other problems); "
                              f"--exclude-unverified scores the rest")
    kept = pl.from_arrow(table.take(keep)) if keep else pl.from_arrow(table.slice(0, 0))
    unsandboxed = int((~kept["sandboxed"].fill_null(False)).sum()) if kept.height else 0
    return CheckedResults(rows=kept, total=total, unverified=unverified, other_release=other,
                          unsandboxed=unsandboxed, earlier_version=int(earlier))
