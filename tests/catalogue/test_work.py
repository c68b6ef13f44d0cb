"""FLOPs and bytes of hand-computed problems (numbers worked out by hand in the comments)."""

from __future__ import annotations

import itertools
from math import comb

import pytest

from catalogue import registry
from catalogue.operators import OPERATORS
from catalogue.operators._common import PATHS, expected_distinct
from catalogue.operators.moe_align_block_size import expected_padded_tokens


def w(op, init, inputs):
    r = registry.work(op, init, inputs)
    return r["flops"], r["bytes_read"], r["bytes_written"], r["path"]


def test_rms_norm_2x4():
    # 2 rows x (3*4 + 1); read x 2*8 B + weight 2*4 B; write 2*8 B.
    assert w("rms_norm", {"eps": 1e-6}, {"token_count": 2, "hidden_size": 4}) == (26, 24, 16, "fp32_vector")


def test_gemm_bf16_and_fp8_rowwise():
    # 2*2*3*4 = 48 FLOPs; a 2x4 + b 3x4 bf16 = 40 B; out 2x3 bf16 = 12 B.
    assert w("gemm", {"scaling": "none"}, {"m": 2, "n": 3, "k": 4, "dtype": "bf16", "scaling": "none"}) == \
        (48, 40, 12, "bf16_tensor")
    # fp8 operands 20 B + fp32 scales (2 + 3) * 4 = 40 B; bf16 out 12 B.
    assert w("gemm", {"scaling": "per_row"}, {"m": 2, "n": 3, "k": 4, "dtype": "fp8_e4m3", "scaling": "per_row"}) == \
        (48, 40, 12, "fp8_tensor")
    with pytest.raises(ValueError, match="does not go with"):
        registry.work("gemm", {"scaling": "per_row"}, {"m": 2, "n": 3, "k": 4, "dtype": "bf16", "scaling": "per_row"})


def test_attention_forward_two_sequences():
    # Pairs 2^2 + 3^2 = 13, 4*H*D*13 = 4*1*2*13 = 104; q,k,v 3 * 5 tokens * 2 * 2 B = 60 + 2 cu_seqlens * 3 * 4 B.
    kw = {"num_heads": 1, "head_dim": 2, "seq_lens": [2, 3]}
    assert w("attention_forward", {}, kw) == (104, 84, 20, "bf16_tensor")


def test_unified_attention_causal_pairs():
    # One prefill of 3: pairs 3*4/2 = 6 -> 4*2*4*6 = 192.
    kw = {"num_seqs": 1, "seq_lens": [3], "num_query_heads": 2, "num_kv_heads": 1, "head_size": 4, "block_size": 2}
    flops, read, written, _ = w("unified_attention", {}, kw)
    # q 3*2*4*2 = 48, K and V 2*3*1*4*2 = 48, cu_seqlens 2*4, seqused 4, two block-table entries 8.
    assert (flops, read, written) == (192, 48 + 48 + 8 + 4 + 8, 48)
    # A decode row over 3 keys: 1*(3-1) + 1 = 3 pairs.
    assert w("unified_attention", {}, dict(kw, query_lens=[1]))[0] == 4 * 2 * 4 * 3


def test_paged_attention_decode_counts_used_pages_only():
    # 4*Hq*D*B*L = 4*4*8*2*5 = 1280; q 2*4*8*2 = 128, K+V 2*2*5*2*8*2 = 640,
    # 2 blocks of 4 per seq * 2 seqs * 4 B = 16, seq_lens 8.
    kw = {"num_seqs": 2, "ctx_len": 5, "num_query_heads": 4, "num_kv_heads": 2, "head_size": 8, "block_size": 4,
          "dtype": "fp16"}
    assert w("paged_attention_decode", {}, kw) == (1280, 792, 128, "fp16_tensor")


def test_fused_moe_single_token():
    # T=1 activates exactly k=2 experts: 6*1*2*8*4 = 384 FLOPs;
    # hidden 16 B + 2 experts * 3*8*4 * 2 B = 384 B + weights/ids 2*(4+4) = 16 B; fp32 out 32 B.
    kw = {"token_count": 1, "hidden_size": 8, "intermediate_size": 4, "num_experts": 4, "top_k": 2}
    assert w("fused_moe", {"num_experts": 4, "intermediate_size": 4, "top_k": 2}, kw) == (384, 416, 32, "bf16_tensor")


