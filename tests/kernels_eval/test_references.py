"""Every torch reference, on every smoke shape, against an independent float64 formulation (ke_oracles)."""

from __future__ import annotations

import inspect

import pytest

torch = pytest.importorskip("torch")

from . import ke_oracles  # noqa: E402

from kernels_eval import registry  # noqa: E402

FP8_OUTPUTS = {("fp8_dynamic_per_token_quant", "q"), ("per_token_group_quant_fp8", "quantized"),
               ("fused_rmsnorm_quant", "quantized")}
CASES = [(name, n) for name in registry.operator_names() for n in range(len(registry.spec(name).smoke))]


def as_dict(name: str, out) -> dict:
    """The reference's return value as {output name: tensor}, in the declared output order."""
    names = registry.spec(name).outputs
    if isinstance(out, torch.Tensor):
        assert names == ("out",), f"{name} returned one tensor but declares {names}"
        return {"out": out}
    if isinstance(out, (tuple, list)):
        assert len(out) == len(names)
        return dict(zip(names, out))
    assert set(out) == set(names), f"{name} returned {sorted(out)}, declares {names}"
    return dict(out)


def assert_close(name, key, actual, expected, rtol, atol):
    a, e = actual.double(), expected.double()
    assert a.shape == e.shape, f"{name}.{key}: shape {tuple(a.shape)} != {tuple(e.shape)}"
    assert torch.isfinite(a).sum() == torch.isfinite(e).sum(), f"{name}.{key}: -inf/nan pattern differs"
    fin = torch.isfinite(e)
    assert torch.equal(a[~fin], e[~fin]), f"{name}.{key}: non-finite entries differ"
    scale = float(e[fin].abs().max()) if fin.any() else 1.0
    err = (a[fin] - e[fin]).abs()
    bound = atol * max(scale, 1e-30) + rtol * e[fin].abs()
    worst = float((err - bound).max()) if err.numel() else 0.0
    assert worst <= 0, f"{name}.{key}: max error {float(err.max()):.3g} exceeds tolerance (scale {scale:.3g})"


@pytest.mark.parametrize("name,index", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_reference_matches_float64(name, index):
    spec = registry.spec(name)
    smoke = spec.smoke[index]
    ref = registry.load_reference(name)
    inputs = ref.make_inputs(**smoke.inputs, device="cpu", generator=torch.Generator().manual_seed(1234 + index))
    before = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    out = as_dict(name, ref.Model(**smoke.init)(**inputs))
    for k, v in before.items():
        assert torch.equal(inputs[k], v), f"{name}: the reference modified its input {k!r}"
    expected = getattr(ke_oracles, name)(inputs, smoke.init)
    for key, exp in expected.items():
        got = out[key]
        if (name, key) in FP8_OUTPUTS:
            assert got.dtype == torch.float8_e4m3fn
            # One e4m3 rounding step: half an ulp is 1/16 relative; subnormals step by 2^-9 (atol is
            # relative to the largest value, about 448 here).
            assert_close(name, key, got.float(), exp, rtol=0.0626, atol=1e-5)
        elif not got.is_floating_point():
            assert torch.equal(got.double(), exp.double()), f"{name}.{key}: integer output differs"
        elif got.dtype == torch.float32 and name in ("moe_topk_gating_softmax", "topk_filter", "block_scaled_mm",
                                                     "gemm", "embedding"):
            assert_close(name, key, got, exp, rtol=1e-4, atol=1e-5)
        else:
            tol = spec.tolerance
            assert_close(name, key, got, exp, rtol=max(tol["rtol"], 1e-5), atol=max(tol["atol"], 1e-5))


@pytest.mark.parametrize("name", registry.operator_names())
def test_make_inputs_feed_forward_by_name(name):
    """make_inputs returns exactly the tensors forward() takes, by name (the Atrex-Bench contract)."""
    ref = registry.load_reference(name)
    smoke = registry.spec(name).smoke[0]
    inputs = ref.make_inputs(**smoke.inputs, device="cpu", generator=torch.Generator().manual_seed(0))
    params = inspect.signature(ref.Model.forward).parameters
    required = {p for p, v in params.items() if p != "self" and v.default is inspect.Parameter.empty}
    assert required <= set(inputs) <= set(params) - {"self"}


def test_make_inputs_is_seeded():
    ref = registry.load_reference("fused_moe")
    smoke = registry.spec("fused_moe").smoke[0]
    a = ref.make_inputs(**smoke.inputs, generator=torch.Generator().manual_seed(7))
    b = ref.make_inputs(**smoke.inputs, generator=torch.Generator().manual_seed(7))
    c = ref.make_inputs(**smoke.inputs, generator=torch.Generator().manual_seed(8))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["hidden_states"], c["hidden_states"])


