"""The evaluator's autotuning protocol (harness/autotune_protocol.py): the choice rule, the budget, the record and
its store; and the worker's pinning of a chosen configuration (harness/autotune_pins.py) on a real
`triton.autotune` kernel under Triton's interpreter."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from kernels_eval.harness.autotune_protocol import (
    Budget,
    ChoiceStore,
    KernelChoice,
    ProtocolError,
    Record,
    choose,
    covers,
    decide,
    parse_record,
    row_text,
    survivors,
)

ROOT = Path(__file__).resolve().parents[2]
SHA = "ab" * 32


def test_the_fastest_wins_when_no_other_is_within_the_band():
    chosen, figures = choose([0, 1, 2], {0: [3.0, 3.1, 2.9], 1: [2.0, 2.2, 2.1], 2: [2.5, 2.5, 2.5]}, 0.02)
    assert chosen == 1
    assert figures == {0: 3.0, 1: 2.1, 2: 2.5}  # medians of the rounds, by hand


def test_within_the_band_the_first_in_the_autotuners_order_wins():
    # index 4 is fastest (1.00); index 7 is 1.5% slower and comes first in order: it is chosen
    rounds = {7: [1.015, 1.015, 1.015], 4: [1.0, 1.0, 1.0], 2: [1.021, 1.021, 1.021]}
    assert choose([7, 4, 2], rounds, 0.02)[0] == 7
    assert choose([2, 7, 4], rounds, 0.02)[0] == 7  # 2 is 2.1% slower: outside the band
    assert choose([2, 7, 4], rounds, 0.0)[0] == 4


def test_a_configuration_missing_a_round_or_with_a_zero_time_is_not_eligible():
    rounds = {0: [1.0, 0.0, 1.0], 1: [5.0, 5.0], 2: [2.0, 2.0, 2.0]}
    chosen, figures = choose([0, 1, 2], rounds, 0.02)
    assert set(figures) == {1, 2} and chosen == 2
    with pytest.raises(ProtocolError, match="no configuration was measured"):
        choose([0, 1], {0: [], 1: [0.0]}, 0.02)
    with pytest.raises(ProtocolError, match="kernel k at key"):
        decide(KernelChoice(kernel="k", key="(1,)", indices=[0], configs=["c0"]), 0.02)


def test_the_rule_on_random_figures_matches_its_statement():
    """Independent statement: the chosen figure is within the band of the fastest, and every configuration before
    it in order is outside the band (so two runs that agree on which configurations are within the band agree on
    the choice)."""
    rng = random.Random(7)
    for _ in range(500):
        n = rng.randint(1, 12)
        order = rng.sample(range(40), n)
        rounds = {i: [rng.uniform(1.0, 1.1) for _ in range(3)] for i in order}
        band = rng.choice([0.0, 0.01, 0.02, 0.05])
        chosen, _ = choose(order, rounds, band)
        med = {i: sorted(v)[1] for i, v in rounds.items()}
        best = min(med.values())
        assert med[chosen] <= best * (1 + band)
        assert all(med[i] > best * (1 + band) for i in order[:order.index(chosen)])


def test_budget_is_validated():
    # its cost is estimated by benchmarks/autotune_protocol_cost.py from recorded step times
    for bad in ({"rounds": 0}, {"noise_band": 1.0}, {"budget_s": 0}, {"min_calls": 60, "max_calls": 50},
                {"noise_band": 0.05, "drop_above": 0.04}):
        with pytest.raises(ProtocolError, match="autotuning budget"):
            Budget(**bad)


def test_after_the_first_round_only_configurations_within_drop_above_of_its_fastest_go_on():
    first = {3: 10.0, 0: 12.4, 5: 12.6, 1: 0.0, 7: 12.5}  # 1: no positive time; 6 not measured at all
    assert survivors([0, 1, 3, 5, 6, 7], first, 0.25) == [0, 3, 7]  # 12.5 = 10 x 1.25 is within
    assert survivors([5, 3], first, 0.25) == [3]  # one left: the kernel is decided after one round
    assert survivors([5, 3], first, 0.30) == [5, 3]  # the order is the autotuner's
    assert survivors([1, 6], first, 0.25) == []


def _record(problem="p0123", chosen=(1, 0)) -> Record:
    a = KernelChoice(kernel="gemm_kernel", key="(64, 64, 'torch.bfloat16')", indices=[0, 1, 3],
                     configs=["BLOCK: 16", "BLOCK: 32", "BLOCK: 128"], rounds_s={0: [2.0, 2.0], 1: [1.0, 1.1],
                                                                               3: [1.5, 1.5]})
    b = KernelChoice(kernel="sum_kernel", key="(8,)", indices=[0, 2], configs=["W: 1", "W: 4"],
                     rounds_s={0: [0.5, 0.5], 2: [0.6, 0.6]})
    for k in (a, b):
        decide(k, 0.02)
    assert (a.chosen, b.chosen) == chosen
    return Record(file_sha256=SHA, problem_id=problem, hardware="H200", triton="3.6.0", kernels=[a, b], sweep_s=1.5)


def test_record_round_trips_through_json_and_gives_pins_and_the_row_text():
    record = _record()
    back = parse_record(record.as_json())
    assert back == record
    assert back.pins() == {"gemm_kernel": {"(64, 64, 'torch.bfloat16')": 1}, "sum_kernel": {"(8,)": 0}}
    assert json.loads(row_text(record)) == [["gemm_kernel", "(64, 64, 'torch.bfloat16')", 1, "BLOCK: 32"],
                                            ["sum_kernel", "(8,)", 0, "W: 1"]]
    assert row_text(None) is None


def test_a_malformed_record_is_one_error_naming_the_file():
    good = json.loads(_record().as_json())
    cases = [("not json", "malformed"), (json.dumps({**good, "protocol": 0}), "not an autotuning record"),
             (json.dumps({**good, "kernels": [{**good["kernels"][0], "chosen": 2}]}), "chosen index 2 was not timed"),
             (json.dumps({**good, "kernels": [{**good["kernels"][0], "configs": ["x"]}]}), "do not pair up"),
             (json.dumps({k: v for k, v in good.items() if k != "hardware"}), "malformed")]
    for text, why in cases:
        with pytest.raises(ProtocolError, match=why) as exc:
            parse_record(text, "/store/x.json")
        assert str(exc.value).startswith("/store/x.json: ")


def test_the_store_keeps_one_choice_per_file_problem_hardware_and_triton(tmp_path):
    store = ChoiceStore(tmp_path)
    assert store.load("3.6.0", SHA, "H200", "p0123") is None
    path = store.save(_record())
    assert path == tmp_path / "triton-3.6.0" / SHA / "H200" / "p0123.json"
    assert store.load("3.6.0", SHA, "H200", "p0123") == _record()
    for other in (("3.5.0", SHA, "H200", "p0123"), ("3.6.0", "cd" * 32, "H200", "p0123"),
                  ("3.6.0", SHA, "H100", "p0123"), ("3.6.0", SHA, "H200", "p9")):
        assert store.load(*other) is None
    store.save(_record())  # saved again: replaced, no temporary left behind
    assert sorted(p.name for p in path.parent.iterdir()) == ["p0123.json"]
    # a record copied under another problem's name is refused, naming the file
    (path.parent / "p9.json").write_text(path.read_text())
    with pytest.raises(ProtocolError, match=r"p9\.json: the record inside is for another"):
        store.load("3.6.0", SHA, "H200", "p9")


def test_the_store_keeps_one_choice_per_kernel_and_tuning_key_naming_the_problem_that_made_it(tmp_path):
    store = ChoiceStore(tmp_path)
    record = _record("p0123")
    gemm = record.kernels[0]
    assert store.load_choice("3.6.0", SHA, "H200", gemm.kernel, gemm.key) is None
    path = store.save_choice(record, gemm)
    assert path.parent == store.path("3.6.0", SHA, "H200", "p0123").parent / "keys"
    kept = store.load_choice("3.6.0", SHA, "H200", gemm.kernel, gemm.key)
    assert (kept.chosen, kept.configs, kept.rounds_s, kept.decided_by) == (1, gemm.configs, gemm.rounds_s, "p0123")
    for other in (("3.6.0", SHA, "H100", gemm.kernel, gemm.key), ("3.6.0", "cd" * 32, "H200", gemm.kernel, gemm.key),
                  ("3.6.0", SHA, "H200", "sum_kernel", gemm.key), ("3.6.0", SHA, "H200", gemm.kernel, "(65,)")):
        assert store.load_choice(*other) is None
    # a choice copied under another key's name is refused, naming the file
    elsewhere = store.key_path("3.6.0", SHA, "H200", gemm.kernel, "(65,)")
    elsewhere.write_text(path.read_text())
    with pytest.raises(ProtocolError, match="the choice inside is for another file, hardware, kernel or key"):
        store.load_choice("3.6.0", SHA, "H200", gemm.kernel, "(65,)")
    # what an earlier protocol kept is decided again (as absent), not refused
    for kept_path, load in ((path, lambda: store.load_choice("3.6.0", SHA, "H200", gemm.kernel, gemm.key)),
                            (store.save(record), lambda: store.load("3.6.0", SHA, "H200", "p0123"))):
        kept_path.write_text(json.dumps({**json.loads(kept_path.read_text()), "protocol": 1}))
        assert load() is None


def test_store_paths_refuse_what_could_leave_the_root(tmp_path):
    store = ChoiceStore(tmp_path)
    for args, why in ((("3.6.0", "../x", "H200", "p1"), "sha256"), (("3.6.0", SHA, "../..", "p1"), "hardware"),
                      (("3.6.0", SHA, "H200", "a/b"), "problem id"), (("../3", SHA, "H200", "p1"), "Triton")):
        with pytest.raises(ProtocolError, match=why):
            store.path(*args)


def test_a_record_covers_only_the_kernels_and_keys_it_decided():
    record = _record()
    tuned = [{"kernel": "gemm_kernel", "key": "(64, 64, 'torch.bfloat16')", "indices": [0, 1, 3]},
             {"kernel": "one_config", "key": "(1,)", "indices": [0]}]  # nothing to decide with one config
    assert covers(record, tuned)
    assert not covers(record, tuned + [{"kernel": "gemm_kernel", "key": "(128, 64, 'torch.bfloat16')",
                                        "indices": [0, 1]}])


CANDIDATE = '''
import torch, triton, triton.language as tl

CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b in (16, 32, 64) for w in (1, 2)]


def prune(configs, named_args, **kwargs):
    return [c for c in configs if c.kwargs["BLOCK"] <= named_args["n"]]


@triton.autotune(configs=CONFIGS, key=["n"], prune_configs_by={"early_config_prune": prune})
@triton.jit
def fill_block(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], tl.int32) + BLOCK, mask=offs < n)


def run(n):
    out = torch.zeros(n, dtype=torch.int32)
    fill_block[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](out, n)
    return int(out[0])
'''

DRIVER = '''
import importlib.util, json, sys
from kernels_eval.harness import autotune_pins as pins
pins.install()
pins.install()  # twice: still one wrapper around Triton's own
spec = importlib.util.spec_from_file_location("cand", sys.argv[1])
cand = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cand)
out = {}
for n, index in ((40, 3), (40, 0), (100, 5)):
    pins.PINS["fill_block"] = {repr((n, "torch.int32")): index}
    pins.Watch.start()
    out[f"{n}/{index}"] = {"block": cand.run(n), "tuned": pins.Watch.stop()}
from triton.runtime.autotuner import Autotuner
benched = []
Autotuner._bench = lambda self, *args, config, **kwargs: benched.append(str(config)) or 1.0  # counts, times nothing
pins.PINS.clear()
pins.Watch.start()  # a key nothing pinned, watched: the first configuration the pruning keeps, nothing benchmarked
out["50/watched"] = {"block": cand.run(50), "tuned": pins.Watch.stop(), "benchmarked": len(benched)}
cand.run(50)
out["50/after"] = {"benchmarked": len(benched)}
print(json.dumps(out))
'''


def test_a_pinned_configuration_runs_and_the_call_reports_what_its_autotuner_would_consider(tmp_path):
    pytest.importorskip("triton")
    (tmp_path / "cand.py").write_text(CANDIDATE)
    (tmp_path / "drive.py").write_text(DRIVER)
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(tmp_path / "drive.py"), str(tmp_path / "cand.py")], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    # CONFIGS in order: (16,1) (16,2) (32,1) (32,2) (64,1) (64,2); the kernel writes its BLOCK
    assert {k: v["block"] for k, v in got.items() if "/5" in k or k.startswith("40/")} == {
        "40/3": 32, "40/0": 16, "100/5": 64}
    # the discovery call of a key not decided: CONFIGS[0] (the first its pruning keeps) ran and nothing was
    # benchmarked; the same key unwatched afterwards is Triton's to tune as before
    watched = got["50/watched"]
    assert watched["block"] == 16 and watched["benchmarked"] == 0
    assert [(t["key"], t["indices"], t["used"]) for t in watched["tuned"]] == [("(50, 'torch.int32')", [0, 1, 2, 3], 0)]
    assert got["50/after"]["benchmarked"] == 4
    first = got["40/3"]["tuned"]
    assert [(t["kernel"], t["key"], t["indices"], t["used"]) for t in first] == [
        ("fill_block", "(40, 'torch.int32')", [0, 1, 2, 3], 3)]  # the candidate's pruning drops BLOCK 64 at n=40
    assert first[0]["configs"][2].startswith("BLOCK: 32, num_warps: 1")
    assert got["100/5"]["tuned"][0]["indices"] == [0, 1, 2, 3, 4, 5]


def test_the_worker_wraps_triton_s_autotuner_before_its_guard_is_snapshot():
    """Autotuner.run is GUARDED: the pinning wrapper must be the identity snapshot, so that a candidate replacing it
    is tampering and the evaluator's own wrapper is not."""
    import inspect

    from kernels_eval.harness import guarded, worker

    assert "triton.runtime.autotuner.Autotuner.run" in {label for label, _, _ in guarded.entries()}
    source = inspect.getsource(worker.Worker.init)
    assert source.index("autotune_pins.install()") < source.index("self.guard = snapshot()")