def test_expected_distinct_experts_by_enumeration():
    # 3 tokens each pick 2 of 4 experts: enumerate all 6^3 routings.
    pairs = list(itertools.combinations(range(4), 2))
    mean = sum(len(set(a) | set(b) | set(c)) for a, b, c in itertools.product(pairs, repeat=3)) / len(pairs) ** 3
    assert expected_distinct(3, 4, 2) == pytest.approx(mean)


def test_moe_align_padding_by_enumeration():
    # Same routings, block 2: padded length = sum over experts of ceil(count/2)*2.
    pairs = list(itertools.combinations(range(4), 2))
    total = 0
    for routing in itertools.product(pairs, repeat=3):
        counts = [sum(e in r for r in routing) for e in range(4)]
        total += sum(-(-c // 2) * 2 for c in counts)
    assert expected_padded_tokens(3, 4, 2, 2) == pytest.approx(total / len(pairs) ** 3)
    # One token, 2 experts, block 4: 8 padded ids, 2 block ids, 1 count -> 4*(8+2+1) = 44 B written.
    assert w("moe_align_block_size", {"block_size": 4, "num_experts": 4},
             {"token_count": 1, "num_experts": 4, "top_k": 2})[2] == 44
    assert comb(4, 2) == len(pairs)


def test_block_scaled_mm():
    # 2*1*128*256 = 65536 + (3*2 - 1)*1*128 = 640; a 256 + b 32768 + a_scales 2*4 + b_scales 1*2*4 B; fp32 out 512 B.
    kw = {"m": 1, "n": 128, "k": 256, "group_n": 128, "group_k": 128}
    assert w("block_scaled_mm", {"group_n": 128, "group_k": 128}, kw) == (66176, 33040, 512, "fp8_tensor")


def test_mla_decode():
    # 2*B*L*h*(r+rope + r) = 2*1*2*2*10 = 80; q 1*2*6*2 = 24, latent rows 2*6*2 = 24, seq_lens 4; out 2*4*2 = 16.
    kw = {"batch_size": 1, "ctx_len": 2, "nhead": 2, "kv_lora_rank": 4, "qk_rope_head_dim": 2}
    init = {"nhead": 2, "kv_lora_rank": 4, "qk_rope_head_dim": 2}
    assert w("mla_decode_attention", init, kw) == (80, 52, 16, "bf16_tensor")


def test_reshape_and_cache_in_place():
    # key+value 2*3*2*4*2 B = 96 + slots 3*8 = 24 read; 96 written into the caches.
    assert w("reshape_and_cache", {}, {"shape": [3, 2, 4], "block_size": 16})[1:3] == (120, 96)


def test_gated_delta_rule_update_touches_used_state_rows_only():
    base = {"token_count": 1, "num_v_heads": 1, "value_dim": 2, "num_q_heads": 1, "key_dim": 2, "batch_size": 1}
    one = w("gated_delta_rule_update", {"use_qk_l2norm": False}, dict(base, state_count=1))
    many = w("gated_delta_rule_update", {"use_qk_l2norm": False}, dict(base, state_count=50))
    assert one == many
    # 5KV + 2(K-1)V + 2V + K + 2 = 20 + 4 + 4 + 2 + 2 = 32 FLOPs.
    assert one[0] == 32


def test_every_operator_declares_a_known_path_and_smoke_shapes():
    for op in OPERATORS:
        spec = registry.spec(op)
        assert spec.smoke, op
        for smoke in spec.smoke:
            r = registry.work(op, smoke.init, smoke.inputs)
            assert r["path"] in PATHS
            assert r["bytes_read"] > 0 and r["bytes_written"] > 0 and r["flops"] >= 0
        assert set(spec.inplace) <= set(spec.outputs), op


def test_bad_kwargs_name_the_operator():
    with pytest.raises(ValueError, match="rms_norm"):
        registry.work("rms_norm", {"eps": 1e-6}, {"token_count": 2})
    with pytest.raises(KeyError, match="no_such_op"):
        registry.work("no_such_op", {}, {})
    assert not registry.is_benchmarkable("other") and registry.is_benchmarkable("fused_moe")
