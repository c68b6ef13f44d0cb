"""Operator taxonomy: each rule family pinned on real fixture rows, the YAML validated, overrides by path."""

from __future__ import annotations

import gzip
import json
import re

import polars as pl
import pytest

from ingest.pipeline import read_events
from ingest.taxonomy import TaxonomyError, load_taxonomy

TRACES = {
    "vllm_decode_full": "tracelens/inference/vllm_decode_full/graph_execution.json.gz",
    "vllm_piecewise": "tracelens/inference/vllm_prefilldecode_piecewise/graph_execution.json.gz",
    "sglang_decode": "tracelens/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz",
    "sglang_prefill": "tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz",
    "b200": "tracelens/b200/eager_trace.json.gz",
}


@pytest.fixture(scope="module")
def events(public_traces):
    return {name: read_events(public_traces / rel) for name, rel in TRACES.items()}


@pytest.fixture(scope="module")
def tax():
    return load_taxonomy()


def _rows(frame: pl.DataFrame, kernel: str, op: str | None = None) -> list[dict]:
    rows = frame.filter(pl.col("kernel").str.contains(kernel, literal=True))
    if op is not None:
        rows = rows.filter(pl.col("op_chain").list.contains(op))
    return rows.select("kernel", "category", "op_chain").to_dicts()


# (trace, kernel substring, op that must be in the row's chain, canonical operator):
# which catalogue operator each framework op/kernel is, from research/kernels.md §2.
OP_CASES = [
    ("b200", "vllm::fused_add_rms_norm_kernel", "_C::fused_add_rms_norm", "fused_add_rms_norm"),
    ("b200", "vllm::rms_norm_kernel", "_C::rms_norm", "rms_norm"),
    ("b200", "vllm::rotary_embedding_kernel", "_C::rotary_embedding", "fused_qkv_rope"),
    ("b200", "vllm::scaled_fp8_quant_kernel", "_C::static_scaled_fp8_quant", "fp8_dynamic_per_token_quant"),
    ("b200", "vllm::reshape_and_cache_flash_kernel", "_C_cache_ops::reshape_and_cache_flash", "reshape_and_cache"),
    ("b200", "fmhaSm100aKernel", "vllm::unified_attention_with_output", "unified_attention"),
    ("b200", "bmm_MxE4m3_MxE2m1", "vllm::moe_forward", "fused_moe"),
    ("b200", "routingIndicesHistogramScoresKernel", "vllm::moe_forward", "moe_topk_gating_softmax"),
    ("b200", "routingIndicesOffsetsKernel", "vllm::moe_forward", "moe_align_block_size"),
    ("b200", "multimem_all_reduce_kernel", "symm_mem::multimem_all_reduce_", "communication"),
    ("b200", "Memcpy DtoD", "vllm::all_reduce", "memcpy"),  # a copy is a copy, whatever op issued it
    ("b200", "ncclDevKernel_AllGather", "vllm::all_gather", "communication"),
    ("b200", "nvjet_tst", "aten::addmm", "gemm"),
    ("b200", "vectorized_gather_kernel", "aten::embedding", "embedding"),
    ("sglang_prefill", "Cijk_Alik_Bljk", "aiter::gemm_a16w16", "gemm"),
    ("sglang_prefill", "FmhaBatchPrefillWithPagedKVCacheKernel", "aiter::mha_batch_prefill", "unified_attention"),
    ("sglang_prefill", "add_rmsnorm_quant_kernel", "aiter::add_rmsnorm", "fused_add_rms_norm"),
    ("sglang_prefill", "add_rmsnorm_quant_kernel", "aiter::rmsnorm", "rms_norm"),
    ("sglang_prefill", "act_and_mul_kernel", "sgl_kernel::silu_and_mul", "silu_and_mul"),
    ("sglang_prefill", "rotary_embedding_kernel", "sgl_kernel::rotary_embedding", "fused_qkv_rope"),
    ("sglang_prefill", "store_kvcache", "sglang::store_cache", "reshape_and_cache"),
    ("sglang_prefill", "ArgMaxOps", "aten::argmax", "topk_filter"),
    ("vllm_piecewise", "kernel_unified_attention_2d", "vllm::unified_attention_with_output", "unified_attention"),
    ("vllm_piecewise", "reshape_and_cache_flash_kernel", "_C_cache_ops::reshape_and_cache_flash", "reshape_and_cache"),
    ("vllm_piecewise", "Cijk_Alik_Bljk", "vllm::rocm_unquantized_gemm", "gemm"),
]


