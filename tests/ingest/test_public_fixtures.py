"""Regressions on traces nobody here wrote: fixtures cut from public TraceLens / HTA / nsys-ai traces
(tests/fixtures/public_cuts.py, tests/fixtures/SOURCES.md), one test per failure issue 19 found."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from pathlib import Path

import polars as pl
import pytest

from ingest.pipeline import CaptureWarning, ingest_many, ingest_trace
from ingest.phases import phase_from_shape
from ingest.taxonomy import load_taxonomy
from tests.fixtures.cut_trace import load, save

PUBLIC = Path(__file__).resolve().parents[1] / "fixtures" / "public"


def _raw_gpu_ns(path: Path) -> int:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    return sum(round(e["dur"] * 1000) for e in doc["traceEvents"]
               if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("ph") == "X")


@pytest.fixture(scope="module")
def falconsai():
    return ingest_trace(PUBLIC / "falconsai_vit_h100.json.gz").events


def test_convolution_kernels_are_convolution_with_catalogue_kwargs(falconsai):
    conv = falconsai.filter(pl.col("op_chain").list.contains("aten::cudnn_convolution") & (pl.col("category") == "kernel"))
    assert conv.height and set(conv["operator"]) == {"convolution"}
    shapes = {json.loads(s)["K"]: json.loads(s) for s in conv["shape"]}
    # ViT patch embedding: 3 -> 768 channels, 16x16 patches at stride 16 (aten::convolution's args).
    assert shapes[768] == {"N": 4, "C": 3, "H": 224, "W": 224, "K": 768, "R": 16, "S": 16, "stride": [16, 16],
                           "padding": [0, 0], "dilation": [1, 1], "groups": 1, "dtype": "bf16"}
    from catalogue import registry
    assert registry.work("convolution", *registry.split_kwargs("convolution", shapes[768]))["flops"] == \
        2 * 4 * 768 * 14 * 14 * 3 * 16 * 16


def test_memset_under_a_conv_or_gemm_op_stays_memset(falconsai, tmp_path):
    memsets = falconsai.filter(pl.col("category") == "memset")
    assert memsets.height and set(memsets["operator"]) == {"memset"}
    qwen = ingest_trace(PUBLIC / "qwen_h100_first200.json.gz").events
    under_mm = qwen.filter((pl.col("category") == "memset") & pl.col("op").is_in(["aten::mm", "aten::addmm", "aten::linear"]))
    assert set(under_mm["operator"]) <= {"memset"}


def test_flash_fwd_is_one_operator_whichever_path_names_it(falconsai, tmp_path):
    """The same kernel without its launching op (the op stack cut away) keeps the op rules' operator."""
    flash = falconsai.filter(pl.col("kernel").str.contains("flash_fwd_kernel"))
    assert set(flash["operator"]) == {"attention_forward"}
    tax = load_taxonomy()
    for kernel in flash["kernel"].unique():
        assert tax.operator_of_kernel(kernel) == "attention_forward"
    doc = load(PUBLIC / "falconsai_vit_h100.json.gz")
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not (e.get("cat") == "cpu_op" and "attention" in e["name"])]
    bare = ingest_trace(save(doc, tmp_path / "no_attention_ops.json.gz")).events
    assert set(bare.filter(pl.col("kernel").str.contains("flash_fwd_kernel"))["operator"]) == {"attention_forward"}


def test_name_rules_never_call_fbgemm_or_miopen_igemm_a_gemm():
    tax = load_taxonomy()
    assert tax.operator_of_kernel("void fbgemm_gpu::jagged_dense_elementwise_dense_output_kernel_<32, float>") != "gemm"
    assert tax.classify("k", "kernel", ["fbgemm::jagged_to_padded_dense"]).operator == "other"
    assert tax.classify("k", "kernel", ["fbgemm::f8f8bf16_rowwise"]).operator == "gemm"
    assert tax.operator_of_kernel("igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x128x32_wt32x32x8") == "convolution"
    assert tax.operator_of_kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64") == "gemm"
    assert tax.operator_of_kernel("__amd_rocclr_copyBuffer") == "memcpy"
    assert tax.operator_of_kernel("__amd_rocclr_fillBufferAligned") == "memset"


