"""rocprofv3 CSV → kernel_events: kernel dispatches and memory copies, ns timestamps, agents and streams."""

from __future__ import annotations

import csv
import shutil

import polars as pl
import pytest

from ingest.classify import classify_events
from ingest.kineto import TraceError
from ingest.rocprof import read_rocprof
from ingest.schema import KERNEL_EVENTS


@pytest.fixture(scope="module")
def folder(public_traces):
    return public_traces / "rocprofiler-sdk"


def _csv(path):
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_kernels_and_copies(folder):
    events = read_rocprof(folder / "kernel_trace.csv", "rocfixture")
    assert events.columns == KERNEL_EVENTS.names
    kernels, copies = _csv(folder / "kernel_trace.csv"), _csv(folder / "memory_copy_trace.csv")
    assert events.height == len(kernels) + len(copies) == 12
    want = sorted(
        [(r["Kernel_Name"], int(r["End_Timestamp"]) - int(r["Start_Timestamp"]), int(r["Correlation_Id"])) for r in kernels]
        + [(f"Memcpy {r['Direction'].removeprefix('MEMORY_COPY_')}", int(r["End_Timestamp"]) - int(r["Start_Timestamp"]), int(r["Correlation_Id"])) for r in copies]
    )
    assert sorted(events.select("kernel", "dur_ns", "correlation").rows()) == want
    k = events.filter(pl.col("category") == "kernel")
    assert set(k["device"]) == {2} and set(k["stream"]) == {1, 2}
    # The HIP API sample comes from another run: no correlation matches, so nothing is attributed.
    assert set(events["attribution"]) == {"unattributed"}
    assert events["ts_ns"].is_sorted()


def test_folder_input_and_hip_api_join(folder, tmp_path):
    shutil.copy(folder / "kernel_trace.csv", tmp_path / "123_kernel_trace.csv")
    rows = _csv(folder / "kernel_trace.csv")
    with (tmp_path / "123_hip_api_trace.csv").open("w", newline="") as f:
        # A HIP API trace derived from the kernel trace: the launch call of each dispatch.
        w = csv.writer(f)
        w.writerow(["Domain", "Function", "Process_Id", "Thread_Id", "Correlation_Id", "Start_Timestamp", "End_Timestamp"])
        for r in rows:
            w.writerow(["HIP_RUNTIME_API", "hipLaunchKernel", 1, r["Thread_Id"], r["Correlation_Id"], 0, 1])
    events = read_rocprof(tmp_path, "x")
    assert events.height == len(rows)
    assert set(events["launch"]) == {"hipLaunchKernel"} and set(events["attribution"]) == {"launch_only"}


def test_classified_by_name(folder):
    out = classify_events(read_rocprof(folder / "kernel_trace.csv", "x"))
    assert set(out.filter(pl.col("category") == "memcpy")["operator"]) == {"memcpy"}
    assert set(out["phase"]) == {"unknown"}


def test_bad_csv_names_file_and_problem(tmp_path):
    bad = tmp_path / "kernel_trace.csv"
    bad.write_text('"Kind","Agent_Id"\n"KERNEL_DISPATCH",2\n')
    with pytest.raises(TraceError) as err:
        read_rocprof(bad, "x")
    assert str(bad) in str(err.value) and "Kernel_Name" in str(err.value)
    with pytest.raises(TraceError) as err:
        read_rocprof(tmp_path / "trace.json", "x")
    assert "kernel_trace.csv" in str(err.value)