@pytest.mark.parametrize("trace,kernel,op,operator", OP_CASES)
def test_op_rules_on_real_rows(events, tax, trace, kernel, op, operator):
    rows = _rows(events[trace], kernel, op)
    assert rows, f"fixture {trace} has no {kernel!r} row under {op!r}"
    for row in rows:
        assert tax.classify(row["kernel"], row["category"], row["op_chain"]).operator == operator


# Graph-replayed kernels carry no op: the kernel name alone must name the operator.
NAME_CASES = [
    ("vllm_decode_full", "_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1_swiglu", "fused_moe"),
    ("vllm_decode_full", "_finalize_matmul_scatter_bf16", "fused_moe"),
    ("vllm_decode_full", "_topk_forward", "moe_topk_gating_softmax"),
    ("vllm_decode_full", "_combined_routing_compute", "moe_align_block_size"),
    ("vllm_decode_full", "_sum_bitmatrix_rows", "moe_align_block_size"),
    ("vllm_decode_full", "kernel_unified_attention_3d", "unified_attention"),
    ("vllm_decode_full", "reduce_segments", "unified_attention"),
    ("vllm_decode_full", "Cijk_Alik_Bljk", "gemm"),
    ("vllm_decode_full", "triton_poi_fused_constant_pad_nd_moe_forward_0", "fused_moe"),
    ("sglang_decode", "paged_attention_ll4mi_QKV_mfma16_kernel", "paged_attention_decode"),
    ("sglang_decode", "paged_attention_ll4mi_reduce_kernel", "paged_attention_decode"),
    ("sglang_decode", "act_and_mul_kernel", "silu_and_mul"),
    ("sglang_decode", "store_kvcache", "reshape_and_cache"),
]


@pytest.mark.parametrize("trace,kernel,operator", NAME_CASES)
def test_kernel_name_rules_on_graph_rows(events, tax, trace, kernel, operator):
    rows = events[trace].filter(pl.col("graph_launch") & pl.col("kernel").str.contains(kernel, literal=True))
    assert rows.height, f"no graph-replayed {kernel!r} in {trace}"
    for name in rows["kernel"].unique():
        assert tax.operator_of_kernel(name) == operator


def test_ck_rmsnorm_fused_add_is_read_from_the_template_enum(events, tax):
    names = events["vllm_decode_full"].filter(pl.col("kernel").str.contains("Rmsnorm2dFwd"))["kernel"].unique()
    assert len(names) == 2
    for name in names:
        fused = re.search(r"Rmsnorm2dFusedAddEnumE(\d)", name).group(1) != "0"
        assert tax.operator_of_kernel(name) == ("fused_add_rms_norm" if fused else "rms_norm")


def test_inductor_kernels_named_after_their_fused_ops(public_traces, tax):
    frame = read_events(public_traces / "tracelens/torch_compile_triton/trace.json.gz")
    ops = {k: tax.classify(k, c, ch).operator for k, c, ch in frame.select("kernel", "category", "op_chain").rows()}
    assert ops["triton_red_fused_add_mean_mul_pow_rsqrt_0"] == "fused_add_rms_norm"
    assert ops["triton_poi_fused__unsafe_view_mul_silu_2"] == "silu_and_mul"
    assert ops["attn_fwd"] == "attention_forward"  # under aten::_scaled_dot_product_flash_attention


def test_every_catalogue_operator_is_listed(atrex_dir, tax):
    catalogue = json.loads((atrex_dir / "data/operator_importance.json").read_text())["operators"]
    assert len(catalogue) == 30
    assert set(catalogue) <= set(tax.operators)
    assert set(tax.operators) - set(catalogue) == {"gemm", "embedding", "convolution", "batch_norm", "group_norm",
                                                   "communication", "memcpy", "memset", "other"}


