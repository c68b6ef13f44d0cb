"""The autotuning protocol's steps of an operator's judge (issue 39, docs/reproducibility.md): record the call's
program with chosen configurations pinned, and decide (or load) the protocol's choice for a shape, each
configuration timed by the trusted replay. Mixed into operator_judge.OperatorJudge, whose worker, replay and
reference these use."""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from pathlib import Path

from kernels_eval.harness.judge import Recorded
from kernels_eval.harness.submission import file_sha256
from kernels_eval.harness import autotune_protocol as protocol
from kernels_eval.harness.autotune_sweep import sweep
from kernels_eval.harness.triton_cache import triton_version
from kernels_eval.harness.worker_commands import Sweep


class AutotuneSteps:
    """The protocol's steps; `self` is an operator_judge.OperatorJudge."""

    def _record_program(self, model, shape: tuple[dict, dict], pins: dict) -> Recorded | None:
        """The call's launch program recorded by one judged worker call with `pins` (kernel -> key -> config
        index) pinned; None when the call fails or its outputs are wrong."""
        init_kwargs, input_kwargs = shape
        self._ensure_init(init_kwargs)
        reply, failures, _ = self._judged_call(model, init_kwargs, input_kwargs, poison=True, record=True, pins=pins)
        if not reply.ok or failures or self.tamper:
            return None
        return Recorded(reply.program, self.last_seed)

    def _autotune(self, model, pending: dict):
        """The autotuning protocol's record for this file on the pending shape: the kept one, else decided now
        (harness/autotune_sweep.py: discovery in this judge's worker, each configuration recorded there and timed
        by the trusted replay with the protocol's budget) and kept."""
        from dataclasses import replace as with_values

        init_kwargs, input_kwargs = shape = pending["shape"]
        store, keys = _store_and_keys(self.config, self.file, shape)
        record = store.load(**keys)
        if record is not None:
            return record
        budget = self.config.autotune_budget
        if b"autotune" not in Path(self.file).read_bytes():
            # nothing in the file can reach Triton's autotuner by name: no sweep, and no worker started for one in a
            # timing phase that otherwise runs no candidate process (14 of the Triton reference's 31 files)
            return protocol.Record(kernels=[], budget=budget, **keys)
        self._ensure_init(init_kwargs)
        # every configuration is timed on the same two fresh input sets, whose reference is computed once; a
        # timing judges its calls' outputs (and inputs left unchanged) on them, so no other replayed run is needed
        seeds, expected = [secrets.randbits(62) for _ in range(2)], {}

        def reference(seed: int):
            if seed not in expected:
                expected[seed] = self._expected(model, input_kwargs, seed)
            return expected[seed]

        def replay(program: Recorded):
            outcome = self.replayer.reproduce(self.operator, self.spec, reference, input_kwargs, [program], self.state,
                                              time_seeds=2, timing_seeds=seeds, check=False)  # the recording worker's
            if not outcome.native or outcome.timed_wrong or not outcome.times_s:
                return None
            return outcome.times_s, outcome.kernel_us

        began = time.monotonic()
        kept, self.replayer.config = self.replayer.config, with_values(
            self.replayer.config, timing_budget_s=budget.budget_s, timing_max_calls=budget.max_calls)
        try:
            record = sweep(lambda: self._request(Sweep(input_kwargs=input_kwargs)),
                           lambda pins: self._record_program(model, shape, pins), replay, budget, choices=store,
                           **keys)
        finally:
            self.replayer.config = kept
            expected.clear()
        store.save(record)
        self._clock("autotune", began)
        return record


def _store_and_keys(config, file: Path, shape: tuple[dict, dict]):
    """The run's ChoiceStore and the keys of the record for `file` on `shape`: Triton version, file sha256,
    hardware, and the problem named by a digest of its shape (so the same shape in two releases shares it)."""
    init_kwargs, input_kwargs = shape
    store = protocol.ChoiceStore(config.autotune_store or protocol.default_root())
    problem = "s" + hashlib.sha256((_shape_text(init_kwargs) + _shape_text(input_kwargs)).encode()).hexdigest()[:16]
    return store, {"triton": triton_version(), "file_sha256": file_sha256(file),
                   "hardware": re.sub(r"[^A-Za-z0-9._-]", "_", config.hardware or "unknown"), "problem_id": problem}


def sweeps(config, file: Path, shapes: list[tuple[dict, dict]]) -> bool:
    """Whether the autotuning protocol will sweep (and so start the operator's worker) for one of `shapes` of
    `file`: the protocol is on, on a GPU, the file names the autotuner and a shape has no kept record (an unreadable
    record counts as none here; the judge reports it)."""
    if config.autotune != "protocol" or config.device != "cuda" or b"autotune" not in Path(file).read_bytes():
        return False
    for shape in shapes:
        store, keys = _store_and_keys(config, file, shape)
        try:
            if store.load(**keys) is None:
                return True
        except protocol.ProtocolError:
            return True
    return False


def _shape_text(kwargs: dict) -> str:
    import json

    return json.dumps(kwargs, sort_keys=True, separators=(",", ":"))
