"""The parent's half of the autotuning protocol (harness/autotune_sweep.py) and its place in the judge
(`OperatorJudge._performance`): each configuration recorded with it pinned and timed by the replay; the choice from
the kernel's own time; configurations that fail or are wrong not eligible; the kept record reused without a
sweep; `--repeat N` timings; hostile worker text refused. The replay process itself is tested on its own
(test_replay_protocol.py); here its answers are scripted per pinned configuration."""

from __future__ import annotations

import json

import pytest

from kernels_eval.harness import autotune_sweep
from kernels_eval.harness.autotune_protocol import Budget, ChoiceStore, ProtocolError

torch = pytest.importorskip("torch")

from kernels_eval.harness import operator_judge, runner  # noqa: E402
from kernels_eval.harness.judge import Outcome, Recorded  # noqa: E402
from kernels_eval.harness.protocol import WorkerReply  # noqa: E402
from kernels_eval.harness.verdict import Verdict  # noqa: E402
from kernels_eval.harness.worker_commands import Sweep, encode_command  # noqa: E402

KEY = "(64, 'torch.float32')"
TUNED = {"ok": True, "tuned": [{"kernel": "gemm", "key": KEY, "indices": [0, 2, 5],
                                "configs": ["BLOCK: 16", "BLOCK: 32", "BLOCK: 64"], "used": 2},
                               {"kernel": "single", "key": "(1,)", "indices": [0], "configs": ["W: 4"], "used": 0}]}
KEYS = {"file_sha256": "ab" * 32, "problem_id": "s1", "hardware": "H200", "triton": "3.6.0"}


def scripted(us_by_index: dict[int, list[float]], wrong=(), unreplayable=()):
    """(record, replay, recorded, replayed) answering per pinned configuration: its own µs per call in each
    successive round; `replayed` lists the index of each replay asked for."""
    rounds: dict[int, int] = {}
    recorded, replayed = [], []

    def record(pins):
        index = pins["gemm"][KEY]
        recorded.append(pins)
        return None if index in wrong else Recorded({"index": index}, 7)

    def replay(program):
        index = program.program["index"]
        replayed.append(index)
        if index in unreplayable:
            return None
        k = rounds[index] = rounds.get(index, -1) + 1
        us = us_by_index[index][k]
        return [us * 3e-6], {"gemm": us, "other": 50.0}

    return record, replay, recorded, replayed


def test_the_sweep_times_each_pinned_configuration_and_chooses_inside_the_band():
    # config 5 is fastest by 1% (inside the 2% band): config 2, earlier in the autotuner's order, is chosen;
    # config 0 is 30% slower than the fastest in the first round (more than drop_above 25%): timed once only
    record, replay, recorded, replayed = scripted({0: [2.6] * 3, 2: [2.02, 2.0, 2.03], 5: [2.0, 1.99, 2.0]})
    result = autotune_sweep.sweep(lambda: TUNED, record, replay, Budget(), **KEYS)
    assert recorded == [{"gemm": {KEY: 0}}, {"gemm": {KEY: 2}}, {"gemm": {KEY: 5}}]
    assert replayed == [0, 2, 5, 2, 5, 2, 5]  # interleaved rounds
    (gemm,) = result.kernels  # "single" has one configuration: nothing to decide
    assert gemm.chosen == 2 and gemm.chosen_config == "BLOCK: 32" and gemm.measure == "kernel"
    assert gemm.dropped == [0] and gemm.rounds_s[0] == pytest.approx([2.6e-6])
    assert gemm.figure_s == {2: pytest.approx(2.02e-6), 5: pytest.approx(2.0e-6)}
    assert gemm.rounds_s[2] == pytest.approx([2.02e-6, 2.0e-6, 2.03e-6])
    assert result.pins() == {"gemm": {KEY: 2}} and gemm.decided_by is None