def test_backward_work_is_never_a_forward_operator_or_gemm(public_traces):
    path = public_traces / "hta/nccl_parser_config/nccl_data.json.gz"  # ResNet training on A100, 2 ranks
    result = ingest_trace(path)
    ev = result.events
    backward = ev.filter(pl.col("op_chain").list.eval(pl.element().str.contains("Backward|_backward")).list.any())
    assert backward.height
    compute = backward.filter(pl.col("category") == "kernel")
    assert set(compute["operator"]) <= {"other", "communication", "memset", "memcpy"}, compute.group_by("operator").len()
    # Named by the backward op that decided it.
    assert compute.filter(pl.col("operator") == "other")["op"].str.contains("Backward|_backward").all()
    assert set(ev.filter(pl.col("op_chain").list.contains("aten::cudnn_convolution")
                         & (pl.col("category") == "kernel"))["operator"]) == {"convolution"}
    # Without op context (the MI300 cut's launches are outside its window): CK's bwd_weight and MIOpen's
    # bwd/wrw kernels by name.
    mi300 = ingest_trace(PUBLIC / "resnet_train_mi300_bwd.json.gz").events
    assert not mi300.filter(pl.col("kernel").str.contains("bwd_weight|igemm_bwd|igemm_wrw") & (pl.col("operator") != "other")).height


def test_gemm_kernels_inside_cudnn_convolution_algorithms_are_not_gemm():
    """kineto's ResNet-50 training sample (V100), cut where its kernels have no launch rows: cuDNN's Winograd
    runs volta_sgemm between its transforms, forward (winogradForward*) and weight gradient (winogradWgrad*).
    Each GEMM takes what its stream neighbours are, read here from the trace's own order; the transforms are
    convolution forward and backward work by name; nothing is `gemm`."""
    path = PUBLIC / "resnet50_train_v100_winograd.json.gz"
    gpu = sorted((e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
                  if e.get("cat") == "Kernel" and e.get("ph") == "X"), key=lambda e: (e["args"]["stream"], e["ts"]))
    expected = {}
    for before, this, after in zip(gpu, gpu[1:], gpu[2:]):
        if this["name"].startswith("volta_sgemm") and before["args"]["stream"] == after["args"]["stream"]:
            pair = (before["name"], after["name"])
            if all("winogradForward" in n for n in pair):
                expected[this["ts"] * 1000] = "convolution"
            elif all("winogradWgrad" in n for n in pair):
                expected[this["ts"] * 1000] = "other"
    assert sorted(expected.values()) == ["convolution"] * 3 + ["other"] * 3
    ev = ingest_trace(path).events
    assert ev["attribution"].unique().to_list() == ["unattributed"]  # no op says what any kernel is
    got = dict(ev.filter(pl.col("ts_ns").is_in(list(expected))).select("ts_ns", "operator").iter_rows())
    assert got == expected
    assert not ev.filter(pl.col("operator") == "gemm").height
    assert set(ev.filter(pl.col("kernel").str.contains("winogradForward"))["operator"]) == {"convolution"}
    gradients = ev.filter(pl.col("kernel").str.contains("winogradWgrad|wgrad_|dgrad_|stridedB"))
    assert gradients.height and set(gradients["operator"]) == {"other"}


def test_rocprofv3_json_conserves_time_exactly_and_names_blits():
    path = PUBLIC / "rocprofv3_mi350x_908.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))["rocprofiler-sdk-tool"][0]
    dispatches = doc["buffer_records"]["kernel_dispatch"]
    result = ingest_trace(path)
    ev = result.events
    assert ev.height == len(dispatches) + len(doc["buffer_records"]["memory_copy"])
    assert result.summary["gpu_ns"] == sum(r["end_timestamp"] - r["start_timestamp"] for r in dispatches)
    blits = ev.filter(pl.col("kernel").str.starts_with("__amd_rocclr_"))
    assert blits.height and set(blits["operator"]) == {"memcpy", "memset"}
    assert set(ev["device"]) == {0}  # agent handle -> GPU index


