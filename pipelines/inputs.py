"""What run-pipeline checks and lists before it loads Dagster: the trace root, fleet.yaml and the submissions."""

from __future__ import annotations

from pathlib import Path

from weighting.fleet import load_fleet


def submission_names(root: str | Path) -> list[str]:
    """The submissions under `root`: its folders, hidden ones left out, sorted."""
    root = Path(root)
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")) if root.is_dir() else []


def check_inputs(trace_root: str | Path, fleet: str | Path) -> None:
    """Raise, with a one-line message naming the file, when the trace root or fleet.yaml cannot be used (before any
    run, so that nothing is created on bad input)."""
    if not Path(trace_root).is_dir():
        raise NotADirectoryError(f"{trace_root}: trace root is not a directory (--traces)")
    load_fleet(fleet, trace_root)  # FleetError (a ValueError) names the file, field and problem