def test_a_clear_leader_after_the_first_round_is_chosen_without_more_rounds():
    # 1.0 against 1.3 and 1.26: both others beyond drop_above (25%) of the leader
    record, replay, _, replayed = scripted({0: [1.3], 2: [1.0], 5: [1.26]})
    (gemm,) = autotune_sweep.sweep(lambda: TUNED, record, replay, Budget(), **KEYS).kernels
    assert replayed == [0, 2, 5]
    assert gemm.chosen == 2 and gemm.dropped == [0, 5] and gemm.figure_s == {2: pytest.approx(1.0e-6)}
    # a configuration that fails a later round is not eligible: the other survivor is chosen
    record, replay, _, replayed = scripted({0: [1.0, 1.0], 2: [1.01, 1.0, 1.01], 5: [1.1, 1.1, 1.1]})
    calls = []

    def unreliable(program):  # configuration 0 is not reproduced in its second round
        calls.append(program.program["index"])
        return None if calls.count(0) == 2 and calls[-1] == 0 else replay(program)

    (gemm,) = autotune_sweep.sweep(lambda: TUNED, record, unreliable, Budget(), **KEYS).kernels
    assert gemm.chosen == 2 and set(gemm.figure_s) == {2, 5} and gemm.dropped == []


def test_every_kernel_is_pinned_while_another_is_swept_and_the_last_recording_is_the_final_call():
    """Two tuned kernels: while the first is swept the second is pinned at the first configuration its pruning
    keeps (so no recording runs Triton's own benchmarks); the second is swept with the first at its choice, and
    its chosen recording, the call with both choices pinned, is the program the problem is timed with."""
    tuned = {"ok": True, "tuned": [TUNED["tuned"][0], {"kernel": "down", "key": "(8,)", "indices": [3, 1],
                                                        "configs": ["W: 8", "W: 2"], "used": 3}]}
    us = {("gemm", 0): 2.6, ("gemm", 2): 2.0, ("gemm", 5): 2.2, ("down", 3): 1.5, ("down", 1): 1.0}
    recorded = []

    def record(pins):
        recorded.append(pins)
        return Recorded({"pins": pins}, 7)

    def replay(program):
        pins = program.program["pins"]
        return [1e-6], {name: us[(name, pins[name][key])] for name, key in (("gemm", KEY), ("down", "(8,)"))}

    result = autotune_sweep.sweep(lambda: tuned, record, replay, Budget(), **KEYS)
    assert recorded == [{"gemm": {KEY: i}, "down": {"(8,)": 3}} for i in (0, 2, 5)] + [
        {"gemm": {KEY: 2}, "down": {"(8,)": i}} for i in (3, 1)]
    assert result.pins() == {"gemm": {KEY: 2}, "down": {"(8,)": 1}}
    assert result.program.program == {"pins": {"gemm": {KEY: 2}, "down": {"(8,)": 1}}}
    assert "program" not in json.loads(result.as_json())


def test_a_wrong_or_unreplayable_configuration_is_never_chosen():
    record, replay, _, _ = scripted({0: [1.0] * 3, 2: [2.0] * 3, 5: [1.5] * 3}, wrong={0})
    assert autotune_sweep.sweep(lambda: TUNED, record, replay, Budget(), **KEYS).pins() == {"gemm": {KEY: 5}}
    record, replay, _, _ = scripted({0: [1.0] * 3, 2: [2.0] * 3, 5: [1.5] * 3}, unreplayable={0, 5})
    assert autotune_sweep.sweep(lambda: TUNED, record, replay, Budget(), **KEYS).pins() == {"gemm": {KEY: 2}}
    record, replay, _, _ = scripted({}, wrong={0, 2, 5})
    with pytest.raises(ProtocolError, match="kernel gemm at key .*: no configuration was measured"):
        autotune_sweep.sweep(lambda: TUNED, record, replay, Budget(), **KEYS)
    with pytest.raises(ProtocolError, match="the discovery call failed: boom"):
        autotune_sweep.sweep(lambda: {"ok": False, "error": "boom"}, record, replay, Budget(), **KEYS)