def test_nsys_seq_numbers_are_stripped_from_op_names(public_traces, tmp_path):
    """emit_nvtx with grad mode on writes `aten::mm, seq = 12, op_id = ...`: the same trace with seq
    numbers added to its op ranges reads to the same op names and operators."""
    src = public_traces / "nsys-ai/h100_2gpu_1s.sqlite"
    dst = tmp_path / "with_seq.sqlite"
    shutil.copy(src, dst)
    with sqlite3.connect(dst) as conn:
        conn.execute("UPDATE NVTX_EVENTS SET text = replace(text, ', op_id = ', ', seq = 7, op_id = ') WHERE text LIKE '%, op_id = %'")
        conn.execute("UPDATE StringIds SET value = replace(value, ', op_id = ', ', seq = 7, op_id = ') WHERE value LIKE '%, op_id = %'")
    a, b = ingest_trace(src).events, ingest_trace(dst).events
    assert b["op"].to_list() == a["op"].to_list() and b["operator"].to_list() == a["operator"].to_list()
    assert not b["op"].drop_nulls().str.contains("seq =").any()


def test_graph_tree_capture_sidecar_that_cannot_be_read_warns_and_ingests(tmp_path):
    """TraceLens' torch.compile layout: capture_traces/execution_details.json {"mode": "FULL"}. A capture
    trace without a capture window degrades the profile to name rules with a warning naming the file."""
    shutil.copy(PUBLIC / "falconsai_vit_h100.json.gz", tmp_path / "profile.json.gz")
    (tmp_path / "capture_traces").mkdir()
    shutil.copy(PUBLIC / "qwen_h100_first200.json.gz", tmp_path / "capture_traces" / "capture_trace_rank_0.json.gz")
    (tmp_path / "capture_traces" / "execution_details.json").write_text(
        json.dumps([{"file": "capture_trace_rank_0.json.gz", "batch_size": 1, "mode": "FULL"}]))
    with pytest.warns(CaptureWarning, match="capture_trace_rank_0.json.gz"):
        out = ingest_many([tmp_path / "profile.json.gz"])
    assert not out.quarantined and out.traces[0].summary["gpu_ns"] == _raw_gpu_ns(tmp_path / "profile.json.gz")


def test_cuda_graph_tree_record_range_is_a_capture_window():
    from ingest.graphs import CAPTURE_WINDOW, _window_size
    assert CAPTURE_WINDOW.match("CUDAGraphNode.record (dynamo_timed)")
    assert _window_size("CUDAGraphNode.record (dynamo_timed)@12") is None and _window_size("capture_32_FULL@1") == 32


@pytest.mark.parametrize("field", ["stream", "device", "correlation"])
def test_int64_overflow_quarantines_only_that_trace(tmp_path, field):
    doc = load(PUBLIC / "falconsai_vit_h100.json.gz")
    next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")["args"][field] = 2**64 + 5
    bad = save(doc, tmp_path / "overflow.json.gz")
    good = PUBLIC / "falconsai_vit_h100.json.gz"
    out = ingest_many([bad, good])
    assert [q["path"] for q in out.quarantined] == [str(bad)] and field in out.quarantined[0]["reason"]
    assert len(out.traces) == 1


@pytest.fixture
def reader_bug_on_boom(monkeypatch):
    """ingest_trace raising a RuntimeError for any file named boom.json.gz (a bug of a reader, not a TraceError)."""
    import ingest.pipeline as pipeline
    import ingest.store as store

    real = pipeline.ingest_trace

    def flaky(path, *args, **kwargs):
        if Path(path).name == "boom.json.gz":
            raise RuntimeError("a reader bug")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(pipeline, "ingest_trace", flaky)
    monkeypatch.setattr(store, "ingest_trace", flaky)  # the store holds the name since its imports moved up


def test_any_exception_quarantines_only_its_trace(tmp_path, reader_bug_on_boom):
    import ingest.pipeline as pipeline

    boom = tmp_path / "boom.json.gz"
    shutil.copy(PUBLIC / "falconsai_vit_h100.json.gz", boom)
    out = pipeline.ingest_many([boom, PUBLIC / "falconsai_vit_h100.json.gz"])
    assert out.quarantined == [{"path": str(boom), "reason": "unexpected RuntimeError while ingesting: a reader bug"}]
    assert len(out.traces) == 1


