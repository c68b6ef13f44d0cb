"""The parent's commands to the worker are typed (harness/worker_commands.py): each round-trips through the pipe's
JSON, a malformed one is refused naming its fault (in the worker too, as a failed reply), and every command the
parent's judge sends decodes."""

from __future__ import annotations

import json

import pytest

from kernels_eval.harness.protocol import ProtocolError
from kernels_eval.harness.worker_commands import (COMMANDS, Call, Init, Sweep, Time, Warm, decode_command,
                                                  encode_command, name_of)

EXAMPLES = [Warm(device="cuda", markers_cache="/tmp/m"),
            Init(operator="rms_norm", file="/s/rms_norm.py", device="cpu", init_kwargs={"eps": 1e-6},
                 outputs=["out"], exchange="/x", autotune_bench_ms=[5.0, 20.0]),
            Call(input_kwargs={"token_count": 4}, seed=7, digest_key=9, record=True, pins={"k": {"key": 2}}),
            Sweep(input_kwargs={"token_count": 4}), Time(input_kwargs={"token_count": 4}, seed=1, budget_s=0.01)]


def test_every_command_round_trips_through_the_pipes_json():
    assert {name_of(c) for c in EXAMPLES} == set(COMMANDS)
    for command in EXAMPLES:
        assert decode_command(json.loads(json.dumps(encode_command(command)))) == command


@pytest.mark.parametrize("data, fault", [
    ({"cmd": "nonsense"}, "unknown command 'nonsense'"),
    ([1, 2], "not an object"),
    ({"cmd": "call", "input_kwargs": {}, "seed": 1, "digest_key": 2, "sed": 3}, "unknown fields ['sed']"),
    ({"cmd": "call", "input_kwargs": {}, "digest_key": 2}, "no seed"),
    ({"cmd": "call", "input_kwargs": {}, "seed": "1", "digest_key": 2}, "seed is a str"),
    ({"cmd": "call", "input_kwargs": {}, "seed": True, "digest_key": 2}, "seed is a bool"),
    ({"cmd": "call", "input_kwargs": {}, "seed": 1, "digest_key": 2, "record": 1}, "record is a int"),
    ({"cmd": "init", "operator": "rms_norm", "file": "f", "device": "cpu", "init_kwargs": {}, "outputs": "out",
      "exchange": "x"}, "outputs is a str"),
])
def test_a_malformed_command_is_refused_naming_its_fault(data, fault):
    with pytest.raises(ProtocolError, match=fault.replace("[", r"\[").replace("]", r"\]")):
        decode_command(data)


def test_a_float_field_takes_an_integer_and_null_where_optional():
    assert decode_command({"cmd": "time", "input_kwargs": {}, "seed": 1, "budget_s": 1}).budget_s == 1
    assert decode_command({"cmd": "warm", "markers_cache": None}) == Warm()


def test_every_command_the_judge_sends_decodes(tmp_path):
    pytest.importorskip("torch")
    from kernels_eval.harness import runner

    sent = []

    class Worker:
        ready, warming = True, None

        def request(self, message, timeout_s):
            sent.append(message)
            if message["cmd"] == "init":
                return {"ok": True, "jit_functions": []}
            return {"ok": False, "error": "stop here"}

    for device in ("cpu", "cuda"):
        config = runner.EvalConfig(device=device, hardware="cpu", sandbox=False)
        judge = runner.OperatorJudge("rms_norm", tmp_path / "rms_norm.py", config, tmp_path, Worker())
        judge.reference = type("Ref", (), {"Model": lambda **kw: type("M", (), {"to": lambda self, d: self})()})
        judge.evaluate_shapes([({"eps": 1e-6}, {"token_count": 4, "hidden_size": 64})])
    kinds = [type(decode_command(m)) for m in sent]
    assert kinds.count(Init) == 2 and kinds.count(Call) == 2


def test_the_worker_answers_a_malformed_command_with_a_failed_reply(tmp_path):
    pytest.importorskip("torch")
    from kernels_eval.harness.process import WorkerProcess

    worker = WorkerProcess(device="cpu", log_path=tmp_path / "w.log", memory_bytes=4 << 30, start_timeout_s=120,
                           sandboxed=False, scratch=tmp_path, use_cgroup=False)
    try:
        reply = worker.request({"cmd": "call", "input_kwargs": {}, "seed": "7", "digest_key": 1}, 120)
        assert reply["ok"] is False and "command call: seed is a str" in reply["error"]
        assert worker.request({"cmd": "warm", "device": "cpu"}, 120)["ok"]  # the worker goes on
    finally:
        worker.close()
