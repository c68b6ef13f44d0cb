"""Per-call GPU spans from activity records (kernels_eval.harness.spans): records built here with the evaluator's
markers around each call, and a real Kineto trace's records for the property the attribution rests on."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from kernels_eval.harness import spans
from kernels_eval.harness.spans import END_MARKER, START_MARKER, Record, SpanError

EAGER_TRACE = Path(__file__).resolve().parents[2] / "examples" / "traces" / "llama3-8b" / "eager.json.gz"


class Stream:
    """Builds records the way a GPU runs them: one correlation id per launch in host order; a kernel on a stream
    starts when that stream is free (or later, at `at`)."""

    def __init__(self) -> None:
        self.corr = 0
        self.free = {7: 0}
        self.records: list[Record] = []

    def launch(self, name: str, dur_ns: int, stream: int = 7, at: int | None = None, kind: str = "kernel") -> Record:
        self.corr += 1
        start = max(self.free.get(stream, 0), at or 0)
        r = Record(self.corr, start, start + dur_ns, stream, name, kind)
        self.free[stream] = r.end_ns
        self.records.append(r)
        return r

    def call(self, *kernels: tuple[str, int], gap_ns: int = 0) -> None:
        self.launch(START_MARKER, 60_000)
        for name, dur in kernels:
            self.launch(name, dur, at=self.free[7] + gap_ns)
        self.launch(END_MARKER, 1_000)


def test_each_call_spans_its_own_kernels_between_its_markers_gaps_included():
    gpu = Stream()
    gpu.launch("warmup_kernel", 5_000)  # before the first marker: not timed, not outside a call
    gpu.call(("rms_norm_kernel", 4_000))
    gpu.launch("aten_normal", 2_000)  # the evaluator drawing a fresh input set between calls
    gpu.call(("split_kernel", 3_000), ("merge_kernel", 1_000), gap_ns=500)
    windows, outside, pairs = spans.call_windows(gpu.records, calls=2)
    assert [[r.name for r in w] for w in windows] == [["rms_norm_kernel"], ["split_kernel", "merge_kernel"]]
    assert [r.name for r in outside] == ["aten_normal"]
    assert spans.call_spans(windows, pairs) == [4_000, 3_000 + 500 + 1_000]  # the gap before the first kernel is launch time
    assert spans.time_by_name(windows) == {"rms_norm_kernel": 4.0, "split_kernel": 3.0, "merge_kernel": 1.0}


def test_records_are_attributed_by_launch_order_not_by_time():
    gpu = Stream()
    gpu.call(("k", 1_000))
    gpu.call(("k", 2_000))
    shuffled = list(reversed(gpu.records))  # the profiler's event list is in no promised order
    windows, _, pairs = spans.call_windows(shuffled, calls=2)
    assert spans.call_spans(windows, pairs) == [1_000, 2_000]


def test_memcpy_and_memset_count_and_sync_records_do_not():
    gpu = Stream()
    gpu.launch(START_MARKER, 60_000)
    gpu.launch("Memset (Device)", 1_000, kind="gpu_memset")
    gpu.launch("k", 2_000)
    gpu.launch("Memcpy DtoH (Device -> Pinned)", 1_000, kind="gpu_memcpy")
    gpu.launch("Stream Sync", 9_000, kind="cuda_sync")
    gpu.launch(END_MARKER, 1_000)
    windows, _, pairs = spans.call_windows(gpu.records, calls=1)
    assert [r.kind for r in windows[0]] == ["gpu_memset", "kernel", "gpu_memcpy"]
    assert spans.call_spans(windows, pairs) == [4_000]


def test_marker_counts_must_match_the_calls_or_the_timing_is_refused():
    gpu = Stream()
    gpu.call(("k", 1_000))
    with pytest.raises(SpanError, match="could not be attributed to calls"):
        spans.call_windows(gpu.records, calls=2)
    spoof = Stream()  # a candidate launching a kernel named like the evaluator's end marker
    spoof.call((END_MARKER, 1_000), ("k", 1_000))
    with pytest.raises(SpanError, match="could not be attributed"):
        spans.call_windows(spoof.records, calls=1)
    lost = [r for r in gpu.records if r.name != END_MARKER]
    with pytest.raises(SpanError, match="could not be attributed"):
        spans.call_windows(lost, calls=1)


def test_a_call_without_gpu_work_or_with_zero_time_is_refused():
    gpu = Stream()
    gpu.call()
    windows, _, pairs = spans.call_windows(gpu.records, calls=1)
    with pytest.raises(SpanError, match="launched no GPU work"):
        spans.call_spans(windows, pairs)
    zero = Stream()
    zero.call(("k", 0))
    windows, _, pairs = spans.call_windows(zero.records, calls=1)
    with pytest.raises(SpanError, match="total zero time"):
        spans.call_spans(windows, pairs)


def test_work_on_a_stream_not_joined_with_the_calling_stream_is_refused():
    gpu = Stream()
    gpu.launch(START_MARKER, 60_000)  # the side kernel runs beside the flush: launched during the spin
    gpu.launch("rms_norm_kernel", 20_000, stream=9, at=10_000)
    gpu.launch(END_MARKER, 1_000)
    windows, _, pairs = spans.call_windows(gpu.records, calls=1)
    with pytest.raises(SpanError, match="not ordered with the calling stream"):
        spans.call_spans(windows, pairs)
    joined = Stream()  # side stream waits for the calling stream and is joined back before the end marker
    joined.launch(START_MARKER, 60_000)
    side = joined.launch("rms_norm_kernel", 20_000, stream=9, at=60_000)
    joined.launch(END_MARKER, 1_000, at=side.end_ns)
    windows, _, pairs = spans.call_windows(joined.records, calls=1)
    assert spans.call_spans(windows, pairs) == [20_000]


def test_the_submission_s_kernels_between_calls_are_named():
    gpu = Stream()
    gpu.launch("own_kernel", 1_000)  # a warm-up call before the timed ones
    gpu.call(("one_element_kernel", 1_000))
    gpu.launch("own_kernel", 9_000)  # deferred past the call's return
    gpu.call(("one_element_kernel", 1_000))
    _, outside, _ = spans.call_windows(gpu.records, calls=2)
    assert spans.outside_owned(outside, {"own_kernel", "one_element_kernel"}) == ["own_kernel"]


def test_attribution_falls_back_to_the_linked_correlation_and_names_both_when_neither_orders():
    gpu = Stream()
    gpu.call(("k", 1_000))
    names = sorted({r.name for r in gpu.records})
    kinds = ["kernel"]

    def table(corr, linked):
        return {"names": names, "kinds": kinds,
                "rows": [[corr(r), linked(r), r.start_ns, r.end_ns, r.stream, names.index(r.name), 0]
                         for r in gpu.records]}

    good = table(lambda r: 0, lambda r: r.corr)  # this build puts CUPTI's id in the linked field
    windows, _, pairs = spans.attribute(good, calls=1)
    assert spans.call_spans(windows, pairs) == [1_000]
    with pytest.raises(SpanError, match="by correlation_id: .*by linked_correlation_id"):
        spans.attribute(table(lambda r: 0, lambda r: 0), calls=1)


@pytest.mark.skipif(not EAGER_TRACE.is_file(), reason="example trace missing")
def test_in_a_real_trace_correlation_order_is_execution_order_on_each_stream():
    """What attribution by correlation id rests on: on one stream, records run in launch order (an H200 trace
    of llama3-8b, examples/traces)."""
    with gzip.open(EAGER_TRACE, "rt") as fh:
        doc = json.load(fh)
    records = [Record(int(e["args"]["correlation"]), round(e["ts"] * 1e3), round((e["ts"] + e["dur"]) * 1e3),
                      int(e["args"]["stream"]), e["name"], e["cat"])
               for e in doc["traceEvents"] if e.get("cat") in spans.GPU_WORK and "correlation" in e.get("args", {})]
    assert len(records) > 1000
    by_stream: dict[int, list[Record]] = {}
    for r in sorted(records, key=lambda r: r.corr):
        by_stream.setdefault(r.stream, []).append(r)
    for stream, rs in by_stream.items():
        assert all(b.start_ns >= a.start_ns for a, b in zip(rs, rs[1:])), stream


def test_busy_time_is_the_union_of_a_calls_records():
    r = lambda corr, start, end, stream=7: Record(corr, start, end, stream, "k")  # noqa: E731
    # one stream with a 40 µs host wait between two kernels; two streams overlapping by 1 µs; a record inside another
    windows = [[r(1, 0, 3_000), r(2, 43_000, 45_000)],
               [r(3, 0, 2_000), r(4, 1_000, 4_000, stream=9)],
               [r(5, 0, 10_000), r(6, 2_000, 3_000, stream=9)]]
    assert spans.call_busy(windows) == [5_000, 4_000, 10_000]
    assert spans.call_spans(windows, [(Record(0, -1, 0, 7, START_MARKER), Record(9, 99_000, 99_001, 7, END_MARKER))]
                            * 3) == [45_000, 4_000, 10_000]
