"""Operators, shapes and phases on the project's own example traces (HF transformers on an H200).

Expectations come from the raw JSON (stdlib json, exact decimals) and from what
benchmarks/capture_examples.sh ran, never from the code under test.
"""

from __future__ import annotations

import bisect
import gzip
import json
import math
from collections import Counter, defaultdict
from decimal import Decimal

import polars as pl
import pytest

from ingest.classify import op_shape_time
from ingest.phases import parse_step, phase_from_shape
from ingest.pipeline import ingest_trace
from ingest.shapes import shape_kwargs

LLAMA, QWEN, COMPILED, DEEPSEEK = "llama3-8b", "qwen3-30b-a3b", "llama3-8b-compiled", "deepseek-v2-lite"
# What benchmarks/capture_examples.sh ran: batch, prompt tokens per sequence, decode steps.
RUNS = {LLAMA: (8, 512, 6), QWEN: (8, 256, 4), COMPILED: (4, 256, 4), DEEPSEEK: (8, 256, 4)}
EAGER = {name: f"traces/{name}/eager.json.gz" for name in RUNS}
GRAPH = {name: f"traces/{name}/graph.json.gz" for name in (LLAMA, QWEN)}

GPU = {"kernel", "gpu_memcpy", "gpu_memset"}
LAUNCH = {"cuda_runtime", "cuda_driver"}
GEMM_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::matmul"}
SDPA_OPS = {"aten::scaled_dot_product_attention"}


def _ns(us) -> int:
    return int(Decimal(us) * 1000)


class Raw:
    """A trace read the slow, obvious way: every GPU activity with its launch's enclosing CPU ranges."""

    def __init__(self, path):
        with gzip.open(path, "rt") as fh:
            doc = json.load(fh, parse_float=Decimal)
        events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
        launches = {e["args"]["correlation"]: e for e in events if e.get("cat") in LAUNCH and "correlation" in e.get("args", {})}
        ranges = defaultdict(list)  # per thread: (start ns, end ns, event), by start
        for e in events:
            if e.get("cat") in ("cpu_op", "user_annotation"):
                ranges[(e["pid"], e["tid"])].append((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]), e))
        for bucket in ranges.values():
            bucket.sort(key=lambda r: (r[0], -r[1]))
        starts = {thread: [r[0] for r in bucket] for thread, bucket in ranges.items()}
        self.events = events
        self.gpu = []  # (activity, launch row or None, enclosing ranges outermost first)
        for g in (e for e in events if e.get("cat") in GPU):
            launch = launches.get(g["args"].get("correlation"))
            chain = []
            if launch is not None:
                t, thread = _ns(launch["ts"]), (launch["pid"], launch["tid"])
                started = ranges[thread][: bisect.bisect_right(starts.get(thread, []), t)]
                chain = [e for start, end, e in started if start <= t < end]
            self.gpu.append((g, launch, chain))

    def total_ns(self) -> int:
        return sum(_ns(g["dur"]) for g, _, _ in self.gpu)


@pytest.fixture(scope="module")
def raw(examples_dir):
    cache = {}

    def get(rel):
        if rel not in cache:
            cache[rel] = Raw(examples_dir / rel)
        return cache[rel]

    return get


@pytest.fixture(scope="module")
def events(examples_dir):
    cache = {}

    def get(rel):
        if rel not in cache:
            cache[rel] = ingest_trace(examples_dir / rel).events
        return cache[rel]

    return get


def _step_word(chain) -> str | None:
    names = [r["name"] for r in chain if r["cat"] == "user_annotation" and "[" in r["name"]]
    return names[-1].split("[")[0] if names else None


# --- 1. phases -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(EAGER))
def test_step_annotations_parse_with_their_counts(raw, name):
    batch, prompt, steps = RUNS[name]
    names = [e["name"] for e in raw(EAGER[name]).events if e.get("cat") == "user_annotation"]
    prefill = [n for n in names if n.startswith("prefill[")]
    decode = [n for n in names if n.startswith("decode[")]
    assert len(prefill) == 1 and len(decode) == steps
    step = parse_step(prefill[0])
    assert (step.phase, step.rule, step.context_reqs, step.tokens) == ("prefill", "annotation:bracket", batch, batch * prompt)
    for n in decode:
        step = parse_step(n)
        assert (step.phase, step.rule, step.generation_reqs, step.context_reqs) == ("decode", "annotation:bracket", batch, None)
    mixed = parse_step("mixed[bs=4 toks=300]")
    assert (mixed.phase, mixed.tokens, mixed.context_reqs, mixed.generation_reqs) == ("mixed", 300, None, None)
    # The bracket form needs the whole name: kernels and ops starting with a phase word are not steps.
    assert parse_step("decode[bs=8] extra") is None and parse_step("prefill_attention[x]") is None


