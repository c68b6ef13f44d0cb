"""Arrow schema of evaluation results: one row per submission × problem × hardware × run; validated on write."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from catalogue.vocabulary import STAGES
from ingest.field_metadata import described
from release.schema import COLUMNS as RELEASE_COLUMNS

# stage: where the problem stopped ("done" = every stage passed; on CPU performance is not measured, so a
# CPU "done" means compiled, correct and native). shape_kind: "problem" (its own shape, GPU) or "smoke"
# (the operator's registry smoke shapes, CPU interpreter). Times in seconds; roofline_fraction =
# t_roofline_s / t_measured_s (not capped); speedup = t_reference_s / t_measured_s (PyTorch eager).
RESULTS = pa.schema([
    ("submission", pa.string()),
    ("release", pa.string()),
    ("run_id", pa.string()),
    ("run", pa.int32()),
    ("problem_id", pa.string()),
    ("operator", pa.string()),
    ("hardware", pa.string()),
    ("device", pa.string()),
    ("file_sha256", pa.string()),
    ("shape_kind", pa.string()),
    ("stage", pa.string()),
    ("compiled", pa.bool_()),
    ("correct", pa.bool_()),
    ("native", pa.bool_()),
    ("native_fraction", pa.float64()),
    ("fallbacks", pa.list_(pa.string())),
    ("error", pa.string()),
    ("max_abs_err", pa.float64()),
    ("performance_measured", pa.bool_()),
    ("t_measured_s", pa.float64()),
    ("t_p10_s", pa.float64()),
    ("t_p90_s", pa.float64()),
    ("n_timed", pa.int32()),
    ("t_roofline_s", pa.float64()),
    ("roofline_fraction", pa.float64()),
    ("t_reference_s", pa.float64()),
    ("speedup", pa.float64()),
    ("eval_s", pa.float64()),
    ("evaluated_at", pa.timestamp("s", tz="UTC")),
    ("t_event_s", pa.float64()),
    ("sandboxed", pa.bool_()),
    ("release_digest", pa.string()),
    ("manifest_sha256", pa.string()),
    ("key_id", pa.string()),
    ("signature", pa.string()),
    ("device_index", pa.int32()),
    ("run_sealed", pa.bool_()),
    ("memory_accounting", pa.string()),
    ("timing_rule", pa.string()),
    ("t_repeats_s", pa.list_(pa.float64())),
    ("autotune_config", pa.string()),
    ("baseline", pa.string()),
])
# Columns added with signed results (docs/results.md): a row or file without them reads with nulls there, so
# it is unsigned and `hotshape score` refuses it unless told to exclude unverified rows.
# t_event_s: CUDA-event time of a call beside the kernel-span time t_measured_s. sandboxed: whether the
# worker ran in the sandbox. release_digest: release.json's digest the run was made against; manifest_sha256:
# its manifest's (a refresh adds weights and changes the digest, not the problems, so score still takes the
# row). key_id: the fingerprint of the host key that signed the row; signature: hex HMAC-SHA256
# (kernels_eval/results_key.py).
# evaluated_at: a UTC timestamp (seconds); files written before it was typed hold ISO 8601 text, read as the same
# instant (and signed as the same text: results_key normalises both to isoformat).
# device_index: the CUDA device (the evaluator's index) whose worker judged the row; null on cpu and in files
# written before it. Rows signed before it existed hold no value there, so it is signed only where it has one
# (results_key.canonical) and their signatures still verify.
# run_sealed and memory_accounting came later still, signed only where set like device_index: a sealed run's rows
# are true, and its seal (row count, digest of its rows) is in the file's schema metadata (results_seal.py).
# timing_rule, t_repeats_s and autotune_config (docs/reproducibility.md) were added with the same rule, and baseline
# (docs/library-baseline.md) after them.
# Each column's description and unit, carried in the results file's field metadata (ingest.field_metadata; both
# imports are pyarrow only, as the evaluator's machine needs); docs/tables.md lists the same.
COLUMNS = {
    "submission": ("submission directory name", ""),
    "release": ("release name the run was made against", ""),
    "run_id": ("identity of one hotshape eval run", ""),
    "run": ("run index of this submission on this hardware in the file", ""),
    "problem_id": RELEASE_COLUMNS["problem_id"],
    "operator": RELEASE_COLUMNS["operator"],
    "hardware": ("accelerator name (cpu on a machine without a GPU)", ""),
    "device": ("cuda or cpu", ""),
    "file_sha256": ("sha256 of the submission's <operator>.py", ""),
    "shape_kind": ("problem (the problem's own shape, GPU) or smoke (registry smoke shapes, CPU interpreter)", ""),
    "stage": ("where the problem stopped: compile, correctness, adoption, performance, or done", ""),
    "compiled": ("imported and first call returned", ""),
    "correct": ("matched the reference on every input set", ""),
    "native": ("at least 95% of its GPU time in the submission's own @triton.jit kernels", ""),
    "native_fraction": ("share of its GPU time in its own kernels", "fraction"),
    "fallbacks": ("library / Inductor / PyTorch kernels or ops it fell back to", ""),
    "error": ("the first failure's reason", ""),
    "max_abs_err": ("largest absolute difference from the reference, in the output's unit", ""),
    "performance_measured": ("false on CPU: nothing is timed there", ""),
    "t_measured_s": ("median time of the judged timed calls by timing_rule (CUPTI records)", "s"),
    "t_p10_s": ("10th percentile of those times", "s"),
    "t_p90_s": ("90th percentile of those times", "s"),
    "n_timed": ("timed calls", "count"),
    "t_roofline_s": ("the problem's roofline time (from the release's sealed roofline at score time)", "s"),
    "roofline_fraction": ("t_roofline_s / t_measured_s (not capped)", "ratio"),
    "t_reference_s": ("PyTorch eager reference time", "s"),
    "speedup": ("t_reference_s / t_measured_s", "ratio"),
    "eval_s": ("wall time the evaluator spent on the problem", "s"),
    "evaluated_at": ("when the problem was judged, UTC (text in files written before it was typed: read the same)", ""),
    "t_event_s": ("CUDA-event time of a call beside t_measured_s", "s"),
    "sandboxed": ("the worker ran in the sandbox", ""),
    "release_digest": ("release.json's digest the run was made against", ""),
    "manifest_sha256": ("sha256 of that release's manifest", ""),
    "key_id": ("fingerprint of the host key that signed the row", ""),
    "signature": ("HMAC-SHA256 of the row (kernels_eval/results_key.py)", ""),
    "device_index": ("CUDA device whose worker judged the row (hotshape eval --devices); null on cpu and in older "
                     "files", ""),
    "run_sealed": ("the row's run is sealed: its row count and rows' digest are signed in the file's metadata "
                   "(kernels_eval/results_seal.py); null in older files", ""),
    "memory_accounting": ("how the worker's host memory was counted: cgroup (the kernel's, memfd and shm included) or "
                          "process (summed RSS plus the memfd/shm files its processes hold; eval --no-memory-cgroup)",
                          ""),
    "timing_rule": ("how t_measured_s was measured: device_busy (the trusted replay: the union of each call's "
                    "kernel records, host gaps excluded) or kernel_span (docs/reproducibility.md); null on cpu and "
                    "in older files", ""),
    "t_repeats_s": ("median time of each of the problem's full timings in this run (hotshape eval --repeat N; "
                    "t_measured_s is their median); null with one timing", "s"),
    "autotune_config": ("configuration the evaluator's autotuning protocol chose, canonical JSON of [kernel, key, "
                        "config index, config] per autotuned kernel ([] for a file that never names it); null with "
                        "hotshape eval --autotune triton", ""),
    "baseline": ("the library path a baseline row ran (hotshape baseline; 'none' where its operator has none): such a "
                 "row is a reference line, never native and never ranked; null on a submission's row", ""),
}
RESULTS = described(RESULTS, COLUMNS)
LATER_COLUMNS = ("t_event_s", "sandboxed", "release_digest", "manifest_sha256", "key_id", "signature",
                 "device_index", "run_sealed", "memory_accounting", "timing_rule", "t_repeats_s", "autotune_config", "baseline")
SIGNED_WHEN_SET = ("device_index", "run_sealed", "memory_accounting", "timing_rule", "t_repeats_s", "autotune_config",
                   "baseline")


def timestamp(value) -> datetime | None:
    """evaluated_at as an aware UTC datetime from a datetime or ISO 8601 text (naive means UTC)."""
    if value is None or isinstance(value, datetime):
        when = value
    else:
        when = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return when if when is None or when.tzinfo else when.replace(tzinfo=timezone.utc)


def results_table(rows: list[dict]) -> pa.Table:
    """Rows as a RESULTS table; a ValueError naming the first bad row or column."""
    for i, row in enumerate(rows):
        missing = [f.name for f in RESULTS if f.name not in row and f.name not in LATER_COLUMNS]
        if missing:
            raise ValueError(f"results row {i}: missing columns {missing}")
        if row["stage"] not in STAGES:
            raise ValueError(f"results row {i}: stage {row['stage']!r} is not one of {STAGES}")
    try:
        return pa.Table.from_pylist([{f.name: r.get(f.name) for f in RESULTS} | {"evaluated_at": timestamp(
            r.get("evaluated_at"))} for r in rows], schema=RESULTS)
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as exc:
        raise ValueError(f"results rows do not match the schema: {exc}") from exc


def read_results(path: str | Path) -> pa.Table:
    """A results file, checked against RESULTS (columns cast to the schema's types)."""
    table = pq.read_table(path)
    missing = [f.name for f in RESULTS if f.name not in table.column_names and f.name not in LATER_COLUMNS]
    if missing:
        raise ValueError(f"{path}: not a results file (missing columns {missing})")
    for f in RESULTS:
        if f.name not in table.column_names:
            table = table.append_column(f.name, pa.nulls(table.num_rows, f.type))
    at = table.schema.field("evaluated_at")
    if pa.types.is_string(at.type) or pa.types.is_large_string(at.type):  # written before evaluated_at was typed
        try:
            when = pa.array([timestamp(v) for v in table.column("evaluated_at").to_pylist()], RESULTS.field("evaluated_at").type)
        except ValueError as exc:
            raise ValueError(f"{path}: column evaluated_at: {exc}") from exc
        table = table.set_column(table.schema.get_field_index("evaluated_at"), "evaluated_at", when)
    return table.select(RESULTS.names).cast(RESULTS)


def next_run(path: str | Path, submission: str, hardware: str) -> int:
    """The run index for another run of `submission` on `hardware` into results file `path`."""
    path = Path(path)
    if not path.exists():
        return 0
    t = read_results(path).to_pylist()
    runs = [r["run"] for r in t if r["submission"] == submission and r["hardware"] == hardware]
    return max(runs) + 1 if runs else 0
