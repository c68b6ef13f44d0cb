"""DSL adoption: is the candidate's work done by the submission's own @triton.jit kernels? (no torch import)

GPU: the share of profiled GPU time spent in kernels named after @triton.jit functions that the submission
file defines and that were launched during the call. CPU (Triton interpreter, no GPU kernels): which of the
submission's @triton.jit functions ran and which aten compute ops were dispatched during the call.
"""

from __future__ import annotations

NATIVE_SHARE = 0.95

# aten ops that allocate, reshape, move or fill memory without computing the result; everything else
# dispatched inside the candidate's call is a PyTorch compute fallback. The Triton interpreter's own
# argument copies show up as empty/new_empty/set_/copy_.
ALLOWED_ATEN_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "new_zeros", "zero_", "fill_", "full", "full_like", "new_full", "ones", "ones_like", "new_ones",
    "set_", "copy_", "clone", "contiguous", "_to_copy", "to", "lift_fresh", "lift_fresh_copy", "detach",
    "alias", "view", "_unsafe_view", "reshape", "as_strided", "permute", "transpose", "t", "expand",
    "squeeze", "unsqueeze", "flatten", "select", "slice", "narrow", "split", "split_with_sizes", "chunk",
    "unbind", "view_as", "expand_as", "unflatten", "movedim", "arange", "_local_scalar_dense", "item",
    "resize_", "record_stream", "is_same_size", "_has_compatible_shallow_copy_type", "sym_size",
    "sym_stride", "sym_numel", "sym_storage_offset", "_reshape_alias", "view_as_real", "view_as_complex",
    "scalar_tensor", "_scalar_tensor", "empty_permuted",
})

# Kernels that are memory plumbing rather than compute; they still count as non-native GPU time.
PLUMBING_KERNEL_PREFIXES = ("[CUDA memset", "[CUDA memcpy", "Memset", "Memcpy")


def compute_ops(aten_ops: dict[str, int]) -> dict[str, int]:
    """The dispatched ops that compute: custom ops (`ns::name`) and aten ops outside the allowlist."""
    return {op: n for op, n in sorted(aten_ops.items()) if op not in ALLOWED_ATEN_OPS}


def _op_label(op: str, n: int) -> str:
    return f"{op if '::' in op else 'aten::' + op} x{n}"


def owned_names(launches: list[dict]) -> set[str]:
    """Names of the launched @triton.jit functions defined in the submission file."""
    return {launch["name"] for launch in launches if launch.get("owned")}


def foreign_launches(launches: list[dict]) -> list[str]:
    """`triton:<name> (<file>)` for launched @triton.jit functions defined elsewhere (Inductor, libraries)."""
    return sorted({f"triton:{x['name']} ({x.get('file', '?')})" for x in launches if not x.get("owned")})


def cpu_adoption(launches: list[dict], aten_ops: dict[str, int], observed: list[str] = ()) -> dict:
    """native, fallbacks and reason from CPU (interpreter) calls' launches, dispatched aten ops and the
    worker's channel records of host escapes and threads (`observed`: "host compute: numpy via ...")."""
    fallbacks = [_op_label(op, n) for op, n in compute_ops(aten_ops).items()] + foreign_launches(launches)
    owned = owned_names(launches)
    if not owned:
        reason = "no @triton.jit kernel of the submission ran"
    elif observed:
        reason = "the submission computed on the host or in threads beside its kernels"
    elif fallbacks:
        reason = "PyTorch/library compute ran beside the submission's kernels"
    else:
        reason = None
    return {"native": reason is None, "native_fraction": None, "fallbacks": list(observed) + fallbacks,
            "reason": reason, "kernels": sorted(owned)}


# Device-to-host copies as the profiler names them (CUPTI's activity name, and the legacy spelling).
HOST_READ_PREFIXES = ("Memcpy DtoH", "[CUDA memcpy Device -> Host]")


def gpu_adoption(kernel_us: dict[str, float], launches: list[dict], aten_ops: dict[str, int],
                 host_reads_exempt: bool = False) -> dict:
    """native (>= 95% of GPU time in the submission's own kernels), that share, and the fallbacks by name.

    `host_reads_exempt`: the operator's outputs have a data-dependent length (moe_align_block_size), so its
    contract needs one device-to-host read of that length before the outputs can be allocated; those copies
    are left out of the share (named as exempt). Results computed on the host do not gain from this: the
    judge requires outputs on the reference's device, and host-to-device copies still count."""
    if host_reads_exempt:
        exempt = {k: v for k, v in kernel_us.items() if k.startswith(HOST_READ_PREFIXES)}
        kernel_us = {k: v for k, v in kernel_us.items() if k not in exempt}
    else:
        exempt = {}
    owned = owned_names(launches)
    total = sum(kernel_us.values())
    native_us = sum(us for name, us in kernel_us.items() if name in owned)
    share = native_us / total if total > 0 else 0.0
    others = sorted(((us, name) for name, us in kernel_us.items() if name not in owned), reverse=True)
    fallbacks = [f"kernel:{name} {us / max(total, 1e-12):.1%}" for us, name in others]
    fallbacks += [_op_label(op, n) for op, n in compute_ops(aten_ops).items()]
    fallbacks += foreign_launches(launches)
    fallbacks += [f"exempt:{name} {us:.1f} us (the output length read by the host)" for name, us in exempt.items()]
    if not owned:
        reason = "no @triton.jit kernel of the submission ran"
    elif total <= 0:
        reason = "no GPU kernel ran during the call"
    elif share < NATIVE_SHARE:
        reason = f"only {share:.1%} of GPU time in the submission's @triton.jit kernels (needs {NATIVE_SHARE:.0%})"
    else:
        reason = None
    return {"native": reason is None, "native_fraction": share, "fallbacks": fallbacks, "reason": reason,
            "kernels": sorted(owned)}