@pytest.mark.parametrize("name", sorted(EAGER))
def test_every_annotated_row_takes_its_annotations_phase(raw, events, name):
    out = events(EAGER[name])
    words = out["op_chain"].map_elements(
        lambda chain: next((c.split("[")[0] for c in reversed(chain) if c.startswith(("prefill[", "decode["))), None),
        return_dtype=pl.String,
    )
    annotated = out.with_columns(words.alias("word")).filter(pl.col("word").is_not_null())
    assert annotated["dur_ns"].sum() == raw(EAGER[name]).total_ns()  # every activity ran inside a step
    assert (annotated["phase"] == annotated["word"]).all()
    assert set(annotated["phase_rule"]) == {"annotation:bracket"}


@pytest.mark.parametrize("name", [LLAMA, QWEN])
def test_sdpa_query_length_says_decode_or_prefill(raw, name):
    # Every SDPA call in the eager trace: q_len == 1 ⇔ it ran inside a decode[...] step.
    trace = raw(EAGER[name])
    annotations = [e for e in trace.events if e.get("cat") == "user_annotation" and "[" in e["name"]]
    calls = [e for e in trace.events if e.get("cat") == "cpu_op" and e["name"] == "aten::scaled_dot_product_attention"]
    assert len(calls) == 4 * (1 + RUNS[name][2])  # 4 layers, every step
    for call in calls:
        t = _ns(call["ts"])
        step = next(a["name"].split("[")[0] for a in annotations if _ns(a["ts"]) <= t < _ns(a["ts"]) + _ns(a["dur"]))
        args = call["args"]
        shape = shape_kwargs("attention_forward", call["name"], {"dims": args["Input Dims"], "types": args["Input type"], "concrete": args["Concrete Inputs"]})
        assert phase_from_shape("attention_forward", shape) == step
        q, k = args["Input Dims"][0], args["Input Dims"][1]
        assert shape["seq_lens"] == [q[2]] * q[0] and shape.get("kv_lens", shape["seq_lens"]) == [k[2]] * k[0]


@pytest.mark.parametrize("name", sorted(GRAPH))
def test_unannotated_graph_trace_phases(raw, events, name):
    # No annotations: graph replays are decode (capture-time attention has one query per
    # sequence), and the eager forward before the first replay is the prefill. A step ends with its
    # sampling (argmax of the logits): what runs between replays up to the last argmax belongs to a
    # decode step; only what follows the last argmax (the next token's copy for a step never taken) is unknown.
    trace, out = raw(GRAPH[name]), events(GRAPH[name])
    graph_corr = {launch["args"]["correlation"] for _, launch, _ in trace.gpu if launch is not None and launch["name"] == "cudaGraphLaunch"}
    replayed = [g for g, launch, _ in trace.gpu if launch is not None and launch["args"]["correlation"] in graph_corr]
    first = min(_ns(g["ts"]) for g in replayed)
    before = sum(_ns(g["dur"]) for g, _, _ in trace.gpu if _ns(g["ts"]) < first)
    assert len(graph_corr) == RUNS[name][2]
    by_phase = dict(out.group_by("phase").agg(pl.col("dur_ns").sum()).rows())
    graph = out.filter(pl.col("graph_launch"))
    assert graph["dur_ns"].sum() == sum(_ns(g["dur"]) for g in replayed)
    assert set(graph["phase"]) == {"decode"} and set(graph["phase_rule"]) == {"shape:attention"}
    argmax = sorted(_ns(g["ts"]) for g, _, _ in trace.gpu if "ArgMax" in g["name"])
    assert argmax[0] < first  # the prefill's sampling, then the first decode step's copies, then its replay
    prefill = sum(_ns(g["dur"]) for g, _, _ in trace.gpu if _ns(g["ts"]) <= argmax[0])
    after = sum(_ns(g["dur"]) for g, _, _ in trace.gpu if _ns(g["ts"]) > argmax[-1])
    assert by_phase["prefill"] == prefill and before - prefill < 0.001 * before
    assert by_phase["decode"] == trace.total_ns() - prefill - after > graph["dur_ns"].sum()
    assert by_phase.get("unknown", 0) == after