def test_problems_that_reach_one_tuning_key_share_the_first_ones_choice(tmp_path):
    """As Triton's own autotuner decides once per key: the first problem's sweep decides (kernel, key) and is kept;
    a later problem reaching the same key pins it without a sweep and names the problem that decided it."""
    store = ChoiceStore(tmp_path)
    record, replay, _, replayed = scripted({0: [2.6] * 3, 2: [2.5] * 3, 5: [2.0] * 3})
    first = autotune_sweep.sweep(lambda: TUNED, record, replay, Budget(), choices=store, **KEYS)
    assert first.pins() == {"gemm": {KEY: 5}} and replayed
    record, replay, recorded, replayed = scripted({})
    second = autotune_sweep.sweep(lambda: TUNED, record, replay, Budget(), choices=store, **{**KEYS, "problem_id": "s2"})
    assert recorded == [] and replayed == []  # nothing recorded or timed for the gemm's key
    (gemm,) = second.kernels
    assert second.pins() == {"gemm": {KEY: 5}} and gemm.decided_by == "s1" and gemm.rounds_s == first.kernels[0].rounds_s
    assert json.loads(autotune_sweep_row(second)) == [["gemm", KEY, 5, "BLOCK: 64"]]
    # a problem whose own pruning does not keep the kept configuration is swept itself; the key's choice stays
    narrower = {"ok": True, "tuned": [{**TUNED["tuned"][0], "indices": [0, 2], "configs": ["BLOCK: 16", "BLOCK: 32"]}]}
    record, replay, _, replayed = scripted({0: [1.0] * 3, 2: [3.0] * 3})
    third = autotune_sweep.sweep(lambda: narrower, record, replay, Budget(), choices=store, **{**KEYS, "problem_id": "s3"})
    assert third.pins() == {"gemm": {KEY: 0}} and third.kernels[0].decided_by is None and replayed
    kept = store.load_choice("3.6.0", KEYS["file_sha256"], "H200", "gemm", KEY)
    assert kept.chosen == 5 and kept.decided_by == "s1"
    # another hardware, file or Triton keeps its own
    assert store.load_choice("3.6.0", KEYS["file_sha256"], "H100", "gemm", KEY) is None
    assert store.load_choice("3.6.0", KEYS["file_sha256"], "H200", "gemm", "(128, 'torch.float32')") is None


def autotune_sweep_row(record):
    from kernels_eval.harness.autotune_protocol import row_text

    return row_text(record)


@pytest.mark.parametrize("tuned, why", [
    ([{"kernel": "g\x1b[31m", "key": "(1,)", "indices": [0, 1], "configs": ["a", "b"]}], "kernel name"),
    ([{"kernel": "g", "key": "k" * 401, "indices": [0, 1], "configs": ["a", "b"]}], "tuning key"),
    ([{"kernel": "g", "key": "(1,)", "indices": [0, 0], "configs": ["a", "b"]}], "indices are malformed"),
    ([{"kernel": "g", "key": "(1,)", "indices": [0, True], "configs": ["a", "b"]}], "indices are malformed"),
    ([{"kernel": "g", "key": "(1,)", "indices": [0], "configs": ["a", "b"]}], "indices are malformed"),
    ("not a list", "tuned list"),
])
def test_hostile_discovery_replies_are_refused(tuned, why):
    with pytest.raises(ProtocolError, match=why):
        autotune_sweep.tuned_kernels({"tuned": tuned})


class FakeReplayer:
    """The replay's answers: µs per call of `gemm` by the configuration the recorded program was pinned with."""

    def __init__(self, config, us: dict[int, float], repeats: list[float] = ()) -> None:
        self.config, self.us, self.repeats, self.timed, self.states = config, us, list(repeats), [], []
        self.seeds = []

    def reproduce(self, operator, spec, expected, input_kwargs, recorded, state, time_seeds=0, timing_seeds=None,
                  check=True):
        (program,) = recorded
        index = program.program["pins"].get("gemm", {}).get(KEY)
        self.timed.append((index, time_seeds, self.config.timing_budget_s))
        self.states.append(state)
        self.seeds.append((tuple(timing_seeds or ()), check))
        if self.repeats and time_seeds == operator_judge.TIMING_SETS:
            t = self.repeats.pop(0)
            return Outcome(native=True, times_s=[t] * 5, kernel_us={"gemm": t * 1e6})
        us = self.us[index]
        return Outcome(native=True, times_s=[us * 1e-6] * 5, kernel_us={"gemm": us})

    def close(self):
        pass


class Judge(runner.OperatorJudge):
    """An rms_norm judge whose worker answers the discovery from a script and records each call's pins as its
    program, and whose replay is a FakeReplayer."""

    def __init__(self, tmp_path, config, replayer, source="# a file with a triton.autotune kernel\n") -> None:
        tmp_path.mkdir(exist_ok=True)
        (tmp_path / "rms_norm.py").write_text(source)
        super().__init__("rms_norm", tmp_path / "rms_norm.py", config, tmp_path, replayer=replayer)
        self.sent = []

    def _ensure_init(self, init_kwargs):
        self.state = {"snapshot": "of this judge's worker"}  # its Model's init-time state, as `_init` keeps it

    def _request(self, message, timeout_s=None):
        assert isinstance(message, Sweep)
        self.sent.append(encode_command(message))  # as the pipe carries it
        return TUNED

    def _judged_call(self, model, init_kwargs, input_kwargs, **flags):
        self.sent.append({"cmd": "call", **flags})
        self.last_seed = 7
        return WorkerReply(ok=True, program={"pins": flags.get("pins", {})}), [], 0.0


