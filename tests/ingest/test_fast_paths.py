"""Oracles of ingest's fast paths: each gives the frame its plain version gives, on real traces."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from catalogue.vocabulary import ATTRIBUTED
from ingest.graphs import align_replays, attribute_graphs
from ingest.pipeline import ingest_trace, read_events, traces_frame_from
from ingest.schema import CLASSIFIED_EVENT_COLUMNS, CLASSIFIED_EVENTS, conform, validate
from tests.conftest import PUBLIC_TRACES

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "traces"
EXAMPLE_TRACES = sorted(EXAMPLES.glob("*/*.json.gz"))


@pytest.mark.parametrize("path", EXAMPLE_TRACES, ids=lambda p: p.parent.name + "/" + p.name)
def test_attribute_graphs_without_replays_to_align_is_the_row_by_row_path(path):
    events = read_events(path)
    assert attribute_graphs(events, None).equals(align_replays(events, None))


def test_conform_is_validate_without_arrow():
    events = ingest_trace(EXAMPLES / "qwen3-30b-a3b" / "eager.json.gz").events
    fast = conform(events, CLASSIFIED_EVENT_COLUMNS, "classified kernel_events")
    slow = pl.from_arrow(validate(events.to_arrow(), CLASSIFIED_EVENTS, "classified kernel_events"))
    assert fast.schema == slow.schema and fast.equals(slow)


def test_traces_frame_is_the_arrow_built_one():
    import pyarrow as pa

    from ingest.schema import TRACES

    summaries = [ingest_trace(p).summary for p in EXAMPLE_TRACES[:2]]
    slow = pl.from_arrow(pa.Table.from_pylist([{n: s[n] for n in TRACES.names} for s in summaries], schema=TRACES))
    fast = traces_frame_from(summaries)
    assert fast.schema == slow.schema and fast.equals(slow)
    assert traces_frame_from([]).schema == slow.schema


def test_shape_texts_are_canonical_json_per_row():
    from ingest.classify import EMPTY_SHAPE, _shape_texts
    from ingest.shapes import canonical_json

    shared = {"m": 8, "n": 4096, "k": 4096, "dtype": "bf16"}
    rows = [shared, {}, shared, {"m": 8, "n": 4096, "k": 4096, "dtype": "bf16"}, {"dtype": "fp8"}]
    assert _shape_texts(rows) == [canonical_json(k) if k else EMPTY_SHAPE for k in rows]


PER_ROW_TRACES = [*EXAMPLE_TRACES, Path(__file__).resolve().parents[1] / "fixtures" / "public" / "resnet_train_mi300_bwd.json.gz"]


@pytest.mark.parametrize("path", PER_ROW_TRACES, ids=lambda p: p.parent.name + "/" + p.name)
@pytest.mark.parametrize("strip", [False, True], ids=["annotated", "execute_model"])
def test_classifying_each_combination_once_is_classifying_every_row(path, strip, monkeypatch, tmp_path):
    from ingest import classify
    from tests.fixtures.cut_trace import load, save
    from tests.fixtures.strip_annotations import strip_annotations

    if strip:
        doc, changed = strip_annotations(load(path), "execute_model")
        if not changed:
            pytest.skip("no step annotations to rename")
        path = save(doc, tmp_path / "stripped.json.gz")
    fast = ingest_trace(path).events
    monkeypatch.setattr(classify, "distinct_rows", classify.every_row)
    slow = ingest_trace(path).events
    assert fast.height > 0 and fast.equals(slow)


def test_described_schemas_without_pyarrow_write_the_bytes_pyarrow_schemas_do(tmp_path):
    """ingest.arrow_schema's nanoarrow schemas and pyarrow's schema give polars' writer the same file, for every
    table a trace store holds (capture traces, views and empty frames included)."""
    import io

    import nanoarrow

    from ingest.arrow_schema import export
    from ingest.classify import op_shape_time
    from ingest.field_metadata import frame_schema
    from ingest.graphs import capture_traces_for, read_captures
    from ingest.schema import descriptions
    from ingest.store import provenance_rows

    path = EXAMPLES / "qwen3-30b-a3b" / "graph.json.gz"
    events = ingest_trace(path).events
    traces = traces_frame_from([ingest_trace(path).summary])
    tables = {"CLASSIFIED_EVENTS": events, "OP_SHAPE_TIME": op_shape_time(events), "PROVENANCE": provenance_rows(events),
              "TRACES": traces, "CAPTURES": read_captures(capture_traces_for(path)), "KERNEL_EVENTS": read_events(path)}

    def written(frame, schema) -> bytes:
        buf = io.BytesIO()
        frame.write_parquet(buf, compression="zstd", statistics=False, arrow_schema=schema)
        return buf.getvalue()

    for table, frame in tables.items():
        for rows in (frame, frame.head(0)):
            ours = export(rows, descriptions(table))
            assert isinstance(ours, nanoarrow.Schema), table
            assert written(rows, ours) == written(rows, frame_schema(rows, descriptions(table))), table
    assert export(pl.DataFrame({"x": [1.5]}, schema={"x": pl.Float32}), {"x": ("a float32", "")}) is None
    with pytest.raises(KeyError, match="no description"):
        export(events, {})


def _kineto_traces(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.json.gz") if "capture_traces" not in p.parts)


def _read_each(root: Path, read):
    """(path, read(path)) for each Kineto trace under `root` that reads: the public set holds files that are no
    profile, which read to a TraceError (a ValueError) and are left out."""
    for path in _kineto_traces(root):
        try:
            got = read(path)
        except ValueError:
            continue
        yield path, got


@pytest.mark.parametrize("root", ["examples", "public"])
def test_op_rules_found_once_per_name_choose_what_trying_every_rule_chooses(root, request):
    from ingest.taxonomy import load_taxonomy

    tax = load_taxonomy()
    folder = EXAMPLES if root == "examples" else request.getfixturevalue("public_traces")
    chains = set()
    for _, events in _read_each(folder, read_events):
        rows = events.select("kernel", "op_chain").unique().rows()
        chains |= {(kernel or "", tuple(chain or ())) for kernel, chain in rows}
    assert sum(1 for _, chain in chains if chain) > 100
    for kernel, chain in chains:
        assert tax._forward(kernel, chain) == tax._forward_plain(kernel, chain), (kernel, chain)


def test_op_rules_found_once_per_name_keep_rule_order_and_enclosing_rules_first(tmp_path):
    """A name two rules match takes the first; an enclosing rule on an outer op wins over an inner op's rule."""
    from ingest.taxonomy import load_taxonomy

    (tmp_path / "t.yaml").write_text(
        "operators: [other, gemm, attention_forward, fused_moe]\n"
        "op_rules:\n"
        "  - {operator: gemm, op: '^aten::mm$', kernel: 'sm90'}\n"
        "  - {operator: attention_forward, op: 'mm$'}\n"
        "  - {operator: fused_moe, op: '^moe_block$', encloses: true, kernel: 'moe'}\n"
        "kernel_rules:\n"
        "  - {operator: gemm, kernel: 'gemm'}\n"
    )
    tax = load_taxonomy(tmp_path / "t.yaml")
    cases = [("sm90_gemm", ("aten::mm",)), ("ampere_gemm", ("aten::mm",)), ("moe_gemm", ("moe_block", "aten::mm")),
             ("sm90_gemm", ("moe_block", "aten::mm")), ("gemm", ("aten::add",)), ("x", ())]
    got = [tax._forward(k, c) for k, c in cases]
    assert got == [tax._forward_plain(k, c) for k, c in cases]
    assert [m.operator for m in got] == ["gemm", "attention_forward", "fused_moe", "gemm", "gemm", "other"]


