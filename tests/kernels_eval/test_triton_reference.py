"""The Triton reference submission (examples/submissions/triton_reference) on CPU: every operator file, on its
registry smoke shapes plus a few edge shapes, matches the torch reference within the spec's tolerance on
several seeds, writes every output element, leaves inputs outside its in-place contract untouched, and
does its work in its own @triton.jit kernels (no aten compute op dispatched, a kernel of the file launched).

Runs under Triton's CPU interpreter (TRITON_INTERPRET=1, set before triton is imported) with the
evaluator's own interpreter shims (kernels_eval.harness.worker._patch_interpreter: autotuner without a
GPU, round-to-nearest-even fp32->bf16) plus two shims for interpreter bugs that GPUs do not have
(research/kernels.md section 6): fp32->fp8e4m3 casts that mis-round when the rounding carries into the
exponent (triton issue #8322) and `tl.dot` on bf16 tiles, which runs on the raw uint16 bits (issue #11584).
With those, the catalogue's own dtypes (bf16, fp16, fp8) are tested; no dtype is swapped for fp32.
Timing and final correctness on the catalogue's shapes belong to the GPU (benchmarks/triton_reference_gpu.py).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

os.environ["TRITON_INTERPRET"] = "1"  # @triton.jit reads this when the candidate files are imported

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton", reason="triton is not installed in this environment")

from kernels_eval import registry  # noqa: E402
from kernels_eval.harness.adoption import compute_ops  # noqa: E402
from kernels_eval.harness.compare import compare_outputs, named_outputs, unchanged_inputs  # noqa: E402

SUBMISSION = Path(__file__).resolve().parents[2] / "examples" / "submissions" / "triton_reference"
SEEDS = (0, 1, 2)

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
    "reshape_and_cache": [({}, {"shape": [9, 2, 32], "block_size": 4, "padded_tokens": 3})],
    "moe_topk_gating_softmax": [({"top_k": 8}, {"token_count": 4, "num_experts": 100}),
                                ({"top_k": 8, "num_expert_groups": 8, "topk_group": 4},
                                 {"token_count": 4, "num_experts": 96})],
    "gemm": [({"scaling": "none"}, {"m": 37, "n": 70, "k": 100, "dtype": "fp16", "scaling": "none"})],
    "linear_sigmoid_mul": [({}, {"token_count": 37, "hidden_size": 200, "out_features": 70})],
}


def _operators() -> list[str]:
    known = set(registry.operator_names())
    return sorted(p.stem for p in SUBMISSION.glob("*.py") if p.stem in known)


def _cases() -> list:
    cases = []
    for op in _operators():
        problems = [(s.init, s.inputs) for s in registry.spec(op).smoke] + EXTRA.get(op, [])
        cases += [pytest.param(op, init, inputs, id=f"{op}-{i}") for i, (init, inputs) in enumerate(problems)]
    return cases


def _patch_fp8_cast(interpreter, tl, np):
    original = interpreter.InterpreterBuilder.create_fp_to_fp

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.float8e4nv:
            a = torch.from_numpy(np.ascontiguousarray(src.data, dtype=np.float32))
            return interpreter.TensorHandle(a.to(torch.float8_e4m3fn).view(torch.uint8).numpy(), dst_type.scalar)
        return original(self, src, dst_type, rounding_mode)

    interpreter.InterpreterBuilder.create_fp_to_fp = create_fp_to_fp


def _patch_bf16_dot(interpreter, tl, np):
    original = interpreter.InterpreterBuilder.create_dot

    def widen(h):
        if h.dtype.scalar != tl.bfloat16:
            return h
        bits = np.ascontiguousarray(h.data).view(np.uint16).astype(np.uint32) << 16
        return interpreter.TensorHandle(bits.view(np.float32), tl.float32)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return original(self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)

    interpreter.InterpreterBuilder.create_dot = create_dot


@pytest.fixture(scope="module")
def interpreter_shims():
    """The evaluator's interpreter shims plus the fp8-cast and bf16-dot fixes, undone after the module."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    from kernels_eval.harness.worker import LaunchLog, _patch_interpreter

    saved = {(interpreter.InterpreterBuilder, n): getattr(interpreter.InterpreterBuilder, n)
             for n in ("cast_impl", "create_fp_to_fp", "create_dot")}
    saved[(Autotuner, "do_bench")] = Autotuner.__dict__.get("do_bench")
    saved[(JITFunction, "run")] = JITFunction.run
    saved[(interpreter.InterpretedFunction, "run")] = interpreter.InterpretedFunction.run
    _patch_interpreter()
    _patch_fp8_cast(interpreter, tl, np)
    _patch_bf16_dot(interpreter, tl, np)
    logs = {}

    def log_for(path: Path):
        if path not in logs:
            logs[path] = LaunchLog(str(path))
            logs[path].install()
        return logs[path]

    yield log_for
    for (cls, name), value in saved.items():
        if value is None:
            delattr(cls, name)
        else:
            setattr(cls, name, value)