def test_graph_and_eager_runs_split_alike(events):
    # The same model and steps, eager and graph-replayed: the decode share agrees within a few points.
    for name in GRAPH:
        shares = []
        for rel in (EAGER[name], GRAPH[name]):
            out = events(rel)
            shares.append(out.filter(pl.col("phase") == "decode")["dur_ns"].sum() / out["dur_ns"].sum())
        assert abs(shares[0] - shares[1]) < 0.03, (name, shares)


# --- 2. CUDA-graph capture alignment ---------------------------------------------------------

def _capture_nodes(path) -> list[str]:
    """Launch rows recorded between cudaStreamBeginCapture and cudaStreamEndCapture, in order."""
    with gzip.open(path, "rt") as fh:
        events = [e for e in json.load(fh, parse_float=Decimal)["traceEvents"] if e.get("ph") == "X"]
    begin = next(_ns(e["ts"]) for e in events if e["name"] == "cudaStreamBeginCapture")
    end = next(_ns(e["ts"]) for e in events if e["name"] == "cudaStreamEndCapture")
    rows = [e for e in events if e.get("cat") in LAUNCH and begin < _ns(e["ts"]) < end]
    nodes = [e for e in sorted(rows, key=lambda e: _ns(e["ts"])) if "LaunchKernel" in e["name"] or e["name"] in ("cudaMemcpyAsync", "cudaMemsetAsync")]
    return ["memcpy" if "Memcpy" in e["name"] else "memset" if "Memset" in e["name"] else "kernel" for e in nodes]


# Kernel name → the op that must have launched it at capture time, from how PyTorch names its
# kernels: an alignment shifted by even one node breaks these.
KERNEL_OPS = [
    ("nvjet_", {"aten::mm"}),
    ("splitKreduce_kernel", {"aten::mm"}),
    ("Memset (Device)", {"aten::mm"}),  # cuBLASLt's split-K workspace
    ("cutlass_80_simt_sgemm", {"aten::bmm"}),
    ("prepare_grouped_gemm_data", {"aten::_grouped_mm"}),
    ("GroupProblemShape", {"aten::_grouped_mm"}),
    ("cudnn_generated_fort_native_sdpa", {"aten::_scaled_dot_product_cudnn_attention"}),
    ("MulFunctor", {"aten::mul"}),
    ("_add<", {"aten::add", "aten::add_"}),
    ("pow_tensor_scalar_kernel", {"aten::pow"}),
    ("MeanOps", {"aten::mean"}),
    ("sum_functor", {"aten::sum"}),
    ("rsqrt_kernel", {"aten::rsqrt"}),
    ("silu_kernel", {"aten::silu"}),
    ("neg_kernel", {"aten::neg"}),
    ("sin_kernel", {"aten::sin"}),
    ("cos_kernel", {"aten::cos"}),
    ("arange_cuda_out", {"aten::arange"}),
    ("where_kernel", {"aten::where"}),
    ("masked_fill_kernel", {"aten::masked_fill_"}),
    ("FillFunctor", {"aten::fill_"}),
    ("index_copy_kernel", {"aten::index_copy_"}),
    ("index_put_kernel", {"aten::_index_put_impl_"}),
    ("index_kernel_impl", {"aten::index"}),
    ("vectorized_gather_kernel", {"aten::index"}),
    ("CatArrayBatchedCopy", {"aten::cat"}),
    ("indexSelect", {"aten::index_select"}),
    ("gatherTopK", {"aten::topk"}),
    ("bitonicSortKVInPlace", {"aten::topk"}),
    ("radixSortKVInPlace", {"aten::sort"}),
    ("softmax_warp_forward", {"aten::_softmax"}),
    ("kernelHistogram1D", {"aten::histc"}),
    ("DeviceScan", {"aten::cumsum"}),
    ("div_floor", {"aten::floor_divide"}),
    ("launch_clamp_scalar", {"aten::clamp_"}),
    ("direct_copy_kernel", {"aten::copy_"}),
    ("bfloat16_copy_kernel", {"aten::copy_"}),
    ("Memcpy DtoD", {"aten::copy_"}),
]


