"""The Kineto reader on every public fixture generation: time conservation, timestamps, linking."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from ingest import tracefile
from ingest.kineto import TraceError, read_kineto, to_ns
from ingest.pipeline import read_events
from tests.conftest import EXAMPLES, PUBLIC_TRACES, REPO
from tests.fixtures.cut_trace import GPU_CATS, cut_first_gpu, load, save
from tests.ingest import reference

NOT_TRACES = {"benchmark_simple_add_et.json.gz", "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"}
FIXTURES = sorted(p for p in PUBLIC_TRACES.rglob("*.json.gz") if p.name not in NOT_TRACES)
EXAMPLE_TRACES = sorted(EXAMPLES.rglob("*.json.gz"))


def _id(path: Path) -> str:
    return "/".join(path.parts[-2:])


@pytest.mark.parametrize("path", FIXTURES + EXAMPLE_TRACES, ids=_id)
def test_gpu_time_is_conserved_exactly(path):
    """Σ over attribution classes = Σ GPU activity time in the file, in integer ns; nothing dropped or doubled."""
    doc = reference.load_exact(path)
    events = read_events(path)
    assert events.height == len(reference.gpu_events(doc))
    by_class = events.group_by("attribution").agg(pl.col("dur_ns").sum())
    assert sum(by_class["dur_ns"].to_list()) == reference.total_gpu_ns(doc)
    assert set(by_class["attribution"].to_list()) <= {"direct", "graph_replay", "launch_only", "unattributed"}


@pytest.mark.parametrize(
    "name",
    [
        "tracelens/b200/eager_trace.json.gz",  # cudaLaunchKernelExC + cuLaunchKernelEx, relative µs + base ns
        "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",  # ROCm hip* rows
        "hta/timeline_analysis/sampled_rank-0.json.gz",  # no flow events at all
        "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
        "tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz",
        "tracelens/torch_compile_triton/trace.json.gz",
    ],
)
def test_op_chain_matches_brute_force(public_traces, name):
    """Each activity's op chain is exactly the set of CPU ranges enclosing its launch row."""
    path = public_traces / name
    expected = reference.expected_chains(reference.load_exact(path))
    events = read_events(path).filter(pl.col("launch").is_not_null())
    assert events.height > 0
    for correlation, chain in events.select("correlation", "op_chain").unique("correlation").iter_rows():
        assert chain == expected[correlation], correlation


def test_legacy_format_links_by_correlation(public_traces):
    """PyTorch <= 1.13 traces (async_cpu_to_gpu flows, Profiler Event Index) link through correlation."""
    path = public_traces / "hta/trace_diff/control/control.json.gz"
    events = read_events(path)
    direct = events.filter(pl.col("attribution") == "direct")
    assert direct.height / events.height > 0.99
    # Backward-pass GEMMs are launched from autograd ops on the backward thread.
    mm = direct.filter(pl.col("kernel").str.contains("gemm") & (pl.col("op") == "aten::mm"))
    assert mm.height > 0
    assert all(any(n.startswith("autograd::engine") for n in chain) for chain in mm["op_chain"].head(20))


def test_absolute_float_timestamps_keep_their_written_digits(public_traces):
    """ns_resolution_trace: absolute epoch µs with a fraction; ts_ns is the text's value exactly."""
    path = public_traces / "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    doc = reference.load_exact(path)
    expected = sorted(reference.ns(e["ts"]) for e in reference.gpu_events(doc))
    assert sorted(read_events(path)["ts_ns"].to_list()) == expected


def test_base_time_nanoseconds_is_applied(public_traces):
    """Relative µs + baseTimeNanoseconds (PyTorch >= 2.4) become absolute epoch ns."""
    path = public_traces / "tracelens/b200/eager_trace.json.gz"
    doc = reference.load_exact(path)
    base = int(doc["baseTimeNanoseconds"])
    expected = sorted(base + reference.ns(e["ts"]) for e in reference.gpu_events(doc))
    got = read_events(path)["ts_ns"].to_list()
    assert sorted(got) == expected
    assert min(got) > 1_600_000_000 * 10**9  # a date after 2020, so the base really was added


def test_integer_microsecond_timestamps(public_traces):
    """PyTorch 2.0-era traces write integer µs; durations come out as whole µs in ns."""
    events = read_events(public_traces / "hta/negative_queue_length_values_check/rank0.json.gz")
    assert (events["dur_ns"] % 1000 == 0).all()


