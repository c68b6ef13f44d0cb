"""The judge, run in the parent: candidate outputs against the reference's, and inputs against their
pristine copies. Returns human-readable failures (empty = pass)."""

from __future__ import annotations

# Share of rtol that the whole-output relative L1 error may reach (bf16 rounding alone gives ~rtol/10).
SYSTEMATIC_FRACTION = 0.25
CHUNK = 1 << 26  # elements compared at a time


def named_outputs(out, names: tuple[str, ...]) -> dict:
    """A reference's return value (tensor, tuple or dict) as {output name: tensor}."""
    if isinstance(out, dict):
        return {n: out[n] for n in names}
    if isinstance(out, (tuple, list)):
        return dict(zip(names, out))
    return {names[0]: out}


def compare_outputs(got: dict, expected: dict, tolerance: dict, order_free: tuple[str, ...] = (),
                    ties: dict | None = None) -> tuple[list[str], float]:
    """(failures, max abs error over float outputs) of candidate outputs against the reference's; runs on the
    reference's device, in chunks, so large outputs need no host copy and little extra memory.

    `ties` maps a selection output (top-k ids, say) to (scores, value output): the reference's score of every
    candidate index ([..., n]) and the output holding the selected scores. Where the candidate selected other
    indices than the reference, it still passes if the reference scores them within tolerance of what the
    reference selected (near-ties that fp32 rounding orders either way), with no index chosen twice."""
    failures, max_err = [], 0.0
    atol, rtol = float(tolerance.get("atol", 0.0)), float(tolerance.get("rtol", 0.0))
    ties = ties or {}
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
        if g.device.type != e.device.type:
            failures.append(f"output {name!r} is on {g.device.type}, expected {e.device.type}")
            continue
        if name in ties and not (g.is_floating_point() or e.is_floating_point()):
            scores, value_name = ties[name]
            bad = _untied_mismatches(g.detach().to(e.device), e.detach(), scores, expected[value_name], atol, rtol)
            if bad:
                failures.append(f"output {name!r}: {bad}/{e.numel()} selections differ from the reference's "
                                f"and are not near-ties (reference score beyond atol={atol:g} rtol={rtol:g}, or an "
                                "index chosen twice)")
            continue
        g, e = g.detach().to(e.device).reshape(-1), e.detach().reshape(-1)
        if name in order_free:
            g, e = g.sort().values, e.sort().values
        if not (g.is_floating_point() or e.is_floating_point()):
            bad = sum(int((g[i:i + CHUNK] != e[i:i + CHUNK]).sum()) for i in range(0, e.numel(), CHUNK))
            if bad:
                failures.append(f"output {name!r}: {bad}/{e.numel()} elements differ (exact match required)")
            continue
        s = _float_stats(g, e, atol, rtol)
        max_err = max(max_err, s["max_err"])
        if s["nonfinite"]:
            failures.append(f"output {name!r}: {s['nonfinite']}/{e.numel()} elements are NaN/Inf "
                            "(unwritten output or invalid math)")
        elif s["bad"]:
            failures.append(f"output {name!r}: {s['bad']}/{e.numel()} elements beyond atol={atol:g} rtol={rtol:g} "
                            f"(max abs err {s['max_err']:.3g})")
        # Elementwise tolerances leave room for a systematic error (a wrong constant, a dropped term) that
        # rounding never produces: the error summed over the whole output must stay well inside rtol.
        elif rtol > 0 and s["abs_sum"] > 0 and s["err_sum"] / s["abs_sum"] > rtol * SYSTEMATIC_FRACTION:
            failures.append(f"output {name!r}: relative L1 error {s['err_sum'] / s['abs_sum']:.2%} is over "
                            f"{rtol * SYSTEMATIC_FRACTION:.2%} (systematic error inside the elementwise tolerance)")
    return failures, max_err


def _untied_mismatches(g, e, scores, e_values, atol: float, rtol: float) -> int:
    """Selections of `g` that differ from `e` and are not near-ties by the reference's `scores`."""
    differ = g != e
    if not bool(differ.any()):
        return 0
    n = scores.shape[-1]
    index = g.long()
    valid = (index >= 0) & (index < n)
    picked = scores.float().gather(-1, index.clamp(0, n - 1))
    want = e_values.float()
    near = (picked - want).abs() <= atol + rtol * want.abs()
    ordered = index.sort(dim=-1).values
    repeated = (ordered[..., 1:] == ordered[..., :-1]).any(dim=-1, keepdim=True)
    return int((differ & ~(valid & near & ~repeated)).sum())


