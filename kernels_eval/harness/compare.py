"""The judge, run in the parent: candidate outputs against the reference's, and inputs against their
pristine copies. Returns human-readable failures (empty = pass)."""

from __future__ import annotations

# Share of rtol that the whole-output relative L1 error may reach (bf16 rounding alone gives ~rtol/10).
SYSTEMATIC_FRACTION = 0.25


def named_outputs(out, names: tuple[str, ...]) -> dict:
    """A reference's return value (tensor, tuple or dict) as {output name: tensor}."""
    if isinstance(out, dict):
        return {n: out[n] for n in names}
    if isinstance(out, (tuple, list)):
        return dict(zip(names, out))
    return {names[0]: out}


def compare_outputs(got: dict, expected: dict, tolerance: dict, order_free: tuple[str, ...] = ()) -> tuple[list[str], float]:
    """(failures, max abs error over float outputs) of candidate outputs against the reference's."""
    import torch

    failures, max_err = [], 0.0
    atol, rtol = float(tolerance.get("atol", 0.0)), float(tolerance.get("rtol", 0.0))
    for name, e in expected.items():
        g = got.get(name)
        if g is None:
            failures.append(f"output {name!r} missing")
            continue
        if tuple(g.shape) != tuple(e.shape):
            failures.append(f"output {name!r} has shape {tuple(g.shape)}, expected {tuple(e.shape)}")
            continue
        if g.dtype != e.dtype:
            failures.append(f"output {name!r} has dtype {g.dtype}, expected {e.dtype}")
            continue
        g, e = g.detach().to("cpu"), e.detach().to("cpu")
        if name in order_free:
            g, e = g.flatten().sort().values, e.flatten().sort().values
        if not (g.is_floating_point() or e.is_floating_point()):
            bad = int((g != e).sum())
            if bad:
                failures.append(f"output {name!r}: {bad}/{e.numel()} elements differ (exact match required)")
            continue
        gf, ef = g.float(), e.float()
        finite_e = torch.isfinite(ef)
        nonfinite = int((~torch.isfinite(gf) & finite_e).sum())
        if nonfinite:
            failures.append(f"output {name!r}: {nonfinite}/{e.numel()} elements are NaN/Inf "
                            "(unwritten output or invalid math)")
            continue
        mismatch_special = int((~finite_e & ~((gf == ef) | (gf.isnan() & ef.isnan()))).sum())
        diff = (gf - ef).abs().where(finite_e, torch.zeros((), dtype=gf.dtype))
        err = float(diff.max()) if diff.numel() else 0.0
        max_err = max(max_err, err)
        bad = int((diff > atol + rtol * ef.abs().where(finite_e, torch.zeros(()))).sum()) + mismatch_special
        if bad:
            failures.append(f"output {name!r}: {bad}/{e.numel()} elements beyond atol={atol:g} rtol={rtol:g} "
                            f"(max abs err {err:.3g})")
            continue
        # Elementwise tolerances leave room for a systematic error (a wrong constant, a dropped term) that
        # rounding never produces: the error summed over the whole output must stay well inside rtol.
        scale = float(ef.abs().where(finite_e, torch.zeros(())).sum())
        rel_l1 = float(diff.sum()) / scale if scale > 0 else 0.0
        if rtol > 0 and rel_l1 > rtol * SYSTEMATIC_FRACTION:
            failures.append(f"output {name!r}: relative L1 error {rel_l1:.2%} is over {rtol * SYSTEMATIC_FRACTION:.2%} "
                            "(systematic error inside the elementwise tolerance)")
    return failures, max_err


def unchanged_inputs(after: dict, before: dict, may_change: set[str]) -> list[str]:
    """Inputs the candidate modified though the operator does not write them in place by contract."""
    import torch

    failures = []
    for name, b in before.items():
        if name in may_change or not isinstance(b, torch.Tensor):
            continue
        a = after.get(name)
        if a is None:
            failures.append(f"input {name!r} was not returned by the worker")
            continue
        a, b = a.detach().to("cpu").contiguous(), b.detach().to("cpu").contiguous()
        if a.shape != b.shape or a.dtype != b.dtype or not torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)):
            failures.append(f"input {name!r} was modified by the call (not in place by contract)")
    return failures