@pytest.mark.parametrize("name", sorted(GRAPH))
def test_graph_replays_attributed_through_the_capture_trace(examples_dir, events, name):
    batch, prompt, steps = RUNS[name]
    capture = examples_dir / "traces" / name / "capture_traces" / "graph.capture.json.gz"
    nodes = _capture_nodes(capture)
    out = events(GRAPH[name])
    graph = out.filter(pl.col("graph_launch"))
    per_launch = graph.group_by("correlation").agg(pl.len())["len"].to_list()
    assert per_launch == [len(nodes)] * steps  # every replay runs the captured nodes
    for launch in graph.partition_by("correlation"):
        assert Counter(launch["category"]) == Counter(nodes)
    via = graph.filter(pl.col("attribution") == "graph_capture")["dur_ns"].sum()
    assert via / graph["dur_ns"].sum() >= 0.90
    checked = 0
    for kernel, chain in graph.select("kernel", "op_chain").rows():
        ops = next((ops for fragment, ops in KERNEL_OPS if fragment in kernel), None)
        if ops is not None:
            assert ops & set(chain), (kernel, chain)
            checked += 1
    assert checked > 0.9 * graph.height
    # Capture-time shapes: the decode batch.
    mm = graph.filter((pl.col("op") == "aten::mm") & (pl.col("operator") == "gemm"))  # its workspace memsets are memset
    assert mm.height and {json.loads(s)["m"] for s in mm["shape"]} == {batch}
    # Decode SDPA (one query per sequence over the static cache) is a paged-decode problem.
    attention = graph.filter(pl.col("kernel").str.contains("sdpa"))
    assert attention.height and set(attention["operator"]) == {"paged_attention_decode"}
    assert {s for s in attention["shape"]} == {attention["shape"][0]}
    shape = json.loads(attention["shape"][0])
    assert (shape["num_seqs"], shape["ctx_len"]) == (batch, prompt + steps + 1)  # the static cache


@pytest.mark.parametrize("name", sorted(GRAPH))
def test_graph_decode_shapes_are_the_eager_decode_shapes(events, name):
    # The replayed graph and the eager decode steps run the same GEMMs and attention calls.
    def table(rel, graph_only):
        operators = ["gemm", "attention_forward", "paged_attention_decode", "unified_attention", "fused_moe"]
        out = events(rel).filter(pl.col("operator").is_in(operators) & (pl.col("phase") == "decode"))
        if graph_only:
            out = out.filter(pl.col("graph_launch"))
        return dict(out.group_by("operator", "shape").agg(pl.len()).select(pl.concat_str("operator", "shape"), "len").rows())

    eager, graph = table(EAGER[name], False), table(GRAPH[name], True)
    assert any(key.startswith("paged_attention_decode") for key in eager)
    assert eager == graph


# --- 3. what stays `other` -------------------------------------------------------------------

NAMED_OPS = GEMM_OPS | SDPA_OPS | {"aten::_grouped_mm", "aten::embedding", "aten::argmax"}


@pytest.mark.parametrize("rel", sorted(EAGER.values()) + sorted(GRAPH.values()))
def test_other_is_only_unnamed_elementwise_work(events, rel):
    out = events(rel)
    other = out.filter(pl.col("operator") == "other")
    for chain in other["op_chain"].to_list():
        assert not NAMED_OPS & set(chain), chain
    # GEMM and attention kernels always have a name, whatever op ran them.
    assert not other.filter(pl.col("kernel").str.contains("nvjet|gemm|cutlass|sdpa|flash")).height


# Keys beyond the catalogue's parameter names, each documented in ingest/shapes.py: only SDPA
# calls that no registry attention operator computes keep theirs (static-cache prefill with an
# explicit mask, DeepSeek's MLA-as-MHA with v_head_dim < head_dim); HF MoE grouped GEMMs no longer
# show m, n, k.
EXTRA_KEYS = {"dtype", "shape", "kv_lens", "num_kv_heads", "is_causal", "attn_mask", "v_head_dim"}