SHAPE = ({"eps": 1e-6}, {"token_count": 4, "hidden_size": 64})
PENDING = {"shape": SHAPE, "recorded": [Recorded({"pins": {}}, 3)], "state": {"snapshot": "of the checks' worker"}}


def perform(judge) -> Verdict:
    return perform_shape(judge, SHAPE)


def perform_shape(judge, shape) -> Verdict:
    v = Verdict(stage="performance", compiled=True, correct=True, native=True)
    try:
        return judge._performance(v, judge.reference.Model(**shape[0]), {**PENDING, "shape": shape})
    finally:
        judge.close()


def test_the_protocol_pins_its_choice_for_the_timing_and_a_rerun_reuses_it(tmp_path):
    store = tmp_path / "store"
    config = runner.EvalConfig(device="cpu", autotune="protocol", autotune_store=store, hardware="H200")
    replayer = FakeReplayer(config, {0: 2.6, 2: 2.4, 5: 2.0, None: 9.0})
    judge = Judge(tmp_path / "a", config, replayer)
    v = perform(judge)
    assert v.stage == "done", v.error
    assert json.loads(v.autotune_config) == [["gemm", KEY, 5, "BLOCK: 64"]]
    assert v.t_measured_s == pytest.approx(2.0e-6) and v.timing_rule == "device_busy"
    # the sweep's replays ran with the protocol's budget: a first round of 3 configurations, then 2 rounds of the 2
    # within 25% of the fastest; the timing with the run's
    swept = [(i, 2, 0.02) for i in (0, 2, 5)] + [(i, 2, 0.02) for i in (2, 5)] * 2
    assert [t for t in replayer.timed if t[2] == Budget().budget_s] == swept
    assert replayer.timed[-1] == (5, operator_judge.TIMING_SETS, config.timing_budget_s)
    # every configuration timed on the same two input sets (its timed calls' outputs judged there), no other run
    sweep_seeds = replayer.seeds[:len(swept)]
    assert len({seeds for seeds, _ in sweep_seeds}) == 1 and len(sweep_seeds[0][0]) == 2
    assert [check for _, check in sweep_seeds] == [False] * 7
    assert replayer.seeds[-1] == ((), True)  # the timing that scores: fresh inputs of its own, judged
    # one worker call per configuration; the chosen one's recording is the program timed, not recorded again
    assert [m["cmd"] for m in judge.sent] == ["sweep", "call", "call", "call"]
    # every program recorded with a pin is replayed with the state of the worker that recorded it
    assert replayer.states == [{"snapshot": "of this judge's worker"}] * 8
    # kept: the problem's record, and the (kernel, key)'s choice beside it
    kept = sorted(store.rglob("*.json"), key=lambda path: len(path.parts))
    assert [p.parent.name for p in kept] == ["H200", "keys"] and kept[1].parent.parent == kept[0].parent
    # a second run of the same file, shape and hardware: no discovery, no sweep, the same choice timed
    again = Judge(tmp_path / "b", config, FakeReplayer(config, {5: 2.1}))
    v2 = perform(again)
    assert [m["cmd"] for m in again.sent] == ["call"] and again.sent[0]["pins"] == {"gemm": {KEY: 5}}
    assert v2.autotune_config == v.autotune_config and v2.t_measured_s == pytest.approx(2.1e-6)
    (triton_dir,) = store.iterdir()
    assert ChoiceStore(store).load(triton_dir.name.removeprefix("triton-"), kept[0].parents[1].name, "H200",
                                   kept[0].stem).pins() == {"gemm": {KEY: 5}}
    # another shape reaching the same key: discovery, then the kept choice pinned, no configuration swept
    other = Judge(tmp_path / "c", config, FakeReplayer(config, {5: 2.2}))
    other.sent.clear()
    v3 = perform_shape(other, ({"eps": 1e-6}, {"token_count": 8, "hidden_size": 64}))
    assert [m["cmd"] for m in other.sent] == ["sweep", "call"] and other.sent[1]["pins"] == {"gemm": {KEY: 5}}
    assert v3.autotune_config == v.autotune_config


