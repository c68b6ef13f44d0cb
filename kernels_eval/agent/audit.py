"""The optimize loop's audit trail: every candidate, its verdicts, timing, feedback and token counts, as
Parquet (pyarrow only: the loop runs on GPU machines without polars). Rewritten after each iteration, so a
cut run keeps what it reached."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ingest.field_metadata import described
from kernels_eval.results_schema import COLUMNS as RESULT_COLUMNS

ITERATIONS_FILE = "iterations.parquet"
PROBLEMS_FILE = "problems.parquet"

ITERATIONS = pa.schema([
    ("iteration", pa.int32()),
    ("context", pa.int32()),
    ("proposer", pa.string()),
    ("note", pa.string()),
    ("file_sha256", pa.string()),
    ("source", pa.large_string()),
    ("evaluated", pa.bool_()),
    ("accepted", pa.bool_()),
    ("reason", pa.string()),
    ("problems", pa.int32()),
    ("correct", pa.int32()),
    ("native", pa.int32()),
    ("timed", pa.int32()),
    ("weighted_time_s", pa.float64()),
    ("best_weighted_time_s", pa.float64()),
    ("s_op", pa.float64()),
    ("tokens_prompt", pa.int64()),
    ("tokens_completion", pa.int64()),
    ("tokens_total", pa.int64()),
    ("eval_s", pa.float64()),
    ("dropout", pa.bool_()),
    ("feedback_json", pa.large_string()),
])

PROBLEMS = pa.schema([
    ("iteration", pa.int32()),
    ("problem_id", pa.string()),
    ("weight", pa.float64()),
    ("stage", pa.string()),
    ("compiled", pa.bool_()),
    ("correct", pa.bool_()),
    ("native", pa.bool_()),
    ("fallbacks", pa.list_(pa.string())),
    ("error", pa.string()),
    ("max_abs_err", pa.float64()),
    ("t_measured_s", pa.float64()),
    ("t_event_s", pa.float64()),
    ("roofline_fraction", pa.float64()),
])

# Each column's description and unit in the files' field metadata (ingest.field_metadata); docs/tables.md lists
# the same. A problem row's verdict columns mean what the results file's do; an iteration's counts are its own.
PROBLEM_COLUMNS = {
    "iteration": ("the candidate: 0 is the starting file", ""),
    "weight": ("the problem's weight in the release's latest public weights", "fraction"),
    **{c: RESULT_COLUMNS[c] for c in ("problem_id", "stage", "compiled", "correct", "native", "fallbacks", "error",
                                       "max_abs_err", "t_measured_s", "t_event_s", "roofline_fraction")},
}
ITERATION_COLUMNS = {
    "iteration": PROBLEM_COLUMNS["iteration"],
    "context": ("the proposer's context: +1 after each optimization dropout", "count"),
    "proposer": ("the proposer that wrote the candidate (search or llm)", ""),
    "note": ("what the proposer changed and why", ""),
    "file_sha256": ("sha256 of the candidate file", ""),
    "source": ("the candidate file's text", ""),
    "evaluated": ("the candidate was judged", ""),
    "accepted": ("the candidate became the accepted file", ""),
    "reason": ("why it was accepted or not", ""),
    "problems": ("the operator's problems it was judged on", "count"),
    "correct": ("problems it got right", "count"),
    "native": ("problems judged native (its own @triton.jit kernels)", "count"),
    "timed": ("problems timed (GPU only)", "count"),
    "weighted_time_s": ("Σ w·t / Σ w of t_measured_s over the operator's problems (GPU only)", "s"),
    "best_weighted_time_s": ("weighted_time_s of the accepted file after this iteration", "s"),
    "s_op": ("median min(1, roofline fraction) over the problems (GPU; maintainer figure)", "fraction"),
    "tokens_prompt": ("prompt tokens the proposer used", "count"),
    "tokens_completion": ("completion tokens the proposer used", "count"),
    "tokens_total": ("all tokens the proposer used", "count"),
    "eval_s": ("wall time the evaluator spent on the candidate", "s"),
    "dropout": ("the proposer's context was restarted after this iteration", ""),
    "feedback_json": ("the feedback records the proposer was given next (JSON)", ""),
}
ITERATIONS, PROBLEMS = described(ITERATIONS, ITERATION_COLUMNS), described(PROBLEMS, PROBLEM_COLUMNS)


def write_table(rows: list[dict], schema: pa.Schema, path: Path) -> None:
    """Rows as a Parquet file with exactly `schema`'s columns, written to a temporary name and renamed."""
    table = pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows], schema=schema)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)


class AuditTrail:
    """The two tables of one optimize run under `root`."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.iterations: list[dict] = []
        self.problems: list[dict] = []

    def add(self, iteration: dict, problems: list[dict]) -> None:
        """Record one iteration and its per-problem rows, and rewrite both files."""
        self.iterations.append(iteration)
        self.problems.extend(problems)
        self.flush()

    def flush(self) -> None:
        write_table(self.iterations, ITERATIONS, self.root / ITERATIONS_FILE)
        write_table(self.problems, PROBLEMS, self.root / PROBLEMS_FILE)