@pytest.mark.parametrize("rel", sorted(EAGER.values()) + sorted(GRAPH.values()))
def test_shape_keys_use_catalogue_parameter_names(events, atrex_dir, rel):
    for operator, shape in events(rel).filter(pl.col("shape") != "{}").select("operator", "shape").unique().rows():
        catalogue = atrex_dir / "data" / operator / "shapes.json"
        if not catalogue.exists():
            continue  # gemm, embedding, memcpy, memset: not catalogue operators
        names = set()
        for entry in json.loads(catalogue.read_text()).values():
            names |= set(entry.get("init_kwargs") or {}) | set(entry.get("input_kwargs") or {})
        assert set(json.loads(shape)) <= names | EXTRA_KEYS, (operator, shape)


def test_inductor_rope_and_norm_kernels(events):
    out = events(EAGER[COMPILED])
    rope = out.filter(pl.col("kernel").str.contains("_cat_") & pl.col("kernel").str.contains("_neg_") & pl.col("kernel").str.contains("_sin_"))
    assert rope.height and set(rope["operator"]) == {"fused_qkv_rope"}
    # Inductor norms stay norms, with the step's tokens and Llama-3-8B's hidden size (the
    # embedding table fused into the first norm is not the activation).
    batch, prompt, _ = RUNS[COMPILED]
    norms = out.filter(pl.col("kernel").str.contains("rsqrt"))
    assert set(norms["operator"]) <= {"rms_norm", "fused_add_rms_norm"}
    tokens = {"prefill": batch * prompt, "decode": batch}
    for phase, shape in norms.select("phase", "shape").rows():
        assert json.loads(shape) == {"token_count": tokens[phase], "hidden_size": 4096, "dtype": "bf16"}


# --- 4. GEMM / attention time and shapes, and the phase split, computed independently -------

def _gemm_key(op: str, dims) -> tuple:
    if op == "aten::bmm":
        x, w = dims[0], dims[1]
        return (x[1], w[2], x[2], x[0])
    if op == "aten::addmm":
        dims = dims[1:]
    if op == "aten::linear":
        x, w = dims[0], dims[1]
        return (math.prod(x[:-1]), w[0], w[1], None)
    x, w = dims[0], dims[1]
    assert len(x) == len(w) == 2, (op, dims)
    return (x[0], w[1], x[1], None)


def _plumbing(kernel: str) -> bool:
    """A fill or a copy by aten's own kernel names: no GEMM's or attention's compute, whatever op ran it."""
    return any(word in kernel for word in ("FillFunctor", "copy_kernel_cuda", "CatArrayBatchedCopy"))


def independent_tables(trace: Raw) -> tuple[dict, dict, dict]:
    gemm, attention, phases = defaultdict(int), defaultdict(int), defaultdict(int)
    for g, _, chain in trace.gpu:
        ns = _ns(g["dur"])
        phase = _step_word(chain)
        phases[phase] += ns
        ops = [r for r in chain if r["cat"] == "cpu_op"]
        inner = next((r for r in reversed(ops) if r["name"] in GEMM_OPS | SDPA_OPS), None)
        if inner is None or g["cat"] != "kernel" or _plumbing(g["name"]):
            continue  # a workspace memset under aten::mm is a memset; a fill inside SDPA (its mask) a fill
        if inner["name"] in GEMM_OPS:
            gemm[(phase, *_gemm_key(inner["name"], inner["args"]["Input Dims"]))] += ns
        else:
            attention[(phase, *_sdpa_problem(inner["args"]))] += ns
    return dict(gemm), dict(attention), dict(phases)


def _sdpa_problem(args) -> tuple:
    """(operator, Hq, Hkv, D, q lens, kv lens) of an aten::scaled_dot_product_attention call: which
    registry reference computes it follows from its schema (query, key, value, attn_mask,
    dropout_p, is_causal, ...), whose is_causal masks top-left."""
    dims, concrete = args["Input Dims"], args["Concrete Inputs"]
    q, k, v = dims[:3]
    causal, mask = concrete[5] == "True", bool(dims[3])
    q_lens, kv_lens = (q[2],) * q[0], (k[2],) * k[0]
    if v[3] != q[3]:
        operator = "attention_forward"  # no registry attention has a narrower V
    elif q[2] == 1 and not causal:
        operator = "paged_attention_decode"
    elif q[2] == k[2] and causal and not mask:
        operator = "unified_attention"
    else:
        operator = "attention_forward"
    return operator, q[1], k[1], q[3], q_lens, kv_lens