MOE_TRACES = [EXAMPLES / "qwen3-30b-a3b" / "eager.json.gz", EXAMPLES / "qwen3-30b-a3b" / "graph.json.gz",
              EXAMPLES / "deepseek-v2-lite" / "eager.json.gz"]


@pytest.mark.parametrize("path", MOE_TRACES, ids=lambda p: p.parent.name + "/" + p.name)
def test_moe_blocks_read_per_combination_are_the_row_by_row_reading(path, monkeypatch):
    from ingest import classify

    fast = ingest_trace(path).events

    def row_by_row(events, key_of, operators, kwargs_list, chains, args_of, row_kwargs):
        rows = lambda values: [values[k] for k in key_of]  # noqa: E731
        classify._hf_moe_problems(events, rows(operators), row_kwargs, rows(chains), lambda i, d: args_of(key_of[i], d))

    monkeypatch.setattr(classify, "_hf_moe_problems_by_key", row_by_row)
    slow = ingest_trace(path).events
    moe = fast.filter(pl.col("operator") == "fused_moe")
    assert moe.height > 0 and moe["shape"].str.contains('"token_count"').all()
    assert fast.equals(slow)


@pytest.mark.parametrize("path", MOE_TRACES[:1] + [EXAMPLES / "llama3-8b" / "graph.json.gz"], ids=lambda p: p.parent.name + "/" + p.name)
def test_a_traces_aggregates_at_once_are_each_aggregate_on_its_own(path):
    from ingest.classify import op_shape_time
    from ingest.pipeline import summarize
    from ingest.store import BREAKDOWNS, _breakdown, aggregates, provenance_rows

    events = ingest_trace(path).events
    ost, provenance, by = aggregates(events)
    assert ost.schema == op_shape_time(events).schema and ost.equals(op_shape_time(events))
    assert provenance.equals(provenance_rows(events))
    assert by == {c: _breakdown(events, c) for c in BREAKDOWNS} and all(by.values())
    assert aggregates(events.drop("attribution"))[2] == {**by, "attribution": {}}
    summary = summarize(events, str(path))
    attributed = int(events.filter(events["attribution"].is_in(ATTRIBUTED))["dur_ns"].sum())
    assert 0 < attributed and (summary["attributed_ns"], summary["unattributed_ns"]) == (attributed, summary["gpu_ns"] - attributed)
    assert (summary["gpu_ns"], summary["kernels"]) == (int(events["dur_ns"].sum()), int((events["category"] == "kernel").sum()))


