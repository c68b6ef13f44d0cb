"""Admission of a mined problem into a release: its time must be its operator's work.

A problem is the (operator, shape) that classification gave a set of kernels. It stands for that operator's
work only if almost all of its GPU time runs in kernels whose role fits the operator: a cast, copy, fill or
collective kernel (and a reduction or transpose inside a GEMM or an attention) is no GEMM's or attention's
compute, whatever op launched it (ingest/taxonomy.yaml `roles`). Classification already keeps such kernels
out; this check refuses, by name, any selected problem where they are still more than a sliver, so that no
weight ever rests on work the problem's reference does not do."""

from __future__ import annotations

import json
from dataclasses import dataclass

import polars as pl

from ingest.taxonomy import load_taxonomy
from release.bundle import ReleaseError

# A problem is admitted with at least this share of its GPU time in kernels whose role fits its operator.
# "Almost all": a GEMM's own workspace memset or a stray fill of an attention op is allowed, a cast is not.
MIN_OWN_WORK_SHARE = 0.98


@dataclass(frozen=True)
class Refusal:
    """A selected problem that is not its operator's work: how much of its time is, and in which roles the rest runs."""

    operator: str
    shape: str
    own_share: float
    foreign_ns: dict[str, int]  # role -> GPU ns of its kernels in this problem

    def message(self) -> str:
        roles = ", ".join(f"{role} {ns / 1e6:.3f} ms" for role, ns in sorted(self.foreign_ns.items()))
        return (f"problem {self.operator} {self.shape}: only {self.own_share:.1%} of its GPU time is {self.operator} "
                f"work ({roles} in other kernels; admitted from {MIN_OWN_WORK_SHARE:.0%})")


def own_work(selected: pl.DataFrame, by_kernel: pl.DataFrame | pl.LazyFrame, taxonomy=None) -> pl.DataFrame:
    """Per selected (operator, shape): gpu_ns, own_ns (time in kernels whose role fits the operator), own_share
    and `foreign` (JSON: role -> ns of the rest), from provenance rows (operator, shape, kernel, gpu_ns)."""
    tax = load_taxonomy(taxonomy)
    rows = (by_kernel.lazy().join(selected.lazy().select("operator", "shape").unique(), on=["operator", "shape"])
            .group_by("operator", "shape", "kernel").agg(pl.col("gpu_ns").sum()).collect()
            .sort("operator", "shape", "kernel"))
    out: dict[tuple[str, str], dict] = {}
    for operator, shape, kernel, ns in rows.select("operator", "shape", "kernel", "gpu_ns").rows():
        entry = out.setdefault((operator, shape), {"gpu_ns": 0, "own_ns": 0, "foreign": {}})
        entry["gpu_ns"] += ns
        role = tax.role_of(kernel or "", operator)
        if role is None:
            entry["own_ns"] += ns
        else:
            entry["foreign"][role] = entry["foreign"].get(role, 0) + ns
    return pl.DataFrame(
        [{"operator": o, "shape": s, "gpu_ns": e["gpu_ns"], "own_ns": e["own_ns"],
          "own_share": e["own_ns"] / e["gpu_ns"] if e["gpu_ns"] else 1.0,
          "foreign": json.dumps(e["foreign"], sort_keys=True)}
         for (o, s), e in sorted(out.items())],
        schema={"operator": pl.String, "shape": pl.String, "gpu_ns": pl.Int64, "own_ns": pl.Int64,
                "own_share": pl.Float64, "foreign": pl.String})


def refuse(refused: list[Refusal], source) -> None:
    """Raise ReleaseError naming the refused problems (the first three, and how many in all), if any."""
    if refused:
        more = f" (and {len(refused) - 3} more)" if len(refused) > 3 else ""
        raise ReleaseError(f"{source}: {len(refused)} selected problem(s) are not their operator's work: "
                           + "; ".join(r.message() for r in refused[:3]) + more)


def refusals(selected: pl.DataFrame, by_kernel: pl.DataFrame | pl.LazyFrame, taxonomy=None) -> list[Refusal]:
    """The selected problems refused admission (own-work share below MIN_OWN_WORK_SHARE), in (operator, shape) order."""
    shares = own_work(selected, by_kernel, taxonomy)
    return [Refusal(r["operator"], r["shape"], r["own_share"], json.loads(r["foreign"]))
            for r in shares.iter_rows(named=True) if r["own_share"] < MIN_OWN_WORK_SHARE]