def _attention_key(operator: str, s: dict) -> tuple:
    """The same tuple read back from a mined problem's kwargs."""
    if operator == "paged_attention_decode":
        n = s["num_seqs"]
        return operator, s["num_query_heads"], s["num_kv_heads"], s["head_size"], (1,) * n, (s["ctx_len"],) * n
    if operator == "unified_attention":
        lens = tuple(s["seq_lens"])
        assert s["num_seqs"] == len(lens) and s["block_size"] == 16  # a contiguous cache: the catalogue's block
        return operator, s["num_query_heads"], s["num_kv_heads"], s["head_size"], lens, lens
    q = tuple(s["seq_lens"])
    return operator, s["num_heads"], s.get("num_kv_heads", s["num_heads"]), s["head_dim"], q, tuple(s.get("kv_lens", q))


# Dense (GQA), MoE, and MLA (DeepSeek-V2's latent attention, run by HF through SDPA).
@pytest.mark.parametrize("name", [LLAMA, QWEN, DEEPSEEK])
def test_gemm_attention_and_phase_split_agree_with_an_independent_computation(raw, events, name):
    trace = raw(EAGER[name])
    gemm, attention, phases = independent_tables(trace)
    table = op_shape_time(events(EAGER[name]))
    got_gemm, got_attention = defaultdict(int), defaultdict(int)
    for operator, shape, phase, ns in table.select("operator", "shape", "phase", "gpu_ns").rows():
        s = json.loads(shape)
        if operator == "gemm":
            got_gemm[(phase, s["m"], s["n"], s["k"], s.get("batch"))] += ns
        elif operator in ("attention_forward", "paged_attention_decode", "unified_attention"):
            got_attention[(phase, *_attention_key(operator, s))] += ns
    assert dict(got_gemm) == gemm
    assert dict(got_attention) == attention
    assert dict(table.group_by("phase").agg(pl.col("gpu_ns").sum()).rows()) == phases
    # What the run was: one prefill over batch × prompt tokens, decode steps over the batch.
    batch, prompt, steps = RUNS[name]
    assert {k[1] for k in gemm if k[0] == "prefill" and k[4] is None} == {batch * prompt}
    decode_m = {k[1] for k in gemm if k[0] == "decode" and k[4] is None}
    allowed = {batch}
    if name == DEEPSEEK:  # HF's MLA re-expands the latent KV of every cached position at each step
        allowed |= {batch * (prompt + step + 1) for step in range(steps)}
    assert batch in decode_m and decode_m <= allowed
    assert gemm and attention and set(phases) == {"prefill", "decode"}


def test_capture_size_chosen_by_the_steps_batch(examples_dir):
    # Two capture windows whose graphs have the same nodes (the real capture, and the same launches
    # relabelled as a 16-sequence capture): launch order alone cannot tell them apart.
    from ingest.classify import classify_events
    from ingest.graphs import read_capture
    from ingest.pipeline import read_events

    path = examples_dir / GRAPH[LLAMA]
    capture = read_capture(path.parent / "capture_traces" / "graph.capture.json.gz")
    (window,) = capture["window"].unique().to_list()
    assert window.startswith("capture_8_decode@")
    twin = capture.with_columns(
        pl.lit("capture_16_decode@0").alias("window"),
        pl.concat_list(pl.lit(["twin"]), "op_chain").alias("op_chain"),
        ("[null," + pl.col("op_chain_args").str.slice(1)).str.replace(r"^\[null,\]$", "[null]").alias("op_chain_args"),
    )
    both = pl.concat([twin, capture])
    events = read_events(path)

    def replayed_from(step: str | None) -> set:
        rows = events
        if step is not None:
            rows = rows.with_columns(
                pl.when(pl.col("graph_launch")).then(pl.concat_list(pl.lit([step]), "op_chain")).otherwise("op_chain").alias("op_chain"),
                pl.when(pl.col("graph_launch")).then(pl.lit(None, dtype=pl.String)).otherwise("op_chain_args").alias("op_chain_args"),
            )
        out = classify_events(rows, both).filter(pl.col("graph_launch"))
        return set(zip(out["attribution"], out["op_chain"].list.contains("twin")))

    assert replayed_from(None) == {("name_rule", False)}  # ambiguous: left to the kernel names
    assert replayed_from("decode[bs=8]") == {("graph_capture", False)}
    assert replayed_from("decode[bs=12]") == {("graph_capture", True)}  # padded up to a captured size
    assert replayed_from("decode[bs=32]") == {("name_rule", False)}  # larger than any capture