@pytest.mark.parametrize("root", ["examples", "public"])
def test_chains_numbered_by_the_frame_library_are_the_launch_by_launch_numbering(root, request, monkeypatch):
    from ingest import attribution

    folder = EXAMPLES if root == "examples" else request.getfixturevalue("public_traces")
    seen, fast_ids = [], attribution.chain_ids

    def both(stacks, n):
        fast, plain = fast_ids(stacks, n), attribution.chain_ids_plain(stacks, n)
        seen.append((fast == plain, len(plain[1])))
        return fast

    monkeypatch.setattr(attribution, "chain_ids", both)
    for _ in _read_each(folder, read_events):
        pass
    assert seen and all(same for same, _ in seen) and max(chains for _, chains in seen) > 50


@pytest.mark.parametrize("root", ["examples", "public"])
def test_names_decoded_once_per_distinct_text_are_every_name_decoded(root, request):
    import msgspec

    from ingest.kineto_events import EventStream
    from ingest.kineto_json import GPU, ROLES, Malformed, names, names_plain
    from ingest.tracefile import inflate_chunks

    folder = EXAMPLES if root == "examples" else request.getfixturevalue("public_traces")
    long_columns = 0
    for _path, events in _read_each(folder, lambda path: [e for piece in EventStream(
            path, inflate_chunks(path, path.read_bytes())) for e in piece]):
        for role in set(ROLES.values()):
            raws = [e.name for e in events if ROLES.get(e.cat) == role]
            fast = names(raws)
            assert fast == names_plain(raws)
            long_columns += role == GPU and len(set(fast)) < len(raws) > 1000 and sum(map(len, raws)) > 64 * len(raws)
    assert long_columns > 0
    # many distinct names of one length (past the per-length search), nulls and a name that is not a string
    raws = [msgspec.Raw(b'"k%04d_%s"' % (i % 40, b"x" * 80)) for i in range(2000)] + [msgspec.Raw(b"null")] * 3
    assert names(raws) == names_plain(raws) and len(set(names(raws))) == 41
    with pytest.raises(Malformed):
        names(raws + [msgspec.Raw(b"5")])
    with pytest.raises(Malformed):
        names_plain(raws + [msgspec.Raw(b"5")])