def test_integers_beyond_int64_are_read(public_traces):
    """A `Comms Id` above int64's range does not stop the reader; the kernel without a launch is kept."""
    events = read_events(public_traces / "hta/large_integer_trace/rank-70.Mar_25_20_48_12.2861.pt.trace.json.gz")
    assert events.select("kernel", "attribution", "dur_ns").rows() == [("ncclKernel_AllReduce", "unattributed", 50_000)]


def test_graph_replays_are_marked_and_ordered(public_traces):
    """A FULL HIP-graph decode step: one hipGraphLaunch, its kernels kept, marked and numbered in order."""
    events = read_events(public_traces / "tracelens/inference/vllm_decode_full/graph_execution.json.gz")
    graph = events.filter(pl.col("graph_launch"))
    assert graph["launch"].unique().to_list() == ["hipGraphLaunch"]
    assert (graph["attribution"] == "graph_replay").all()
    ordered = graph.sort("ts_ns")["graph_kernel_index"].to_list()
    assert ordered == list(range(len(ordered)))
    assert any("execute_" in (a or "") for a in graph["annotation"].to_list())


def test_gpu_only_trace_keeps_launches_without_ops(public_traces):
    """A trace with runtime rows but no cpu_op: every kernel linked to its launch, none to an op."""
    events = read_events(public_traces / "tracelens/mi210/gpu_only_trace/gpu_only_trace.json.gz")
    assert (events["attribution"] == "launch_only").all()
    assert events["launch"].null_count() == 0


def test_shape_args_of_the_op_are_kept(public_traces):
    """The launching op's Input Dims / Input type / Concrete Inputs arrive as compact JSON."""
    events = read_events(public_traces / "tracelens/b200/eager_trace.json.gz")
    rms = events.filter(pl.col("op") == "_C::fused_add_rms_norm").row(0, named=True)
    dims = json.loads(rms["input_dims"])
    assert len(dims) == 4 and dims[0] == dims[1] and dims[0][1] == dims[2][0]
    assert json.loads(rms["input_types"])[0] == "c10::BFloat16"
    chain_args = json.loads(rms["op_chain_args"])
    assert len(chain_args) == len(rms["op_chain"])
    assert chain_args[rms["op_chain"].index("_C::fused_add_rms_norm")]["dims"] == dims


def test_external_id_cross_check_agrees_on_modern_and_legacy(public_traces):
    """`External id` is only a cross-check; on well-formed traces it agrees with the linked chain."""
    for name in ("tracelens/b200/eager_trace.json.gz", "hta/trace_diff/control/control.json.gz"):
        checked = read_events(public_traces / name)["external_id_agrees"].drop_nulls()
        assert checked.len() > 0 and checked.all(), name


def test_external_id_cross_check_reads_the_op_stack(public_traces, tmp_path):
    """Without the launch row's `External id`, a kernel's id is checked against the ids of the ops
    enclosing its launch: true when one of them has it, false when none does."""
    doc = cut_first_gpu(load(public_traces / "tracelens/b200/eager_trace.json.gz"), 300)
    for e in doc["traceEvents"]:
        if e.get("cat") in ("cuda_runtime", "cuda_driver"):
            e.get("args", {}).pop("External id", None)
        elif e.get("cat") == "kernel" and e["args"].get("correlation", 0) % 3 == 0:
            e["args"]["External id"] = -1  # in no op's args
    events = read_events(save(doc, tmp_path / "no-launch-ids.json.gz"))
    exact = reference.load_exact(tmp_path / "no-launch-ids.json.gz")
    enclosing = reference.expected_enclosing(exact)
    gpu = reference.gpu_events(exact)
    expected = [
        None
        if "External id" not in e["args"] or e["args"].get("correlation") not in enclosing
        else any(r.get("args", {}).get("External id") == e["args"]["External id"] for r in enclosing[e["args"]["correlation"]])
        for e in gpu
    ]
    assert events["external_id_agrees"].to_list() == expected
    assert expected.count(True) > 100 and expected.count(False) > 50


