"""The Triton reference submission (examples/submissions/triton_reference) on CPU: every operator file, on its
registry smoke shapes plus a few edge shapes, matches the torch reference within the spec's tolerance on
several seeds, writes every output element, leaves inputs outside its in-place contract untouched, and
does its work in its own @triton.jit kernels (no aten compute op dispatched, a kernel of the file launched).

The cases run in one child process under Triton's CPU interpreter: TRITON_INTERPRET=1 must be set before
triton is first imported (triton.language's own @jit helpers such as tl.sum are bound then), and other test
modules of the session import triton without it. The child applies the evaluator's interpreter shims
(kernels_eval.harness.interpreter: autotuner without a GPU, round-to-nearest-even fp32->bf16, and two for
interpreter bugs that GPUs do not have (research/kernels.md section 6): fp32->fp8e4m3 casts that mis-round
when the rounding carries into the exponent (triton issue #8322) and `tl.dot` on bf16 tiles, which runs on
the raw uint16 bits (issue #11584)). With those, the catalogue's own dtypes (bf16, fp16, fp8) are
tested; no dtype is swapped for fp32. Timing and correctness on the catalogue's shapes belong to the GPU
(benchmarks/triton_reference_gpu.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

if __name__ == "__main__":  # the child: make the repo importable without an installed package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kernels_eval import registry  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SUBMISSION = REPO / "examples" / "submissions" / "triton_reference"
SEEDS = (0, 1, 2)
MARKER = "TRITON_REFERENCE_RESULTS "
MEMORY_BOUND = {"rms_norm", "fused_add_rms_norm", "silu_and_mul", "l2_norm", "layer_norm", "gated_rms_norm",
                "fused_qk_rmsnorm", "fp8_dynamic_per_token_quant", "per_token_group_quant_fp8", "fused_rmsnorm_quant",
                "moe_sum_reduce", "reshape_and_cache", "moe_topk_gating_softmax"}
ROPE_ROUTING_ATTENTION = {"fused_qkv_rope", "mrope", "moe_align_block_size", "moe_count_and_sort", "topk_filter",
                          "causal_conv1d", "embedding", "paged_attention_decode", "unified_attention",
                          "attention_forward", "mla_decode_attention"}
MOE_AND_LINEAR_ATTENTION = {"fused_moe", "fp8_blockscale_fused_moe", "gated_delta_rule_update",
                            "chunk_delta_rule_output", "chunk_gated_delta_rule_state"}

# Shapes beyond the registry's smoke set that reach other code paths: rows wider than the register
# budget (two-pass kernels), multi-dim inputs, padded cache slots, non-power-of-two expert counts, GEMM
# edges that are not multiples of any tile.
EXTRA = {
    "rms_norm": [({"eps": 1e-6}, {"token_count": 3, "hidden_size": 20000}),
                 ({"eps": 1e-6}, {"token_count": 300, "hidden_size": 96})],
    "fused_add_rms_norm": [({"eps": 1e-6}, {"token_count": 2, "hidden_size": 17000})],
    "l2_norm": [({"hidden_size": 17000}, {"num_tokens": 2, "hidden_size": 17000})],
    "layer_norm": [({}, {"shape": [2, 17000]}), ({}, {"shape": [40, 2, 100]})],
    "gated_rms_norm": [({"eps": 1e-6, "norm_before_gate": False, "activation": "silu"},
                        {"rows": 2, "hidden_size": 17000})],
    "silu_and_mul": [({}, {"shape": [3, 2, 3000]})],
    "fp8_dynamic_per_token_quant": [({}, {"token_count": 2, "hidden_size": 17000})],
    "fused_rmsnorm_quant": [({}, {"token_count": 2, "hidden_size": 17000})],
    "reshape_and_cache": [({}, {"shape": [9, 2, 32], "block_size": 4, "padded_tokens": 3}),
                          ({}, {"shape": [37, 2, 24], "block_size": 16, "padded_tokens": 5}),
                          # two tokens a program, the last program half empty
                          ({}, {"shape": [2001, 2, 8], "block_size": 16, "padded_tokens": 7})],
    "moe_topk_gating_softmax": [({"top_k": 8}, {"token_count": 4, "num_experts": 100}),
                                ({"top_k": 8, "num_expert_groups": 8, "topk_group": 4},
                                 {"token_count": 4, "num_experts": 96})],
    "gemm": [({"scaling": "none"}, {"m": 37, "n": 70, "k": 100, "dtype": "fp16", "scaling": "none"})],
    "linear_sigmoid_mul": [({}, {"token_count": 37, "hidden_size": 200, "out_features": 70})],
    "fused_qkv_rope": [({"num_heads": 4, "num_kv_heads": 2, "head_dim": 32, "rope_dim": 16},
                        {"total_tokens": 3, "num_heads": 4, "num_kv_heads": 2, "head_dim": 32, "dtype": "bf16",
                         "with_bias": True})],
    "mrope": [({"head_size": 64, "rotary_dim": 32, "mrope_section": [4, 6, 6], "is_neox_style": False},
               {"token_count": 3, "num_query_heads": 3, "num_kv_heads": 1, "head_size": 64, "rotary_dim": 32})],
    "moe_align_block_size": [({"block_size": 16, "num_experts": 60},
                              {"token_count": 1100, "num_experts": 60, "top_k": 4})],
    "moe_count_and_sort": [({"num_experts": 60}, {"token_count": 1100, "top_k": 4, "num_experts": 60})],
    "topk_filter": [({"top_k": 50}, {"seq_len": 2, "hidden_size": 20000}),
                    ({"top_k": 5}, {"seq_len": 2, "hidden_size": 3}),
                    # k = 1000 over 17 chunks: too many keys for the split path's select, the serial kernel
                    ({"top_k": 1000}, {"seq_len": 1, "hidden_size": 69000})],
    "embedding": [({}, {"token_count": 40, "vocab_size": 100, "hidden_size": 5000, "dtype": "fp16"})],
    "causal_conv1d": [({"activation": "silu"}, {"token_count": 300, "dim": 20, "width": 4}),
                      ({"activation": None}, {"token_count": 5, "dim": 4, "width": 1}),
                      # odd T: chunks inside a row (no mask) and across row starts, the array's tail
                      ({"activation": "silu"}, {"token_count": 2001, "dim": 3, "width": 4}),
                      ({"activation": None}, {"token_count": 37, "dim": 5, "width": 3}),
                      ({"activation": None}, {"token_count": 19, "dim": 3, "width": 1}),
                      # T % 8 == 0: rows start on a vector, chunks across two rows
                      ({"activation": "silu"}, {"token_count": 200, "dim": 5, "width": 4}),
                      # width over 9: the tile kernel at T >= 8, several token blocks
                      ({"activation": "silu"}, {"token_count": 150, "dim": 3, "width": 10})],
    "paged_attention_decode": [({}, {"num_seqs": 2, "ctx_len": 300, "num_query_heads": 8, "num_kv_heads": 2,
                                     "head_size": 64, "block_size": 16, "dtype": "bf16"})],
    "unified_attention": [# 40 sequences: tiles find their sequence in the map written by a first launch
                          ({}, {"num_seqs": 40, "seq_lens": [5, 17, 33, 1, 64, 20] + list(range(2, 36)),
                                "num_query_heads": 8, "num_kv_heads": 2, "head_size": 32, "block_size": 16}),
                          ({}, {"num_seqs": 3, "seq_lens": [150, 5, 70], "query_lens": [150, 1, 3],
                                "num_query_heads": 4, "num_kv_heads": 2, "head_size": 72, "block_size": 16}),
                          # GQA groups 4, 8 and 5 packed into the tile, prefill and decode sequences mixed
                          ({}, {"num_seqs": 4, "seq_lens": [40, 9, 1, 33], "query_lens": [40, 1, 1, 5],
                                "num_query_heads": 8, "num_kv_heads": 2, "head_size": 64, "block_size": 16}),
                          ({}, {"num_seqs": 3, "seq_lens": [70, 17, 3], "query_lens": [20, 1, 3],
                                "num_query_heads": 8, "num_kv_heads": 1, "head_size": 32, "block_size": 8}),
                          ({}, {"num_seqs": 2, "seq_lens": [30, 12], "query_lens": [30, 1],
                                "num_query_heads": 10, "num_kv_heads": 2, "head_size": 32, "block_size": 16}),
                          # a head of 20: strides not multiples of 8, element-unit strides (VEC 1)
                          ({}, {"num_seqs": 2, "seq_lens": [19, 4], "query_lens": [19, 2],
                                "num_query_heads": 4, "num_kv_heads": 2, "head_size": 20, "block_size": 16})],
    "attention_forward": [({}, {"num_heads": 2, "head_dim": 72, "seq_lens": [150, 0, 70]})],
    "mla_decode_attention": [({"nhead": 20, "kv_lora_rank": 64, "qk_rope_head_dim": 16},
                              {"batch_size": 2, "ctx_len": 600, "nhead": 20, "kv_lora_rank": 64,
                               "qk_rope_head_dim": 16})],
    "block_scaled_mm": [({"group_n": 32, "group_k": 64},
                         {"m": 70, "n": 96, "k": 192, "group_n": 32, "group_k": 64}),
                        # the catalogue's 128 x 128 blocks: a 16-row tile's columns share one b scale (the one-FMA path)
                        ({"group_n": 128, "group_k": 128},
                         {"m": 9, "n": 256, "k": 384, "group_n": 128, "group_k": 128})],
    "fused_moe": [({"num_experts": 6, "intermediate_size": 70, "top_k": 3},
                   {"token_count": 37, "hidden_size": 200, "intermediate_size": 70, "num_experts": 6, "top_k": 3}),
                  ({"num_experts": 4, "intermediate_size": 48, "top_k": 1},
                   {"token_count": 70, "hidden_size": 96, "intermediate_size": 48, "num_experts": 4, "top_k": 1})],
    "fp8_blockscale_fused_moe": [({"num_experts": 5, "intermediate_size": 256, "top_k": 3},
                                  {"token_count": 7, "hidden_size": 384, "intermediate_size": 256, "num_experts": 5,
                                   "top_k": 3}),
                                 ({"num_experts": 3, "intermediate_size": 128, "top_k": 1},
                                  {"token_count": 5, "hidden_size": 256, "intermediate_size": 128, "num_experts": 3,
                                   "top_k": 1})],
    "gated_delta_rule_update": [({"softplus_beta": 2.0, "softplus_threshold": 1.0, "use_qk_l2norm": True},
                                 {"token_count": 6, "num_v_heads": 3, "state_count": 5, "value_dim": 40,
                                  "num_q_heads": 1, "key_dim": 24, "batch_size": 3}),
                                # a long sequence, several sequences
                                ({"softplus_beta": 2.0, "softplus_threshold": 1.0, "use_qk_l2norm": True},
                                 {"token_count": 130, "num_v_heads": 3, "state_count": 5, "value_dim": 40,
                                  "num_q_heads": 1, "key_dim": 24, "batch_size": 3}),
                                # no normalisation, key and value heads of 8
                                ({"softplus_beta": 1.0, "softplus_threshold": 20.0, "use_qk_l2norm": False},
                                 {"token_count": 64, "num_v_heads": 2, "state_count": 1, "value_dim": 8,
                                  "num_q_heads": 1, "key_dim": 8, "batch_size": 1})],
    "chunk_delta_rule_output": [({"chunk_size": 12}, {"token_count": 40, "num_v_heads": 3, "value_dim": 24,
                                                      "num_q_heads": 1, "chunk_size": 12, "key_dim": 40,
                                                      "batch_size": 2})],
    "chunk_gated_delta_rule_state": [({"chunk_size": 12}, {"token_count": 40, "num_v_heads": 3, "state_count": 4,
                                                           "value_dim": 24, "key_dim": 40, "num_k_heads": 1,
                                                           "batch_size": 2})],
}


def _operators() -> list[str]:
    known = set(registry.operator_names())
    return sorted(p.stem for p in SUBMISSION.glob("*.py") if p.stem in known)


def _cases() -> list[tuple[str, str, dict, dict]]:
    """(case id, operator, init kwargs, input kwargs) of every problem the child checks."""
    cases = []
    for op in _operators():
        problems = [(s.init, s.inputs) for s in registry.spec(op).smoke] + EXTRA.get(op, [])
        cases += [(f"{op}-{i}", op, init, inputs) for i, (init, inputs) in enumerate(problems)]
    return cases


@pytest.fixture(scope="module")
def results() -> dict:
    """{case id: failures} from one child process running every case under the interpreter."""
    for module in ("torch", "triton", "numpy"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed in this environment")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, __file__], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARKER)]
    assert proc.returncode == 0 and lines, f"child failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(lines[-1][len(MARKER):])


def test_submission_covers_the_memory_bound_operators():
    assert MEMORY_BOUND | {"linear_sigmoid_mul", "gemm", "block_scaled_mm"} <= set(_operators())


def test_submission_covers_the_rope_routing_sampling_and_attention_operators():
    assert ROPE_ROUTING_ATTENTION <= set(_operators())


def test_submission_covers_the_moe_and_linear_attention_operators():
    assert MOE_AND_LINEAR_ATTENTION <= set(_operators())


@pytest.mark.parametrize("case_id", [c[0] for c in _cases()])
def test_matches_reference_on_cpu(case_id, results):
    assert case_id in results, f"{case_id} was not run"
    assert results[case_id] == [], f"{case_id}: {results[case_id]}"


def test_fp8_cast_shim_rounds_like_torch(results):
    """The fp8 shim rounds like torch, so the quant operators are judged on their math, not on the bug."""
    assert results["fp8_cast_shim"] == []


# ---- the child process (python tests/kernels_eval/test_triton_reference.py) -----------------------------

def _check_case(op: str, init: dict, inputs: dict, log_for, modules: dict) -> list[str]:
    import torch

    from kernels_eval.harness.adoption import compute_ops
    from kernels_eval.harness.compare import compare_outputs, named_outputs, unchanged_inputs
    from kernels_eval.harness import observe
    from kernels_eval.harness.adoption import ALLOWED_ATEN_OPS
    from kernels_eval.harness.worker import POISON_OPS

    spec = registry.spec(op)
    reference = registry.load_reference(op)
    path = SUBMISSION / f"{op}.py"
    log = log_for(path)
    if op not in modules:
        mod_spec = importlib.util.spec_from_file_location(f"triton_reference_{op}", path)
        modules[op] = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(modules[op])
    for seed in SEEDS:
        given = reference.make_inputs(**inputs, device="cpu", generator=torch.Generator().manual_seed(seed))
        pristine = {k: v.clone() for k, v in given.items() if isinstance(v, torch.Tensor)}
        expected = named_outputs(reference.Model(**init)(**{k: v.clone() for k, v in given.items()}), spec.outputs)
        model = modules[op].Model(**init)
        # the worker's own dispatch mode: fresh allocations are NaN/sentinel-filled, so unwritten output fails
        audit = observe.audit_mode_class(POISON_OPS, ALLOWED_ATEN_OPS)(observe.Channel(-1), poison=True)
        log.active = True
        try:
            with torch.no_grad(), audit:
                got = named_outputs(model(**given), spec.outputs)
        finally:
            log.active = False
        launches = log.take()
        failures, _ = compare_outputs(got, expected, spec.tolerance, spec.order_free_outputs)
        failures += unchanged_inputs(given, pristine, set(spec.inplace.values()))
        if compute_ops(audit.ops):
            failures.append(f"torch compute ran: {compute_ops(audit.ops)}")
        if not any(x["owned"] for x in launches):
            failures.append(f"no @triton.jit kernel of {path.name} ran")
        failures += [f"foreign kernel ran: {x}" for x in launches if not x["owned"]]
        if failures:
            return [f"seed {seed}: {f}" for f in failures]
    return []


def _check_fp8_shim() -> list[str]:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def cast_kernel(x_ptr, q_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(q_ptr + offs, tl.load(x_ptr + offs).to(q_ptr.dtype.element_ty))

    x = torch.tensor([-1.968, 1.968, 0.3, 447.0, -17.5, 240.0, 1e-3, 0.0])
    q = torch.empty(8, dtype=torch.float8_e4m3fn)
    cast_kernel[(1,)](x, q, BLOCK=8)
    ok = torch.equal(q.view(torch.uint8), x.to(torch.float8_e4m3fn).view(torch.uint8))
    return [] if ok else [f"fp8 cast {q.float().tolist()} != torch {x.to(torch.float8_e4m3fn).float().tolist()}"]


def _child() -> dict:
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("run with TRITON_INTERPRET=1 (set before triton is imported)")
    from kernels_eval.harness.interpreter import patch_interpreter
    from kernels_eval.harness.launch_log import LaunchLog

    patch_interpreter()
    logs: dict = {}

    def log_for(path: Path):
        if path not in logs:
            logs[path] = LaunchLog(str(path))
            logs[path].install()
        return logs[path]

    out, modules = {}, {}
    for case_id, op, init, inputs in _cases():
        try:
            out[case_id] = _check_case(op, init, inputs, log_for, modules)
        except Exception as exc:  # noqa: BLE001 - a crash is that case's failure, reported by the parent
            out[case_id] = [f"{type(exc).__name__}: {exc}"[:2000]]
    out["fp8_cast_shim"] = _check_fp8_shim()
    return out


if __name__ == "__main__":
    print(MARKER + json.dumps(_child()), flush=True)