SILU_CANDIDATE = '''
import torch
import triton
import triton.language as tl
from torch import nn

CONFIGS = [triton.Config({"BLOCK": b}, num_warps=1) for b in (16, 32, 64)]


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def block_of(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, (tl.zeros([BLOCK], tl.float32) + BLOCK).to(tl.bfloat16), mask=offs < n)


class Model(nn.Module):
    def forward(self, x):
        half = x.shape[-1] // 2
        out = torch.empty(x.shape[:-1] + (half,), dtype=x.dtype, device=x.device)
        block_of[lambda meta: (triton.cdiv(out.numel(), meta["BLOCK"]),)](out, out.numel())
        return out
'''


def test_a_real_worker_runs_the_configuration_its_call_pins(tmp_path):
    """The worker's `call` command pins what the parent names (kernel -> key -> index) and pins nothing when a
    later call names nothing: the candidate's kernel writes its BLOCK, so the output says which one ran."""
    pytest.importorskip("triton")
    from kernels_eval.harness import channel
    from kernels_eval.harness.process import WorkerProcess

    candidate = tmp_path / "silu_and_mul.py"
    candidate.write_text(SILU_CANDIDATE)
    exchange = tmp_path / "x"
    exchange.mkdir()
    worker = WorkerProcess(device="cpu", log_path=tmp_path / "w.log", memory_bytes=4 << 30, start_timeout_s=120,
                           sandboxed=False, scratch=tmp_path, use_cgroup=False)
    try:
        reply = worker.request({"cmd": "init", "operator": "silu_and_mul", "file": str(candidate), "device": "cpu",
                                "init_kwargs": {}, "outputs": ["out"], "exchange": str(exchange)}, 300)
        assert reply["ok"], reply
        blocks = []
        for pins in ({"block_of": {"(64, 'torch.bfloat16')": 1}}, {"block_of": {"(64, 'torch.bfloat16')": 2}}):
            reply = worker.request({"cmd": "call", "input_kwargs": {"shape": [2, 64]}, "seed": 5, "digest_key": 9,
                                    "poison": False, "pins": pins}, 300)
            assert reply["ok"], reply.get("error")
            out = channel.import_tensor(reply["outputs"]["out"], str(exchange))
            blocks.append(float(out.flatten()[0]))
        assert blocks == [32.0, 64.0]  # CONFIGS[1] then CONFIGS[2]
    finally:
        worker.close()
