"""`hotshape ingest` end to end on the project's example traces: files written, summary, no leaks."""

from __future__ import annotations

import json
import subprocess
import sys

import polars as pl
import pyarrow.parquet as pq
import pytest

from ingest.schema import KERNEL_EVENTS
from tests.conftest import EXAMPLES, REPO
from tests.ingest import reference


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    out = tmp_path_factory.mktemp("ingest")
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "ingest", str(EXAMPLES / "traces"), "--out", str(out), "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    return out, json.loads(proc.stdout)


def test_summary_matches_the_files_and_the_raw_traces(ingested):
    out, summary = ingested
    assert summary["quarantined"] == []
    paths = sorted(t["path"] for t in summary["traces"])
    # Capture-phase traces are sidecars that explain replays, not profiles of their own.
    assert paths == sorted(
        p.relative_to(EXAMPLES / "traces").as_posix()
        for p in (EXAMPLES / "traces").rglob("*.json.gz")
        if "capture_traces" not in p.parts
    )
    traces = pl.read_parquet(out / "traces.parquet")
    for t in summary["traces"]:
        doc = reference.load_exact(EXAMPLES / "traces" / t["path"])
        assert t["gpu_ns"] == reference.total_gpu_ns(doc)
        assert t["attributed_ns"] + t["unattributed_ns"] == t["gpu_ns"]
        assert sum(t["by_attribution"].values()) == t["gpu_ns"]
        assert sum(t["by_operator"].values()) == t["gpu_ns"]
        events = pl.read_parquet(out / "kernel_events" / f"{t['trace_id']}.parquet")
        assert events.height == t["events"] == len(reference.gpu_events(doc))
        assert set(KERNEL_EVENTS.names) <= set(events.columns)
        row = traces.filter(pl.col("trace_id") == t["trace_id"]).row(0, named=True)
        assert row["gpu_ns"] == t["gpu_ns"] and row["path"] == t["path"]


def test_op_shape_time_conserves_each_trace(ingested):
    out, summary = ingested
    ost = pl.read_parquet(out / "op_shape_time.parquet")
    per_trace = dict(ost.group_by("trace_id").agg(pl.col("gpu_ns").sum()).rows())
    assert per_trace == {t["trace_id"]: t["gpu_ns"] for t in summary["traces"]}


def test_raw_trace_metadata_never_reaches_outputs(ingested):
    """Kineto's top-level metadata (trace ids, trace names, may hold env secrets) is not copied."""
    out, summary = ingested
    written = _all_text(out)
    assert "aten::mm" in written  # the decoded outputs really are searched
    for t in summary["traces"]:
        doc = reference.load_exact(EXAMPLES / "traces" / t["path"])
        for key in ("trace_id", "traceName"):
            assert str(doc[key]) not in written


def _all_text(folder) -> str:
    """Every file under `folder` as text: Parquet decoded (rows and schema metadata), others as is."""
    parts = []
    for path in folder.rglob("*"):
        if path.suffix == ".parquet":
            table = pq.read_table(path)
            parts.append(json.dumps(table.to_pylist(), default=str))
            parts.append(str(table.schema.metadata))
        elif path.is_file():
            parts.append(path.read_bytes().decode(errors="replace"))
    return "\n".join(parts)


def test_report_prints_operators_and_phases(ingested):
    out, _ = ingested
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "ingest", str(EXAMPLES / "traces/llama3-8b/eager.json.gz"),
         "--out", str(out.parent / "one"), "--report"],
        capture_output=True, text=True, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert "gemm" in proc.stdout and "phase" in proc.stdout


def test_parallel_ingest_writes_what_one_process_writes(tmp_path):
    """`--jobs 2` spreads traces over two processes; the tables are the same as with one."""
    written = {}
    for jobs in (1, 2):
        out = tmp_path / f"jobs{jobs}"
        proc = subprocess.run(
            [sys.executable, "-m", "pipelines.cli", "ingest", str(EXAMPLES / "traces/llama3-8b"),
             str(EXAMPLES / "traces/deepseek-v2-lite"), "--out", str(out), "--jobs", str(jobs), "--json"],
            capture_output=True, text=True, cwd=REPO,
        )
        assert proc.returncode == 0, proc.stderr
        written[jobs] = (
            json.loads(proc.stdout),
            pl.read_parquet(out / "op_shape_time.parquet").sort(pl.all()),
            {p.name: pl.read_parquet(p) for p in (out / "kernel_events").glob("*.parquet")},
        )
    (s1, ost1, ev1), (s2, ost2, ev2) = written[1], written[2]
    assert s1 == s2 and len(s1["traces"]) == 3
    assert ost1.equals(ost2)
    assert ev1.keys() == ev2.keys() and all(ev1[k].equals(ev2[k]) for k in ev1)


def test_ingesting_one_trace_imports_no_arrow_numpy_or_fsspec(tmp_path):
    """`hotshape ingest TRACE --out DIR` writes described Parquet (ingest.arrow_schema) to a plain directory
    (ingest.store.LocalFiles): pyarrow, numpy and fsspec would be 0.15 s of its imports."""
    code = ("import sys; from pipelines.cli import main; status = main(sys.argv[1:]); "
            "print(sorted({'numpy', 'pyarrow', 'fsspec'} & {m.split('.')[0] for m in sys.modules}), status)")
    trace = EXAMPLES / "traces/llama3-8b/eager.json.gz"
    proc = subprocess.run([sys.executable, "-c", code, "ingest", str(trace), "--out", str(tmp_path / "store")],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "[] 0"
    assert pq.read_schema(next((tmp_path / "store" / "kernel_events").glob("*.parquet"))).field("dur_ns").metadata[b"unit"] == b"ns"


def test_a_sub_command_imports_only_the_command_modules_up_to_its_own():
    """`hotshape ingest` registers ingest's module alone (the others' imports are ~20 ms of every ingest); any
    other word, or none, still finds every sub-command, and each sub-command is found from its own word."""
    from pipelines.cli import COMMAND_MODULES, build_parser

    def commands(parser) -> set[str]:
        return set(next(a for a in parser._actions if a.dest == "command").choices)

    every = commands(build_parser())
    assert commands(build_parser(["--debug", "ingest", "T", "--out", "D"])) == {"ingest"}
    assert commands(build_parser(["--help"])) == commands(build_parser(["no-such-command"])) == every
    assert COMMAND_MODULES[0] == "ingest.commands" and len(every) > 10
    for word in every:
        assert word in commands(build_parser([word]))


def test_the_command_run_as_a_process_exits_with_its_status_and_all_its_output(tmp_path):
    """Run as its own process, `hotshape ingest` leaves by os._exit once everything is written: stdout and stderr
    are flushed first, and the status is the command's (1: nothing ingested, the bad trace quarantined)."""
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00 not gzip")
    proc = subprocess.run([sys.executable, "-m", "pipelines.cli", "ingest", str(bad), "--out", str(tmp_path / "s"), "--json"],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 1, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["traces"] == [] and [q["path"] for q in summary["quarantined"]] == [str(bad)]
    assert json.loads((tmp_path / "s" / "quarantined.json").read_text())
