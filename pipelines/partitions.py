"""Partition sets: one trace file per partition, one submission per partition."""

from __future__ import annotations

import dagster as dg

# Keys are trace paths relative to the trace root ("llama3-8b/eager.json.gz"): readable in the UI
# and the same string fleet.yaml's globs and the traces table use. Commas break UI selection
# and backfills (dagster-io/dagster#15105) and `|` is the multi-partition separator, so a file
# whose path holds either is not given a partition.
trace_files = dg.DynamicPartitionsDefinition(name="trace_files")

# Keys are submission directory names under the submissions root.
submissions = dg.DynamicPartitionsDefinition(name="submissions")

FORBIDDEN_IN_KEYS = (",", "|")


def usable_key(key: str) -> bool:
    """Whether `key` can be a partition key that the UI and backfills handle."""
    return bool(key) and not any(c in key for c in FORBIDDEN_IN_KEYS)