def test_read_kineto_rejects_a_trace_without_gpu_activity(public_traces):
    with pytest.raises(TraceError, match="no GPU activity") as info:
        read_kineto(public_traces / "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    assert "rank-34" in str(info.value)


def test_examples_have_graph_replays_and_capture_sidecars():
    """The project's own CUDA-graph examples replay decode from graphs and ship their capture traces."""
    graph = read_events(EXAMPLES / "traces/llama3-8b/graph.json.gz")
    assert graph.filter(pl.col("graph_launch")).height > 100
    assert (EXAMPLES / "traces/llama3-8b/capture_traces/graph.capture.json.gz").exists()


def test_graph_kernel_order_survives_a_small_correlation_id(public_traces, tmp_path):
    """Regression: graph numbering once shared a dict between activity indices and correlation ids,
    so a graph launch whose correlation equalled one of its kernels' row numbers lost that number."""
    from tests.fixtures.cut_trace import load, renumber_correlation, save

    src = public_traces / "tracelens/inference/vllm_decode_full/graph_execution.json.gz"
    doc = load(src)
    (graph_corr,) = {
        e["args"]["correlation"] for e in doc["traceEvents"] if e.get("name") == "hipGraphLaunch"
    }
    before = read_events(src)
    first_graph_row = before.with_row_index().filter(pl.col("graph_launch"))["index"][0]
    path = save(renumber_correlation(doc, graph_corr, int(first_graph_row)), tmp_path / "renumbered.json.gz")
    graph = read_events(path).filter(pl.col("graph_launch")).sort("ts_ns")
    assert graph["correlation"].unique().to_list() == [first_graph_row]
    assert graph["graph_kernel_index"].to_list() == list(range(graph.height))


@pytest.mark.parametrize(
    "shift_us, mixed",
    [(0, True), (1_700_000_000_000_000, True), (1_700_000_000_000_000, False)],
    ids=["relative-mixed", "epoch-mixed", "epoch-floats"],
)
def test_timestamp_columns_convert_as_to_ns(public_traces, tmp_path, shift_us, mixed):
    """Whole columns of µs become what to_ns gives value by value: floats a column at a time, also
    where float64 cannot hold the ns exactly, and integers mixed in with floats one at a time."""
    doc = cut_first_gpu(load(public_traces / "tracelens/b200/eager_trace.json.gz"), 200)
    for i, e in enumerate(doc["traceEvents"]):
        if isinstance(e.get("ts"), float):
            e["ts"] = int(e["ts"]) + shift_us if mixed and i % 3 == 0 else e["ts"] + shift_us
    events = read_events(save(doc, tmp_path / "mixed.json.gz"))
    base = int(doc["baseTimeNanoseconds"])
    gpu = [e for e in doc["traceEvents"] if e.get("cat") in GPU_CATS and e.get("ph") == "X"]
    assert events["ts_ns"].to_list() == [base + to_ns(e["ts"]) for e in gpu]
    assert events["dur_ns"].to_list() == [to_ns(e["dur"]) for e in gpu]
    assert (events["attribution"] == "direct").any()


needs_isal = pytest.mark.skipif(tracefile.isal_zlib is None, reason="isal is not installed")


@pytest.fixture(params=[pytest.param("1", id="zlib"), pytest.param("0", id="isal", marks=needs_isal)])
def inflate(request, monkeypatch):
    """decompress with each inflate it can use: zlib's (the plain one) and ISA-L's (the fast one)."""
    monkeypatch.setenv("HOTSHAPE_PLAIN", request.param)
    return request.param


def test_gzip_of_several_members_is_read_whole(public_traces, tmp_path, inflate):
    """A writer that flushes gzip members in chunks; the first and last members are the same size,
    so the trailer's size alone cannot tell the file from a one-member gzip."""
    src = public_traces / "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
    text = gzip.decompress(src.read_bytes())
    k = len(text) // 3
    path = tmp_path / "members.json.gz"
    path.write_bytes(gzip.compress(text[:k]) + gzip.compress(text[k:-k]) + gzip.compress(text[-k:]))
    assert read_events(path).drop("trace_id").equals(read_events(src).drop("trace_id"))
    garbage = tmp_path / "garbage.json.gz"
    garbage.write_bytes(src.read_bytes() + b"garbage!")
    with pytest.raises(TraceError, match="truncated or corrupt gzip"):
        read_events(garbage)


def test_members_padded_with_zeros_or_holding_the_magic_are_read_as_gzip_reads_them(public_traces, inflate):
    from ingest.tracefile import decompress

    src = public_traces / "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
    text = gzip.decompress(src.read_bytes())
    magic = b"\x1f\x8b\x08"
    stored = gzip.compress(text + magic, compresslevel=0)
    k = len(text) // 3
    same_sizes = gzip.compress(text[:k]) + gzip.compress(text[k:-k]) + b"\0" * 7 + gzip.compress(text[-k:])
    for raw in (gzip.compress(text), stored, same_sizes, same_sizes + b"\0" * 3):
        assert decompress(src, raw) == gzip.decompress(raw)


def test_isal_inflates_every_trace_to_zlibs_text_and_refuses_what_zlib_refuses(public_traces, monkeypatch):
    """ISA-L's inflate against zlib's (HOTSHAPE_PLAIN) on every example and public trace: the same text; on
    damaged streams (cut short, a flipped bit in the data, the CRC or the size) the same error."""
    from ingest.tracefile import decompress

    files = sorted(EXAMPLES.rglob("*.json.gz")) + sorted(public_traces.rglob("*.json.gz"))
    assert len(files) > 20
    for path in files:
        raw = path.read_bytes()
        monkeypatch.setenv("HOTSHAPE_PLAIN", "1")
        plain = decompress(path, raw)
        monkeypatch.setenv("HOTSHAPE_PLAIN", "0")
        assert decompress(path, raw) == plain == gzip.decompress(raw), path
    raw = (EXAMPLES / "traces/llama3-8b/graph.json.gz").read_bytes()
    size = int.from_bytes(raw[-4:], "little")
    for damaged in (raw[:-9], raw[:len(raw) // 2], raw[:500] + bytes([raw[500] ^ 0x10]) + raw[501:],
                    raw[:-8] + bytes([raw[-8] ^ 1]) + raw[-7:], raw[:-4] + (size + 1).to_bytes(4, "little")):
        for switch in ("0", "1"):
            monkeypatch.setenv("HOTSHAPE_PLAIN", switch)
            with pytest.raises(TraceError, match="truncated or corrupt gzip"):
                decompress("damaged.json.gz", damaged)


def test_unlisted_categories_and_phases_are_skipped(public_traces, tmp_path):
    """Categories and phases are decoded to shared values; ones outside the lists still read, as ignored events."""
    src = public_traces / "tracelens/b200/eager_trace.json.gz"
    doc = load(src)
    for e in doc["traceEvents"]:
        if e.get("cat") == "python_function":
            e["cat"] = "some_future_category"
        elif e.get("ph") == "i":
            e["ph"] = "Z"
    events = read_events(save(doc, tmp_path / "renamed.json.gz"))
    assert events.drop("trace_id").equals(read_events(src).drop("trace_id"))


def test_reading_a_trace_imports_only_what_it_needs(public_traces):
    """A fresh process's cost is half imports: reading a Kineto trace needs polars, but neither pyarrow nor
    numpy (0.1 s between them), when ingest.pipeline loads or when it reads."""
    heavy = "sorted({'numpy', 'polars', 'pyarrow'} & set(sys.modules))"
    code = f"import sys, ingest.pipeline; print({heavy}); ingest.pipeline.read_events(sys.argv[1]); print({heavy})"
    trace = public_traces / "tracelens/b200/eager_trace.json.gz"
    result = subprocess.run([sys.executable, "-c", code, trace], capture_output=True, text=True, check=True, cwd=REPO)
    assert result.stdout.split("\n")[:2] == ["['polars']", "['polars']"]


def test_names_are_decoded_only_where_rows_need_them(public_traces, tmp_path):
    """Event names stay JSON text until a row needs one: a number for the name of an event nothing reads (a
    Python frame) changes nothing; for a kernel, a launch or an enclosing op the trace is rejected naming it."""
    src = public_traces / "tracelens/b200/eager_trace.json.gz"
    doc = load(src)
    for e in doc["traceEvents"]:
        if e.get("cat") == "python_function":
            e["name"] = 12345
    assert read_events(save(doc, tmp_path / "py.json.gz")).drop("trace_id").equals(read_events(src).drop("trace_id"))
    for cat, what in (("kernel", "GPU"), ("cuda_runtime", "launch"), ("cpu_op", "CPU")):
        doc = load(src)
        event = next(e for e in doc["traceEvents"] if e.get("cat") == cat and e.get("ph") == "X"
                     and (cat != "cpu_op" or e["name"] == "aten::mm"))
        event["name"] = 12345
        with pytest.raises(TraceError, match=f"{what} event at ts=.* has a name that is not a string: 12345"):
            read_events(save(doc, tmp_path / f"{cat}.json.gz"))