def test_routing_respects_top_k():
    ref = registry.load_reference("fused_moe")
    inputs = ref.make_inputs(token_count=64, hidden_size=16, intermediate_size=8, num_experts=8, top_k=4)
    ids = inputs["topk_ids"]
    assert ids.dtype == torch.int32 and ids.shape == (64, 4)
    assert all(len(set(row)) == 4 for row in ids.tolist())
    assert torch.allclose(inputs["topk_weights"].sum(-1), torch.ones(64))


def test_slot_mapping_padding_is_skipped():
    ref = registry.load_reference("reshape_and_cache")
    inputs = ref.make_inputs(shape=[6, 2, 8], block_size=4, padded_tokens=2, generator=torch.Generator().manual_seed(3))
    assert (inputs["slot_mapping"][-2:] == -1).all() and (inputs["slot_mapping"][:-2] >= 0).all()
    out = ref.Model()(**inputs)
    expected = ke_oracles.reshape_and_cache(inputs, {})
    assert torch.equal(out["key_cache"].double(), expected["key_cache"])


def test_unified_attention_mixed_prefill_and_decode():
    """Decode rows (q_len 1 < kv_len) see every key; a chunked-prefill row sees keys up to its position."""
    ref = registry.load_reference("unified_attention")
    kwargs = dict(num_seqs=3, seq_lens=[9, 17, 4], query_lens=[1, 5, 4], num_query_heads=4, num_kv_heads=2,
                  head_size=16, block_size=4)
    inputs = ref.make_inputs(**kwargs, generator=torch.Generator().manual_seed(5))
    out = ref.Model()(**inputs)
    expected = ke_oracles.unified_attention(inputs, {})["out"]
    assert_close("unified_attention", "out", out, expected, rtol=2e-2, atol=2e-2)


# Operators whose minimal traffic is a data-dependent part of their tensors (rule 5 of the README).
PARTIAL_READS = {"fused_moe", "fp8_blockscale_fused_moe", "unified_attention", "paged_attention_decode",
                 "reshape_and_cache", "gated_delta_rule_update", "chunk_gated_delta_rule_state", "embedding"}
PARTIAL_WRITES = {"reshape_and_cache", "gated_delta_rule_update", "chunk_gated_delta_rule_state",
                  "moe_align_block_size"}


@pytest.mark.parametrize("name", registry.operator_names())
def test_work_bytes_equal_tensor_bytes(name):
    """Where an operator reads/writes its whole tensors, the work model's bytes equal the tensors' bytes."""
    spec = registry.spec(name)
    ref = registry.load_reference(name)
    for smoke in spec.smoke:
        inputs = ref.make_inputs(**smoke.inputs, device="cpu", generator=torch.Generator().manual_seed(0))
        out = as_dict(name, ref.Model(**smoke.init)(**inputs))
        work = registry.work(name, smoke.init, smoke.inputs)
        if name not in PARTIAL_READS:
            assert work["bytes_read"] == sum(t.nbytes for t in inputs.values() if isinstance(t, torch.Tensor))
        if name not in PARTIAL_WRITES:
            assert work["bytes_written"] == sum(t.nbytes for t in out.values())


def test_attention_in_query_blocks_matches_one_block(monkeypatch):
    from kernels_eval.operators import _attention

    g = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(13, 4, 8, generator=g) for _ in range(3))
    whole = _attention.attend(q, k[:, :2], v[:, :2], causal=True, scale=0.3)
    monkeypatch.setattr(_attention, "_SCORE_BUDGET", 8)
    assert torch.allclose(_attention.attend(q, k[:, :2], v[:, :2], causal=True, scale=0.3), whole, atol=1e-6)
