"""Which device judges which operator in a run over several GPUs: longest-processing-time-first (LPT) over
per-operator cost estimates. Torch-free (pyyaml for the recorded table, problem counts without it).

A run's cost of an operator is its recorded evaluation seconds per problem (eval_seconds.yaml, from a full
one-GPU run) times its problems in this run; an operator the table lacks costs the table's mean seconds per
problem. LPT takes operators by falling cost (ties by name) and gives each to the device with the least
cost so far (ties by position), so a plan depends only on its inputs; its makespan is within Graham's list
bound, total / n + (1 - 1 / n) * the largest cost.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from catalogue.registry import work

if TYPE_CHECKING:
    from kernels_eval.harness.config import Problem
    from kernels_eval.harness.release_view import ReleaseView

SECONDS_TABLE = Path(__file__).resolve().parents[1] / "eval_seconds.yaml"
DEFAULT_PER_PROBLEM_S = 1.0  # without any table: problem counts alone decide


def recorded_seconds(path: str | Path | None = None) -> dict[str, tuple[float, int]]:
    """operator → (recorded eval_s, problems it was recorded over); empty without pyyaml or the file."""
    try:
        import yaml
    except ImportError:
        return {}
    path = Path(path) if path is not None else SECONDS_TABLE
    try:
        table = yaml.safe_load(path.read_text()) or {}
    except OSError:
        return {}
    out = {}
    for op, entry in (table.get("operators") or {}).items():
        seconds, problems = float(entry["eval_s"]), int(entry["problems"])
        if seconds < 0 or problems <= 0:
            raise ValueError(f"{path}: operator {op}: eval_s must be >= 0 and problems > 0")
        out[str(op)] = (seconds, problems)
    return out


def operator_costs(counts: dict[str, int], recorded: dict[str, tuple[float, int]]) -> dict[str, float]:
    """operator → estimated seconds for its `counts[operator]` problems in this run."""
    total_s = sum(s for s, _ in recorded.values())
    total_n = sum(n for _, n in recorded.values())
    mean = total_s / total_n if total_n else DEFAULT_PER_PROBLEM_S
    return {op: n * (recorded[op][0] / recorded[op][1] if op in recorded else mean) for op, n in counts.items()}


def lpt_plan(costs: dict[str, float], n_devices: int) -> list[list[str]]:
    """Operators per device position (each list longest first): LPT over `costs`, deterministic."""
    if n_devices < 1:
        raise ValueError("a plan needs at least one device")
    shards: list[list[str]] = [[] for _ in range(n_devices)]
    loads = [0.0] * n_devices
    for op in sorted(costs, key=lambda o: (-costs[o], o)):
        i = min(range(n_devices), key=lambda d: (loads[d], d))
        shards[i].append(op)
        loads[i] += costs[op]
    return shards


def makespan(shards: list[list[str]], costs: dict[str, float]) -> float:
    """The largest estimated seconds of one device in a plan."""
    return max((sum(costs[op] for op in shard) for shard in shards), default=0.0)


def parse_devices(text: str, available: int) -> list[int]:
    """Device indices of `--devices` ('0,1,3' or 'all'); a ValueError naming what is wrong."""
    if text.strip() == "all":
        if available < 1:
            raise ValueError("--devices all: no CUDA device is visible")
        return list(range(available))
    try:
        indices = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--devices {text!r}: expected comma-separated device indices or 'all'") from None
    if not indices:
        raise ValueError("--devices: no device given")
    if len(set(indices)) != len(indices):
        raise ValueError(f"--devices {text!r}: a device is named twice")
    bad = [i for i in indices if i < 0 or i >= available]
    if bad:
        raise ValueError(f"--devices {text!r}: no device {bad[0]} ({available} visible)")
    return indices


def host_gpus(environ=None, nodes=None) -> int:
    """GPUs this host shows the evaluator, without torch: CUDA_VISIBLE_DEVICES's entries where it is set, else
    the /dev/nvidiaN nodes (what sizes the Dagster `gpu` pool; 0 on a host without NVIDIA GPUs)."""
    import glob
    import os
    import re

    environ = os.environ if environ is None else environ
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        entries = [v.strip() for v in visible.split(",") if v.strip()]
        return len(entries) if entries and entries[0] != "-1" else 0
    found = glob.glob("/dev/nvidia*") if nodes is None else nodes
    return sum(1 for n in found if re.fullmatch(r"/dev/nvidia\d+", n))


# A problem whose inputs and outputs exceed this is checked in the large lane, beside the lanes: its worker may
# need several times the interface bytes, and the parent holds its references beside it (the catalogue's largest
# on H200: 18 GB of interface, 13 problems over 4 GiB).
LANE_MAX_BYTES = 4 << 30

def _too_large_for_lanes(release: ReleaseView, chosen: list[Problem]) -> set[str]:
    """Problem ids whose interface bytes (the release's roofline rows, else the catalogue's work model) exceed
    LANE_MAX_BYTES; a problem whose size is unknown stays in the lanes."""
    sizes: dict[str, int] = {}
    for r in release.roofline_rows:
        sizes[r["problem_id"]] = max(sizes.get(r["problem_id"], 0), int(r["bytes_read"]) + int(r["bytes_written"]))
    alone = set()
    for p in chosen:
        size = sizes.get(p.problem_id)
        if size is None:
            try:
                w = work(p.operator, p.init_kwargs, p.input_kwargs)
                size = int(w["bytes_read"]) + int(w["bytes_written"])
            except Exception:  # noqa: BLE001 - a shape the work model cannot size: judged in a lane
                continue
        if size > LANE_MAX_BYTES:
            alone.add(p.problem_id)
    return alone