@pytest.mark.parametrize("trace", sorted(TRACES))
def test_named_share_of_gpu_time_at_least_95_percent(events, tax, public_traces, trace):
    frame = events[trace]
    named = sum(
        d for k, c, ch, d in frame.select("kernel", "category", "op_chain", "dur_ns").rows() if tax.classify(k, c, ch).operator != "other"
    )
    # The total comes from the raw file, not from the reader under test.
    with gzip.open(public_traces / TRACES[trace]) as f:
        raw = json.load(f)["traceEvents"]
    total = sum(round(e["dur"] * 1000) for e in raw if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    assert abs(total - int(frame["dur_ns"].sum())) <= len(frame)  # float µs rounding only
    assert named / total >= 0.95


def test_override_by_path(tmp_path, tax):
    custom = tmp_path / "taxonomy.yaml"
    custom.write_text(
        "operators: [gemm, other]\nop_rules: []\nkernel_rules:\n  - {operator: gemm, kernel: '^Cijk_'}\n"
    )
    small = load_taxonomy(custom)
    assert small.classify("Cijk_Alik_Bljk_X", "kernel", ["aiter::rmsnorm"]).operator == "gemm"
    assert small.classify("store_kvcache", "kernel", []).operator == "other"
    assert tax.classify("store_kvcache", "kernel", []).operator == "reshape_and_cache"


@pytest.mark.parametrize(
    "text,problem",
    [
        ("operators: [gemm]\nop_rules: []\nkernel_rules: []\n", "must include 'other'"),
        ("operators: [gemm, other]\nop_rules: []\nkernel_rules:\n  - {operator: rmsnorm, kernel: x}\n", "kernel_rules[0] names operator 'rmsnorm'"),
        ("operators: [gemm, other]\nop_rules:\n  - {operator: gemm, op: '(('}\nkernel_rules: []\n", "op_rules[0].op is not a valid regex"),
        ("operators: [gemm, other]\nop_rules:\n  - {operator: gemm}\nkernel_rules: []\n", "op_rules[0] needs a `op` pattern"),
        ("operators: [gemm, other\n", "invalid YAML"),
    ],
)
def test_bad_taxonomy_names_file_and_problem(tmp_path, text, problem):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(TaxonomyError) as err:
        load_taxonomy(bad)
    assert str(bad) in str(err.value) and problem in str(err.value)


def test_the_shipped_taxonomy_is_read_from_its_yaml_and_writes_nothing_into_the_package():
    """The shipped taxonomy is its YAML's document, read without writing anything beside it (it once left a JSON
    copy in the package's __pycache__)."""
    import yaml

    from catalogue.operators import MODELLED_OPERATORS, OPERATORS, folder
    from ingest import taxonomy

    before = sorted(p.name for p in taxonomy.DEFAULT_PATH.parent.rglob("*.json"))
    taxonomy._default.cache_clear()
    doc = yaml.safe_load(taxonomy.DEFAULT_PATH.read_text())
    doc["operators"] = list(OPERATORS + MODELLED_OPERATORS) + doc["operators"]
    for name in OPERATORS + MODELLED_OPERATORS:  # each operator's own rules, from its folder, by rank
        own = yaml.safe_load((folder(name) / "taxonomy.yaml").read_text())
        for section in taxonomy.RULE_SECTIONS:
            doc[section] += [{**rule, "operator": name} for rule in own.get(section) or []]
    for section in taxonomy.RULE_SECTIONS:
        doc[section].sort(key=lambda rule: rule["rank"])
    want = taxonomy.parse_taxonomy(doc, str(taxonomy.DEFAULT_PATH))
    assert taxonomy._default() == want
    assert sorted(p.name for p in taxonomy.DEFAULT_PATH.parent.rglob("*.json")) == before


def test_the_operators_rules_are_tried_in_rank_order_and_a_rank_is_one_rules(tmp_path, monkeypatch):
    """Each operator's rules come from its folder and run where their rank puts them among everyone's: the
    fused-add norm's Inductor kernel rule (rank 40) is tried before the plain norm's (50), which matches too."""
    from ingest import taxonomy

    tax = load_taxonomy()
    kernel = "triton_red_fused_add_mean_pow_rsqrt_0"
    assert [r.operator for r in tax.kernel_rules if r.kernel.search(kernel)][:2] == ["fused_add_rms_norm", "rms_norm"]
    assert tax.classify(kernel, "kernel", []).operator == "fused_add_rms_norm"
    assert [r.where for r in tax.kernel_rules] == [f"kernel_rules[{i}]" for i in range(len(tax.kernel_rules))]
    shipped, base = taxonomy.DEFAULT_PATH.read_text(), tmp_path / "taxonomy.yaml"
    assert "- {rank: 90, operator: other, kernel:" in shipped
    base.write_text(shipped.replace("- {rank: 90, operator: other, kernel:", "- {rank: 40, operator: other, kernel:"))
    monkeypatch.setattr(taxonomy, "DEFAULT_PATH", base)
    with pytest.raises(TaxonomyError, match="kernel_rules rank 40 is taken already"):
        taxonomy.default_document()
    base.write_text(shipped.replace("- {rank: 90, operator: other, kernel:", "- {operator: other, kernel:"))
    with pytest.raises(TaxonomyError, match=f"{base}: every rule of kernel_rules needs an integer `rank`"):
        taxonomy.default_document()
