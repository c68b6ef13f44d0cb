"""The results rows a score may use: signed by this host's results key, made against the given release, each
judged once; and what was left out or ran unsandboxed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from kernels_eval.results_key import host_key, row_verifies
from kernels_eval.results_schema import read_results
from kernels_eval.results_seal import broken_runs, read_seals, run_ident
from kernels_eval.physics import below_roofline, refusal
from kernels_eval.scoring import with_release_roofline

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
    broken_seal: int = 0  # signed, but of a run whose seal is missing, forged or disagrees (rows deleted or added)
    below_roofline: int = 0  # signed, but timed under the release's roofline for the problem (physics.py)
    unsealed: int = 0  # kept: of runs written before sealing (a deleted row there cannot be detected)


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
    first_copy: set[int] = set()  # rows whose signature verifies, each row (ROW_KEY) once
    for i, row in enumerate(rows):
        ident = tuple(row[c] for c in ROW_KEY)
        if key is not None and ident not in seen and row_verifies(row, key):
            first_copy.add(i)
            seen.add(ident)
    # the seals are checked over every verified row of the file: a run is whole or it is refused
    broken = broken_runs([rows[i] for i in sorted(first_copy)], read_seals(path), key) if key is not None else {}
    # a run deleted whole leaves no row to refuse: the rows of its submission on its hardware go with it (their
    # median over runs is no longer the one that was measured); a broken file seal takes every row
    present = {run_ident(rows[i]) for i in first_copy}
    gone = {ident[:2]: why for ident, why in broken.items() if ident not in present}

    def broken_reason(row: dict) -> str | None:
        return broken.get(run_ident(row)) or gone.get((row["submission"], row["hardware"])) or gone.get(("", ""))
    keep, unverified, other, earlier, unsealed_rows, sealed_out = [], 0, 0, 0, 0, []
    for i, row in enumerate(rows):
        if submission is not None and row["submission"] != submission:
            continue
        if i not in first_copy:
            unverified += 1  # a copied genuine row would still move the median over runs
        elif broken_reason(row):
            sealed_out.append(i)
        elif row["release"] != name or (row["release_digest"] != digest and row["manifest_sha256"] != manifest):
            other += 1
        else:
            keep.append(i)
            earlier += row["release_digest"] != digest
            unsealed_rows += not row.get("run_sealed")
    below, physics_note = _below_roofline(table, keep, release)
    keep = [i for i in keep if i not in below]
    total = len(keep) + unverified + other + len(sealed_out) + len(below)
    where = f"{path}: "
    if unverified and not exclude_unverified:
        holder = f"this host's key {key.path} (key id {key.key_id})" if key else "no results key on this host"
        raise ResultsRejected(f"{where}{unverified} of {total} rows fail signature verification with {holder}; "
                              f"--exclude-unverified scores the rest")
    if other and not exclude_unverified:
        raise ResultsRejected(f"{where}{other} of {total} rows were made against another release than "
                              f"{name} (digest {str(digest)[:12]}, other problems); "
                              f"--exclude-unverified scores the rest")
    if sealed_out and not exclude_unverified:
        reasons = sorted({broken_reason(rows[i]) for i in sealed_out})
        raise ResultsRejected(f"{where}{len(sealed_out)} of {total} rows belong to runs whose seal fails: "
                              f"{reasons[0]}{f' (and {len(reasons) - 1} more runs)' if len(reasons) > 1 else ''}; "
                              "--exclude-unverified scores the rest")
    if below and not exclude_unverified:
        raise ResultsRejected(f"{where}{len(below)} of {total} rows are timed below their problem's roofline "
                              f"({physics_note}); --exclude-unverified scores the rest")
    kept = pl.from_arrow(table.take(keep)) if keep else pl.from_arrow(table.slice(0, 0))
    unsandboxed = int((~kept["sandboxed"].fill_null(False)).sum()) if kept.height else 0
    return CheckedResults(rows=kept, total=total, unverified=unverified, other_release=other,
                          unsandboxed=unsandboxed, earlier_version=int(earlier), broken_seal=len(sealed_out),
                          below_roofline=len(below), unsealed=int(unsealed_rows))


def _below_roofline(table, keep: list[int], release) -> tuple[set[int], str]:
    """Indices among `keep` timed under the release's roofline of their problem (the second line of defence of
    physics.py, for rows from elsewhere), and the first one's refusal naming both numbers."""
    if not keep:
        return set(), ""
    rows = pl.from_arrow(table.take(keep)).with_columns(pl.Series("_index", keep))
    timed = rows.filter(pl.col("t_measured_s").is_not_null())
    if timed.height == 0:
        return set(), ""
    roof = with_release_roofline(timed, release)
    below, note = set(), ""
    for r in roof.select("_index", "problem_id", "t_measured_s", "t_roofline_s").iter_rows(named=True):
        if below_roofline(r["t_measured_s"], r["t_roofline_s"]):
            below.add(r["_index"])
            note = note or f"{r['problem_id']}: {refusal(r['t_measured_s'], r['t_roofline_s'])}"
    return below, note
