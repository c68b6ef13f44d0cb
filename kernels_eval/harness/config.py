"""The evaluation run's configuration (EvalConfig) and one manifest row (Problem): what the runner, the schedule
and each operator's judge share."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from kernels_eval.harness.autotune_protocol import DEFAULT_BUDGET, Budget




@dataclass
class EvalConfig:
    """Limits and counts of one evaluation run."""

    device: str = "cpu"
    sets: int = 3  # fresh random input sets per shape for correctness
    call_timeout_s: float = 120.0
    start_timeout_s: float = 300.0
    memory_gb: float | None = None  # host-memory limit of a worker and its children (None: half the machine)
    max_processes: int = 64  # processes a worker may have running, itself included
    sandbox: bool = True  # workers run in the bubblewrap sandbox (harness/sandbox.py)
    # a worker's memory limit is counted by a cgroup (memfd and shm included); False (eval --no-memory-cgroup): by a
    # cgroup where one can be made, else by the tree's RSS and held memfd/shm files (harness/limits.py)
    memory_cgroup: bool = True
    memory_accounting: str | None = None  # "cgroup" or "process", decided once per run by `evaluate`
    candidate_files: tuple[Path, ...] = ()  # the submission's files a sandbox shows (set by `evaluate`)
    triton_cache: Path | None = None  # root of the per-file compile caches (harness/triton_cache.py); None: cold
    markers_cache: Path | None = None  # the run's compiled markers, shown read-only to workers (markers.compile_into)
    # with a persistent cache, Triton keeps (and reuses) the file's autotuning there; False: reuses, keeps none
    keep_autotuning: bool = True
    gpu_memory_fraction: float = 0.45
    # the warm-up and repetition (ms) triton.testing.do_bench defaults to in a worker, so in Triton's autotuning
    # (harness/autotune_cache.py: shorter_benchmarks); None: Triton's own (25, 100)
    autotune_bench_ms: tuple[float, float] | None = (5.0, 20.0)
    # seconds of settling and of measuring per problem, each (timing.time_calls); the timing phase is serial on
    # the device, so this is most of a full evaluation's timing (0.3 s put ~0.6 s a problem into the timed calls)
    timing_budget_s: float = 0.15
    timing_max_calls: int = 200
    # outputs of timed calls kept (reservoir-sampled after each call, so unpredictable) and judged in the parent;
    # each costs an export, a reference call and a compare, serial on the device
    timed_samples: int = 2
    sample_gb: float = 1.0  # device memory the kept outputs may take; fewer are kept beyond it
    time_reference: bool = False  # also time the PyTorch reference (t_reference_s, speedup); scores use
    # the roofline, and timing the reference cost a full timing per problem
    # full timings per problem (`eval --repeat N`): t_repeats_s keeps each one's median, t_measured_s their median
    repeat: int = 1
    # "triton" (the default until the protocol's GPU cost is measured, docs/reproducibility.md): Triton's own
    # autotuner picks in the checks; "protocol" (`eval --autotune protocol`): the evaluator's autotuning protocol
    # chooses each autotuned kernel's configuration before timing (harness/autotune_protocol.py, kept under
    # autotune_store)
    autotune: str = "triton"
    autotune_store: Path | None = None  # None: autotune_protocol.default_root()
    autotune_budget: Budget = DEFAULT_BUDGET
    run: int = 0
    device_index: int | None = None  # the CUDA device of this worker and its references (`evaluate(devices=)`)
    hardware: str | None = None
    keep_logs: Path | None = None
    extra: dict = field(default_factory=dict)



class Problem:
    """One manifest row with decoded kwargs."""

    def __init__(self, row: dict) -> None:
        self.problem_id = row["problem_id"]
        self.operator = row["operator"]
        self.init_kwargs = json.loads(row["init_kwargs"])
        self.input_kwargs = json.loads(row["input_kwargs"])