def test_repeat_keeps_each_timings_median_and_scores_their_median(tmp_path):
    # with the protocol off (`eval --autotune triton`, the default): no sweep, autotune_config null
    assert runner.EvalConfig().autotune == "triton"
    config = runner.EvalConfig(device="cpu", repeat=3, autotune="triton")
    replayer = FakeReplayer(config, {}, repeats=[4e-6, 6e-6, 5e-6])
    v = perform(Judge(tmp_path / "r", config, replayer))
    assert v.stage == "done", v.error
    assert v.t_repeats_s == pytest.approx([4e-6, 6e-6, 5e-6]) and v.t_measured_s == pytest.approx(5e-6)
    assert v.n_timed == 15 and v.autotune_config is None
    problem = runner.Problem({"problem_id": "p", "operator": "rms_norm", "init_kwargs": "{}", "input_kwargs": "{}"})
    row = runner.result_row({}, problem, v, None, 1e-6, "cuda")
    assert row["t_repeats_s"] == pytest.approx([4e-6, 6e-6, 5e-6]) and row["timing_rule"] == "device_busy"
    one = perform(Judge(tmp_path / "one", runner.EvalConfig(device="cpu", autotune="triton"),
                        FakeReplayer(config, {}, [4e-6])))
    assert one.t_repeats_s == [] and runner.result_row({}, problem, one, None, None, "cuda")["t_repeats_s"] is None


def test_a_failed_protocol_fails_the_problem_at_performance_with_the_reason(tmp_path):
    config = runner.EvalConfig(device="cpu", autotune="protocol", autotune_store=tmp_path / "store", hardware="H200")

    class Failing(Judge):
        def _request(self, message, timeout_s=None):
            return {"ok": False, "error": "RuntimeError: boom"}

    v = perform(Failing(tmp_path / "f", config, FakeReplayer(config, {})))
    assert v.stage == "performance" and v.error == ("autotuning protocol failed: the discovery call failed: "
                                                    "RuntimeError: boom")


def test_repeat_below_one_is_refused_before_anything_is_read(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "eval", str(tmp_path), "--release",
                           str(tmp_path / "none"), "--repeat", "0", "--out", str(tmp_path / "r.parquet")],
                          capture_output=True, text=True, timeout=300, cwd=repo, check=False)
    assert done.returncode == 2 and done.stderr.strip() == "hotshape eval: --repeat 0: at least 1"
    assert not (tmp_path / "r.parquet").exists()


def test_a_file_that_never_names_the_autotuner_is_not_swept(tmp_path):
    config = runner.EvalConfig(device="cpu", autotune="protocol", autotune_store=tmp_path / "store", hardware="H200")
    judge = Judge(tmp_path / "plain", config, FakeReplayer(config, {None: 3.0}), source="import triton\n")
    v = perform(judge)
    assert v.stage == "done" and judge.sent == [] and v.autotune_config == "[]"
    assert v.t_measured_s == pytest.approx(3e-6)  # the checks' program, as without the protocol


def test_an_operator_sweeps_only_with_the_protocol_on_a_gpu_for_a_shape_without_a_kept_record(tmp_path):
    from kernels_eval.harness.autotune_judge import _store_and_keys, sweeps
    from kernels_eval.harness.autotune_protocol import Record

    tuned, plain = tmp_path / "rms_norm.py", tmp_path / "silu_and_mul.py"
    tuned.write_text("# a file with a triton.autotune kernel\n")
    plain.write_text("import triton\n")
    config = runner.EvalConfig(device="cuda", autotune="protocol", autotune_store=tmp_path / "store", hardware="H200")
    other = ({"eps": 1e-6}, {"token_count": 8, "hardware_size": 64})
    assert sweeps(config, tuned, [SHAPE, other]) and not sweeps(config, plain, [SHAPE])
    store, keys = _store_and_keys(config, tuned, SHAPE)
    store.save(Record(kernels=[], **keys))
    assert sweeps(config, tuned, [SHAPE, other]) and not sweeps(config, tuned, [SHAPE])
    for off in ({"autotune": "triton"}, {"device": "cpu"}):
        assert not sweeps(runner.EvalConfig(**{**config.__dict__, **off}), tuned, [other])
