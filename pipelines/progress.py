"""Progress of `hotshape run-pipeline`: one line per asset as Dagster records its materialisation.

Read from the run's own event stream (the instance calls the listener with each event it stores), not from
log text: a step's start and its asset materialisations (with the metadata the asset reported) or its failure.
"""

from __future__ import annotations

from collections.abc import Callable

import dagster as dg

# The figures of an asset's metadata a progress line names, in this order, with how each reads.
FIGURES: tuple[tuple[str, Callable[[object], str]], ...] = (
    ("batch_partitions", lambda v: f"{v:,} partitions in one run"),
    ("batch_parsed", lambda v: f"{v:,} parsed"),
    ("batch_reused", lambda v: f"{v:,} already in the store"),
    ("batch_unreadable", lambda v: f"{v:,} unreadable" if v else ""),
    ("dagster/row_count", lambda v: f"{v:,} rows"),
    ("parsed", lambda v: "parsed" if v else "already in the store"),
    ("problems", lambda v: f"{v} problems"),
    ("operators", lambda v: f"{v} operators"),
    ("weights_version", lambda v: f"weights v{v}"),
    ("compared_with", lambda v: f"against {v}"),
    ("coverage_of_fleet", lambda v: f"coverage {v:.1%} of the fleet"),
    ("correct_rate", lambda v: f"correct {v:.0%}"),
    ("S_agg", lambda v: f"S_agg {v:.4f}"),
    ("evaluated", lambda v: f"{v} evaluated"),
)


def figures(metadata: dict) -> str:
    """The one-line summary of an asset's materialisation metadata (rows, problems, ...; tables and plots left
    out), or ''."""
    values = {k: getattr(v, "value", v) for k, v in metadata.items()}
    if "batch_partitions" in values:  # a run of many partitions: the batch's figures, not one partition's
        values = {k: v for k, v in values.items() if k.startswith("batch_")}
    said = (say(values[k]) for k, say in FIGURES if isinstance(values.get(k), (int, float, str)))
    return ", ".join(s for s in said if s)


def asset_line(asset: str, partition: str | None, seconds: float, summary: str) -> str:
    """`asset [partition] 1.2 s: summary`."""
    where = f" [{partition}]" if partition else ""
    return f"{asset}{where} {seconds:.1f} s" + (f": {summary}" if summary else "")


class AssetProgress:
    """An instance event listener (`DagsterInstance.add_event_listener`) that writes one line per asset
    materialised (one per step for a run of many partitions), and one per failed step, as each happens."""

    def __init__(self, write: Callable[[str], None]):
        self.write, self.started, self.batches = write, {}, set()

    def __call__(self, entry) -> None:
        event = entry.dagster_event
        if event is None:
            return
        if event.event_type == dg.DagsterEventType.STEP_START:
            self.started[entry.step_key] = entry.timestamp
        elif event.event_type == dg.DagsterEventType.ASSET_MATERIALIZATION:
            done = entry.asset_materialization
            seconds = entry.timestamp - self.started.get(entry.step_key, entry.timestamp)
            partition = done.partition
            if "batch_partitions" in done.metadata:
                if (entry.run_id, entry.step_key) in self.batches:
                    return
                self.batches.add((entry.run_id, entry.step_key))
                partition = f"{done.metadata['batch_partitions'].value} partitions"
            self.write(asset_line(done.asset_key.to_user_string(), partition, seconds, figures(done.metadata)))
        elif event.event_type == dg.DagsterEventType.STEP_FAILURE:
            seconds = entry.timestamp - self.started.get(entry.step_key, entry.timestamp)
            error = event.step_failure_data.error
            while error is not None and error.cause is not None:  # the asset's own exception, not Dagster's wrapper
                error = error.cause
            reason = (error.message.strip().splitlines() or [""])[0] if error else ""
            self.write(f"failed {entry.step_key}{f' [{event.partition}]' if event.partition else ''} "
                       f"{seconds:.1f} s: {reason}")