GRAPH_TRACES = [EXAMPLES / "llama3-8b" / "graph.json.gz", EXAMPLES / "qwen3-30b-a3b" / "graph.json.gz",
                *(PUBLIC_TRACES / "tracelens" / "inference" / rel
                  for rel in ("sglang_decode/sglang_Qwen3-8B_decode.json.gz", "vllm_decode_full/graph_execution.json.gz",
                              "vllm_prefilldecode_piecewise/graph_execution.json.gz"))]


@pytest.mark.parametrize("path", GRAPH_TRACES, ids=lambda p: p.parent.name + "/" + p.name)
def test_graph_replays_joined_in_the_frame_library_are_the_row_by_row_path(path):
    from ingest.graphs import _WINDOWS
    from ingest.pipeline import _capture_events

    events, capture = read_events(path), _capture_events(path, None)
    _WINDOWS.clear()
    fast = attribute_graphs(events, capture)
    assert fast["graph_capture"].sum() > 0.5 * events["graph_launch"].fill_null(False).sum()
    assert fast.schema == align_replays(events, capture).schema and fast.equals(align_replays(events, capture))
    # a second profile that replays the same graphs reads the windows and their alignments kept from the first
    assert attribute_graphs(events, capture).equals(fast) and len(_WINDOWS) == 1


def test_a_batchs_aggregates_at_once_are_each_traces_aggregates_on_its_own():
    from ingest.store import aggregates, aggregates_many

    frames = [ingest_trace(p).events for p in EXAMPLE_TRACES]
    frames += [frames[0].clear(), frames[1].filter(pl.col("operator") == "other"), frames[2]]
    assert all(f.height for f in frames[:-3]) and frames[-2].height
    for (ost, provenance, by), frame in zip(aggregates_many(frames), frames, strict=True):
        one_ost, one_provenance, one_by = aggregates(frame)
        assert ost.schema == one_ost.schema and ost.equals(one_ost)
        assert provenance.schema == one_provenance.schema and provenance.equals(one_provenance)
        assert by == one_by and list(by["operator"]) == list(one_by["operator"])  # the summary's bytes keep the order


def test_combinations_kept_from_earlier_traces_classify_as_a_trace_on_its_own(monkeypatch):
    from ingest import classify

    training = PUBLIC_TRACES / "hta" / "nccl_parser_config" / "nccl_data.json.gz"  # backward ops name their work
    paths = [*PER_ROW_TRACES, training]
    for path in paths:  # every combination of every trace kept before any is classified again
        ingest_trace(path)
    warm = [ingest_trace(path).events for path in paths]
    assert len(classify._problem_memo(classify._taxonomy(None))) > 100
    monkeypatch.setattr(classify, "_problem_memo", lambda tax: {})
    for path, fast in zip(paths, warm):
        slow = ingest_trace(path).events
        assert fast.height > 0 and fast.equals(slow), path
    if training.exists():
        assert warm[-1].filter(pl.col("operator") == "other")["op"].str.contains("_backward|Backward").any()


@pytest.mark.parametrize("root", ["examples", "public"])
def test_events_decoded_by_their_phase_read_as_every_event_decoded_alike(root, request, monkeypatch):
    folder = EXAMPLES if root == "examples" else request.getfixturevalue("public_traces")
    tagged = 0
    for path, fast in _read_each(folder, read_events):
        with monkeypatch.context() as m:
            m.setenv("HOTSHAPE_PLAIN", "1")  # every plain twin: the Event decode, zlib, names row by row
            slow = read_events(path)
        assert fast.schema == slow.schema and fast.equals(slow), path
        tagged += 1
    assert tagged > 3