def _float_stats(g, e, atol: float, rtol: float) -> dict:
    import torch

    out = {"nonfinite": 0, "bad": 0, "max_err": 0.0, "err_sum": 0.0, "abs_sum": 0.0}
    for i in range(0, e.numel(), CHUNK):
        gf, ef = g[i:i + CHUNK].float(), e[i:i + CHUNK].float()
        finite_e = torch.isfinite(ef)
        out["nonfinite"] += int((~torch.isfinite(gf) & finite_e).sum())
        out["bad"] += int((~finite_e & ~((gf == ef) | (gf.isnan() & ef.isnan()))).sum())
        zero = torch.zeros((), dtype=gf.dtype, device=gf.device)
        diff = (gf - ef).abs().where(finite_e, zero).nan_to_num(nan=float("inf"))
        mag = ef.abs().where(finite_e, zero)
        out["bad"] += int((diff > atol + rtol * mag).sum())
        if diff.numel():
            out["max_err"] = max(out["max_err"], float(diff.max()))
        out["err_sum"] += float(diff.double().sum())
        out["abs_sum"] += float(mag.double().sum())
    return out


def unchanged_inputs(after: dict, before: dict, may_change: set[str], key: int | None = None) -> list[str]:
    """Inputs the candidate modified though the operator does not write them in place by contract. Each of
    `after` is the input as it was after the call, or its `tensor_digest` under `key` (what a worker sends:
    the inputs of a large problem are gigabytes, and the pristine copy is here to digest alike)."""
    import torch

    failures = []
    for name, b in before.items():
        if name in may_change or not isinstance(b, torch.Tensor):
            continue
        a = after.get(name)
        if a is None:
            failures.append(f"input {name!r} was not returned by the worker")
            continue
        if isinstance(a, str):
            same = key is not None and a == tensor_digest(b, key)
        else:
            a, b = a.detach().to(b.device).contiguous(), b.detach().contiguous()
            same = a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.reshape(-1).view(torch.uint8),
                                                                             b.reshape(-1).view(torch.uint8))
        if not same:
            failures.append(f"input {name!r} was modified by the call (not in place by contract)")
    return failures


DIGEST_WORDS = 1 << 23  # 64-bit words hashed at a time (64 MB of a tensor)
_MIX = (-7046029254386353131, -4658895280553007687, -7723592293110705685)  # splitmix64's constants, signed


def tensor_digest(t, key: int) -> str:
    """dtype, shape and a keyed 64-bit hash of tensor `t`'s bytes: the sum, wrapping, of each 64-bit word
    (the tail zero-padded) times an odd weight mixed from the key and the word's index. Any change of one word
    changes the sum (an odd weight is invertible mod 2**64); changes of several words that cancel need the
    weights, i.e. the key, which the parent draws fresh for each call. Integer sums wrap, so the figure does
    not depend on the order a device adds in: the worker's digest and the parent's of the same bytes agree."""
    import torch

    flat = t.detach().contiguous().reshape(-1).view(torch.uint8)
    if flat.storage_offset() % 8:
        flat = flat.clone()
    n, dev = flat.numel(), flat.device
    acc = torch.zeros((), dtype=torch.int64, device=dev)
    words = -(-n // 8)
    for start in range(0, words, DIGEST_WORDS):
        k = min(DIGEST_WORDS, words - start)
        piece = flat[start * 8:min(n, (start + k) * 8)]
        if piece.numel() != k * 8:
            padded = torch.zeros(k * 8, dtype=torch.uint8, device=dev)
            padded[:piece.numel()] = piece
            piece = padded
        z = torch.arange(start, start + k, dtype=torch.int64, device=dev) + (int(key) & ((1 << 62) - 1))
        z = z * _MIX[0]
        z = (z ^ (z >> 30)) * _MIX[1]
        z = (z ^ (z >> 27)) * _MIX[2]
        acc += (piece.view(torch.int64) * ((z ^ (z >> 31)) | 1)).sum()
    return f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}:{int(acc) & ((1 << 64) - 1):016x}"