def test_any_exception_quarantines_only_its_trace_in_the_store(tmp_path, reader_bug_on_boom):
    # The store is what ingest, build and refresh write: the same rule holds there as in ingest_many.
    from ingest.store import TraceStore

    boom = tmp_path / "boom.json.gz"
    shutil.copy(PUBLIC / "rocprofv3_mi350x_908.json.gz", boom)
    store = TraceStore(str(tmp_path / "store"))
    store.ingest([boom, PUBLIC / "falconsai_vit_h100.json.gz"], jobs=1)
    assert store.quarantined() == [{"path": str(boom), "reason": "unexpected RuntimeError while ingesting: a reader bug"}]
    assert len(store.trace_ids()) == 1


def test_bidirectional_attention_is_no_serving_phase():
    # A vision/diffusion transformer's SDPA (no cache, no causal mask) is not prefill.
    assert phase_from_shape("attention_forward", {"num_heads": 12, "head_dim": 64, "seq_lens": [197] * 4}) is None
    assert phase_from_shape("attention_forward", {"seq_lens": [1] * 4, "kv_lens": [90] * 4}) == "decode"
    assert phase_from_shape("attention_forward", {"seq_lens": [9], "is_causal": True}) == "prefill"


def test_rocprofv3_json_memory_copies_conserve_time_on_their_gpu(tmp_path):
    """The MI350X fixture traced no copies: the same document with memory_copy records added as rocprofv3
    writes them (operation indexes MEMORY_COPY's operations, agents by handle, ns timestamps) ingests with every
    copy as a memcpy row on the GPU end of the copy (the destination, or the source of a copy to the host), and
    the time of kernels and copies together conserved to the ns."""
    raw = json.loads(gzip.decompress((PUBLIC / "rocprofv3_mi350x_908.json.gz").read_bytes()))
    doc = raw["rocprofiler-sdk-tool"][0]
    ops = next(e["operations"] for e in doc["strings"]["buffer_records"] if e["kind"] == "MEMORY_COPY")
    host, gpu0, gpu1 = ({"handle": a["id"]["handle"]} for a in (doc["agents"][0], doc["agents"][2], doc["agents"][3]))
    first = doc["buffer_records"]["kernel_dispatch"][0]["start_timestamp"]
    copies = [("MEMORY_COPY_HOST_TO_DEVICE", host, gpu1, 1_000, 4_321), ("MEMORY_COPY_DEVICE_TO_HOST", gpu1, host, 9_000, 777),
              ("MEMORY_COPY_DEVICE_TO_DEVICE", gpu0, gpu1, 20_000, 1_234)]
    doc["buffer_records"]["memory_copy"] = [
        {"size": 96, "kind": 10, "operation": ops.index(op), "thread_id": 908,
         "correlation_id": {"internal": 900_000 + k, "external": 0}, "start_timestamp": first - 50_000 + at,
         "end_timestamp": first - 50_000 + at + dur, "dst_agent_id": dst, "src_agent_id": src, "bytes": 1 << 20}
        for k, (op, src, dst, at, dur) in enumerate(copies)]
    path = tmp_path / "with_copies.json.gz"
    path.write_bytes(gzip.compress(json.dumps(raw).encode()))
    result = ingest_trace(path)
    ev = result.events
    kernels = sum(r["end_timestamp"] - r["start_timestamp"] for r in doc["buffer_records"]["kernel_dispatch"])
    assert result.summary["gpu_ns"] == kernels + 4_321 + 777 + 1_234
    assert result.summary["attributed_ns"] + result.summary["unattributed_ns"] == result.summary["gpu_ns"]
    got = ev.filter(pl.col("category") == "memcpy").sort("ts_ns")
    assert got["kernel"].to_list() == ["Memcpy HOST_TO_DEVICE", "Memcpy DEVICE_TO_HOST", "Memcpy DEVICE_TO_DEVICE"]
    assert got["dur_ns"].to_list() == [4_321, 777, 1_234]
    assert got["device"].to_list() == [1, 1, 1]  # gpu1 is GPU index 1: the destination, the source to host, dst
    assert set(got["operator"]) == {"memcpy"}


@pytest.mark.parametrize("name", ["sd35_diffusion_mi300_clip.json.gz", "flux_diffusion_mi300_graphs.json.gz"])
def test_diffusion_pipelines_get_no_serving_phase(name):
    """xDiT on MI300X: SD 3.5's CLIP text encoder runs causal SDPA (once read as prefill) and Flux's
    torch.compile HIP graphs replay attention (once read as FULL-graph decode); neither is a serving step."""
    ev = ingest_trace(PUBLIC / name).events
    assert ev.filter(pl.col("operator").is_in(["unified_attention", "attention_forward"])).height
    assert set(ev["phase"]) == {"unknown"} and set(ev["phase_rule"]) == {"none"}