_MODULES: dict = {}


def _candidate(op: str):
    if op not in _MODULES:
        spec = importlib.util.spec_from_file_location(f"triton_reference_{op}", SUBMISSION / f"{op}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _MODULES[op] = module
    return _MODULES[op]


def test_submission_covers_the_memory_bound_operators():
    done = set(_operators())
    assert {"rms_norm", "fused_add_rms_norm", "silu_and_mul", "l2_norm", "layer_norm", "gated_rms_norm",
            "fused_qk_rmsnorm", "fp8_dynamic_per_token_quant", "per_token_group_quant_fp8",
            "fused_rmsnorm_quant", "moe_sum_reduce", "reshape_and_cache", "moe_topk_gating_softmax",
            "linear_sigmoid_mul", "gemm"} <= done


@pytest.mark.parametrize(("op", "init", "inputs"), _cases())
def test_matches_reference_on_cpu(op, init, inputs, interpreter_shims):
    from kernels_eval.harness.worker import _audit_mode

    spec = registry.spec(op)
    reference = registry.load_reference(op)
    path = SUBMISSION / f"{op}.py"
    log = interpreter_shims(path)
    module = _candidate(op)
    for seed in SEEDS:
        g = torch.Generator().manual_seed(seed)
        given = reference.make_inputs(**inputs, device="cpu", generator=g)
        pristine = {k: v.clone() for k, v in given.items() if isinstance(v, torch.Tensor)}
        expected = named_outputs(reference.Model(**init)(**{k: v.clone() for k, v in given.items()}), spec.outputs)

        model = module.Model(**init)
        audit = _audit_mode(poison=True)  # fresh allocations are NaN/sentinel-filled: unwritten output fails
        log.active = True
        try:
            with torch.no_grad(), audit:
                got = named_outputs(model(**given), spec.outputs)
        finally:
            log.active = False
        launches = log.take()

        failures, _ = compare_outputs(got, expected, spec.tolerance, spec.order_free_outputs)
        failures += unchanged_inputs(given, pristine, set(spec.inplace.values()))
        assert not failures, f"{op} seed {seed}: {failures}"
        assert not compute_ops(audit.ops), f"{op}: torch compute ran: {compute_ops(audit.ops)}"
        assert any(x["owned"] for x in launches), f"{op}: no @triton.jit kernel of {path.name} ran"
        assert not [x for x in launches if not x["owned"]], f"{op}: foreign kernels ran: {launches}"


def test_fp8_cast_shim_rounds_like_torch(interpreter_shims):
    """The fp8 cast shim rounds like torch (so quant ops are judged on their math, not on the bug)."""
    import triton.language as tl

    @triton.jit
    def cast_kernel(x_ptr, q_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(q_ptr + offs, tl.load(x_ptr + offs).to(q_ptr.dtype.element_ty))

    x = torch.tensor([-1.968, 1.968, 0.3, 447.0, -17.5, 240.0, 1e-3, 0.0])
    q = torch.empty(8, dtype=torch.float8_e4m3fn)
    cast_kernel[(1,)](x, q, BLOCK=8)
    assert torch.equal(q.view(torch.uint8), x.to(torch.float8_e4m3fn).view(torch.uint8))