def test_an_event_without_a_known_phase_takes_the_plain_decode(tmp_path):
    import msgspec

    from ingest.kineto_json import TAGGED_EVENT_LIST
    from tests.fixtures.cut_trace import load, save

    source = EXAMPLES / "qwen3-30b-a3b" / "eager.json.gz"
    doc = load(source)
    assert TAGGED_EVENT_LIST.decode(json_bytes(doc["traceEvents"]))
    for odd in ({"name": "no phase", "cat": "cpu_op", "ts": 1, "dur": 1}, {"ph": "Z", "name": "unknown", "ts": 1}):
        broken = {**doc, "traceEvents": [*doc["traceEvents"], odd]}
        with pytest.raises(msgspec.ValidationError):
            TAGGED_EVENT_LIST.decode(json_bytes(broken["traceEvents"]))
        events = read_events(save(broken, tmp_path / "odd.json.gz"))
        assert events.drop("trace_id").equals(read_events(source).drop("trace_id"))


def json_bytes(doc) -> bytes:
    import json

    return json.dumps(doc).encode()


def test_op_names_written_with_escapes_attribute_as_written_plainly(tmp_path):
    import gzip

    source = EXAMPLES / "qwen3-30b-a3b" / "eager.json.gz"
    text = gzip.decompress(source.read_bytes())
    # every other op name written with an escape: one name as two JSON texts (each range's entry is keyed by its text)
    parts = text.split(b'"aten::')
    escaped = parts[0] + b"".join((b'"aten\\u003a:' if k % 2 else b'"aten::') + part for k, part in enumerate(parts[1:]))
    assert len(parts) > 1000 and read_events(source)["op"].str.starts_with("aten::").sum() > 100
    path = tmp_path / "escaped.json.gz"
    path.write_bytes(gzip.compress(escaped))
    fast, plain = read_events(path), read_events(source)
    assert fast.drop("trace_id").equals(plain.drop("trace_id"))


@pytest.mark.parametrize("path", EXAMPLE_TRACES[:3], ids=lambda p: p.parent.name + "/" + p.name)
def test_string_columns_gathered_from_distinct_values_are_the_columns_built_from_lists(path, monkeypatch):
    from ingest import attribution, classify, columns
    from ingest.schema import parquet

    monkeypatch.setattr(columns, "_GATHER_MIN_ROWS", 0)  # the example traces are smaller than the threshold
    fast = ingest_trace(path).events
    for module in (attribution, classify):
        monkeypatch.setattr(module, "repeated", columns.repeated_plain)
    slow = ingest_trace(path).events
    assert fast.schema == slow.schema and fast.equals(slow)
    assert parquet(fast, "CLASSIFIED_EVENTS") == parquet(slow, "CLASSIFIED_EVENTS")
    assert columns.repeated("k", ["a" * 40, None] * 3000).to_list() == ["a" * 40, None] * 3000


@pytest.mark.parametrize("root", ["examples", "public"])
def test_launches_of_one_thread_enclosed_at_once_are_enclosed_thread_by_thread(root, request):
    from ingest.attribution import launch_enclosures, launch_enclosures_by_thread
    from ingest.kineto import read_kineto

    folder = EXAMPLES if root == "examples" else request.getfixturevalue("public_traces")
    one_thread = 0
    for path, trace in _read_each(folder, read_kineto):
        rows = sorted(set(map(trace.launches.row_of.get, trace.activities.correlation)) - {None})
        fast, slow = launch_enclosures(trace, rows), launch_enclosures_by_thread(trace, rows)
        assert fast.schema == slow.schema and fast.equals(slow), path
        one_thread += len(trace.ranges.thread_rows) == 1 and fast.height > 0
    assert one_thread > 0