def test_training_or_group_norm_is_no_serving_workload():
    from ingest.phases import serving_workload
    assert serving_workload([["ProfilerStep#1", "aten::mm"]], [None], ["gemm"])
    assert not serving_workload([["ProfilerStep#1", "autograd::engine::evaluate_function: MmBackward0"]], [None], ["other"])
    assert not serving_workload([["ProfilerStep#3", "execute_diffusion_1_256x256"]], [None], ["gemm"])
    assert not serving_workload([["aten::conv2d"]], [None], ["group_norm", "convolution"])


def test_inductor_kernel_named_after_sdpa_is_not_attention():
    ev = ingest_trace(PUBLIC / "sd35_diffusion_mi300_inductor_sdpa.json.gz").events
    poi = ev.filter(pl.col("kernel").str.starts_with("triton_poi_fused__scaled_dot_product_flash_attention"))
    assert poi.height and set(poi["operator"]) == {"other"}
    assert set(ev.filter(pl.col("kernel") == "attn_fwd")["operator"]) == {"attention_forward"}


def test_fused_rms_norm_kernel_is_rms_norm_by_op_and_by_name():
    ev = ingest_trace(PUBLIC / "normalization_layers_mi300.json.gz").events
    tax = load_taxonomy()
    rms = ev.filter(pl.col("op") == "aten::_fused_rms_norm")
    assert rms.height and set(rms["operator"]) == {"rms_norm"}
    for kernel in rms["kernel"].unique():
        assert tax.operator_of_kernel(kernel) == "rms_norm", kernel
    layer = ev.filter(pl.col("op") == "aten::native_layer_norm")
    for kernel in layer["kernel"].unique():
        assert tax.operator_of_kernel(kernel) == "layer_norm", kernel


def test_cudnn_fft_convolution_kernels_are_convolution_without_their_op(tmp_path):
    """kineto's ResNet-50 autograd sample (V100): cuDNN's FFT convolution (fft2d_r2c, flip_filter, volta_cgemm,
    gcgemm, cuBLAS' complex transpose) under aten::cudnn_convolution, and the same kernels with the op stack cut
    away: one operator whichever path names them, never gemm."""
    path = PUBLIC / "resnet50_train_v100_fft_conv.json.gz"
    ev = ingest_trace(path).events
    conv = ev.filter((pl.col("op") == "aten::cudnn_convolution") & (pl.col("category") == "kernel"))
    assert conv.filter(pl.col("kernel").str.contains("fft2d_r2c|cgemm")).height
    assert set(conv["operator"]) == {"convolution"}
    tax = load_taxonomy()
    for kernel in conv["kernel"].unique():
        assert tax.operator_of_kernel(kernel) == "convolution", kernel
    doc = load(path)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "cpu_op"]
    bare = ingest_trace(save(doc, tmp_path / "no_ops.json.gz")).events
    assert set(bare.filter(pl.col("kernel").is_in(conv["kernel"].unique().implode()))["operator"]) == {"convolution"}


def test_miopen_and_ck_convolution_helpers_are_convolution_by_name():
    tax = load_taxonomy()
    for kernel in ("batched_transpose_32x32_half", "transpose_NCHW2CNHW_V2_2D_WG_off64", "SubTensorOpWithScalar1d", "Im2d2Col_v2",
                   "_ZN2ck16tensor_operation6device12_GLOBAL__N_149kernel_grouped_conv_fwd_multiple_abd_xdl_cshuffleINS_"):
        assert tax.operator_of_kernel(kernel) == "convolution", kernel
    assert tax.operator_of_kernel("void (anonymous namespace)::groupnorm_kernel_dispatch_down<__hip_bfloat16, 1024u>(unsigned") == "group_norm"
    # the MI300 training cut: op-less helpers between backward kernels stay backward work
    mi300 = ingest_trace(PUBLIC / "resnet_train_mi300_bwd.json.gz").events
    assert not mi300.filter(pl.col("kernel").str.contains("bwd_weight|igemm_bwd|igemm_wrw") & (pl.col("operator") != "other")).height
