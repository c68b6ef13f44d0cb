"""The trusted replay's inputs: launch programs decoded strictly (protocol.py), kernel sources captured from the
submission's module (discovery.capture) and checked to be plain Triton before the replay rebuilds them
(kernel_source.validate), and which recorded programs are replayed on which inputs (judge.plan)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from kernels_eval.harness.judge import Recorded, plan
from kernels_eval.harness.kernel_source import KernelRefused, validate
from kernels_eval.harness.protocol import (Alloc, KernelArg, KernelSource, Launch, LaunchProgram, ProtocolError,
                                           TensorView, decode_program, encode)

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "examples" / "submissions" / "triton_reference"


def _program(grid=(4, 1, 1), refused=()) -> LaunchProgram:
    out = TensorView(role="output", ref="b0", offset_bytes=0, shape=(4, 8), strides=(8, 1), dtype="float32")
    x = TensorView(role="input", ref="x", offset_bytes=0, shape=(4, 8), strides=(8, 1), dtype="float32")
    kernel = KernelSource(name="k", source="def k(x_ptr, o_ptr, BLOCK: tl.constexpr):\n    pass\n",
                          aliases={"tl": "triton.language"})
    launch = Launch(kernel="k", grid=grid, args=(KernelArg(name="x_ptr", tensor=x), KernelArg(name="o_ptr", tensor=out),
                                                 KernelArg(name="BLOCK", value=8, constexpr=True)),
                    options={"num_warps": 4})
    return LaunchProgram(kernels=(kernel,), steps=(Alloc(buffer="b0", nbytes=128), launch), outputs={"out": out},
                         refused=tuple(refused))


def test_a_program_survives_json_and_decodes_to_the_same_record():
    program = _program()
    assert decode_program(json.loads(json.dumps(encode(program)))) == program


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.update(extra=1), "unknown fields"),
    (lambda d: d["steps"][1]["args"][0]["tensor"].update(role="host"), "role"),
    (lambda d: d["steps"][1].update(kernel="other"), "lacks"),
    (lambda d: d["steps"][1].update(grid=[1, 2]), "grid"),
    (lambda d: d["steps"][1].update(options={"pre_hook": 1}), "options"),
    (lambda d: d["steps"][0].update(nbytes=-1), "nbytes"),
    (lambda d: d.update(steps=[d["steps"][0]] * 20_001), "steps"),
    (lambda d: d["steps"][1]["args"][2].update(value={"a": 1}), "value"),
])
def test_a_malformed_program_is_refused_naming_the_field(mutate, field):
    data = encode(_program())
    mutate(data)
    with pytest.raises(ProtocolError, match=field):
        decode_program(data)


def _captured(operator: str) -> dict:
    """The kernels of the Triton reference's file for `operator`, captured as discovery does."""
    pytest.importorskip("triton")
    from kernels_eval.harness.discovery import capture

    path = REFERENCE / f"{operator}.py"
    spec = importlib.util.spec_from_file_location(f"captured_{operator}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernels: dict = {}
    for value in vars(module).values():
        fn = getattr(value, "fn", None)
        while fn is not None and not callable(getattr(fn, "__code__", None)) and hasattr(fn, "fn"):
            fn = fn.fn  # an autotuner or heuristics around the jit function
        if fn is not None and getattr(fn, "__code__", None) is not None and hasattr(value, "run"):
            capture(fn, str(path), kernels)
    return kernels


@pytest.mark.parametrize("operator", ["rms_norm", "silu_and_mul", "fused_moe", "unified_attention"])
def test_the_reference_kernels_are_plain_triton(operator):
    kernels = _captured(operator)
    assert kernels
    for kernel in kernels.values():
        validate(kernel)  # raises KernelRefused otherwise
        assert set(kernel.aliases.values()) <= {"triton", "triton.language"} or all(
            m.startswith("triton.language") for m in kernel.aliases.values())


BODY = "    offs = tl.arange(0, BLOCK)\n    tl.store(o_ptr + offs, tl.load(x_ptr + offs))\n"


@pytest.mark.parametrize("source, word", [
    ("def k(x_ptr, o_ptr, BLOCK: tl.constexpr):\n    import os\n" + BODY, "Import"),
    ("def k(x_ptr, o_ptr, BLOCK: tl.constexpr):\n    open('/etc/passwd')\n" + BODY, "open"),
    ("def k(x_ptr, o_ptr, BLOCK: tl.constexpr):\n    x_ptr.__class__\n" + BODY, "__class__"),
    ("def k(x_ptr, o_ptr, BLOCK: tl.constexpr):\n    f = lambda: 0\n" + BODY, "Lambda"),
    ("def k(x_ptr, o_ptr, BLOCK: tl.constexpr):\n    np.sum(1)\n" + BODY, "'np'"),
    ("def k(x_ptr, o_ptr, BLOCK: tl.constexpr):\n    def g():\n        pass\n" + BODY, "nested"),
    ("def k(x_ptr, o_ptr, BLOCK: tl.constexpr):\n    [i for i in range(3)]\n" + BODY, "ListComp"),
    ("def k(x_ptr, o_ptr, BLOCK: tl.constexpr):\n    (tl.load)(x_ptr)()\n" + BODY, "result of an expression"),
    ("@jit\ndef k(x_ptr, o_ptr, BLOCK: tl.constexpr):\n" + BODY, "decorators"),
    ("def k(x_ptr, o_ptr, BLOCK: tl.constexpr):\n" + BODY + "def other():\n    pass\n", "exactly one"),
])
def test_a_kernel_that_is_not_plain_triton_is_refused(source, word):
    with pytest.raises(KernelRefused, match=word):
        validate(KernelSource(name="k", source=source, aliases={"tl": "triton.language"}))


def test_a_kernel_naming_another_module_is_refused():
    with pytest.raises(KernelRefused, match="module 'os'"):
        validate(KernelSource(name="k", source="def k(x_ptr):\n    tl.load(x_ptr)\n", aliases={"tl": "os"}))


def test_plan_replays_a_steady_program_on_fresh_seeds_only():
    first, steady = encode(_program(grid=(8, 1, 1))), encode(_program())
    pairs, reason = plan([Recorded(first, 1), Recorded(steady, 2), Recorded(steady, 3)], data_dependent_size=False)
    assert reason is None and len(pairs) == 1
    program, seeds = pairs[0]
    assert program == decode_program(steady) and not {1, 2, 3} & set(seeds) and len(set(seeds)) == len(seeds)


def test_plan_refuses_a_data_dependent_program_unless_the_contract_needs_one():
    a, b = encode(_program(grid=(4, 1, 1))), encode(_program(grid=(5, 1, 1)))
    recorded = [Recorded(a, 1), Recorded(a, 2), Recorded(b, 3)]
    pairs, reason = plan(recorded, data_dependent_size=False)
    assert not pairs and "changed with the input data" in reason
    pairs, reason = plan(recorded, data_dependent_size=True)
    assert reason is None and [seeds for _, seeds in pairs] == [[2], [3]]


def test_plan_replays_a_data_dependent_program_on_its_own_inputs_even_when_two_recordings_agree():
    # seen on H200: moe_align_block_size's largest problem padded to the same total on two input sets, and its
    # program replayed on fresh inputs gave outputs of another length
    same = encode(_program())
    pairs, reason = plan([Recorded(same, 1), Recorded(same, 2), Recorded(same, 3)], data_dependent_size=True)
    assert reason is None and [seeds for _, seeds in pairs] == [[2], [3]]


def test_plan_refuses_an_unreplayable_or_kernel_less_program():
    refused = encode(_program(refused=("aten::mul computes outside the submission's kernels",)))
    assert "aten::mul" in plan([Recorded(refused, 1)], False)[1]
    empty = encode(LaunchProgram(kernels=(), steps=(), outputs={}))
    assert "no @triton.jit kernel" in plan([Recorded(empty, 1)], False)[1]
    assert "malformed" in plan([Recorded({"kind": "LaunchProgram"}, 1)], False)[1]


@pytest.mark.parametrize("reply, word", [
    ({"ok": "yes"}, "ok"),
    ({"ok": True, "aten_ops": {"mul": "3"}}, "integers"),
    ({"ok": True, "launches": ["rms_norm_kernel"]}, "objects"),
    ({"ok": True, "inputs": {"x": 5}}, "text"),
    ({"ok": True, "program": [1, 2]}, "program"),
    ({"error": "no ok"}, "no ok"),
])
def test_a_worker_reply_of_the_wrong_shape_is_refused_naming_the_field(reply, word):
    from kernels_eval.harness.protocol import decode_reply

    with pytest.raises(ProtocolError, match=word):
        decode_reply(reply)


def test_a_worker_reply_keeps_its_fields_and_drops_other_commands_ones():
    from kernels_eval.harness.protocol import decode_reply

    reply = decode_reply({"ok": True, "launches": [{"name": "k", "owned": True}], "aten_ops": {"empty": 2},
                          "inputs": {"x": "ab12"}, "times_s": [1.0], "ready": True})
    assert reply.ok and reply.launches == [{"name": "k", "owned": True}] and reply.aten_ops == {"empty": 2}
    assert reply.inputs == {"x": "ab12"} and reply.program is None and not hasattr(reply, "times_s")


def test_a_sweeps_timing_only_replay_times_on_the_callers_seeds_and_runs_nothing_judged(tmp_path):
    """The autotuning protocol's later rounds (harness/autotune_sweep.py): `check=False` asks the replay for no
    judged run (no seeds), and `timing_seeds` are the inputs the timing uses, so every configuration is timed on
    the same inputs; the default asks for both, on fresh seeds drawn per call."""
    from types import SimpleNamespace

    from kernels_eval.harness.judge import Replayer
    from kernels_eval.harness.protocol import ReplayResult, decode_request

    sent = []

    class Process:
        def request(self, message, timeout_s):
            sent.append(decode_request(message))
            return encode(ReplayResult(ok=True))

        def close(self):
            pass

    config = SimpleNamespace(device="cpu", call_timeout_s=10.0, timing_budget_s=0.02, timing_max_calls=50)
    replayer = Replayer("t", config)
    replayer.process = Process()
    spec = SimpleNamespace(data_dependent_size=False)
    steady = [Recorded(encode(_program()), 1), Recorded(encode(_program()), 2)]
    try:
        out = replayer.reproduce("rms_norm", spec, None, {}, steady, {}, time_seeds=2, timing_seeds=[11, 12],
                                 check=False)
        replayer.reproduce("rms_norm", spec, None, {}, steady, {}, time_seeds=2)
    finally:
        replayer.close()
    assert out.native
    timing_only, judged = sent
    assert timing_only.seeds == [] and timing_only.time_calls and timing_only.time_seeds == [11, 12]
    assert timing_only.budget_s == 0.02 and timing_only.max_calls == 50
    assert len(judged.seeds) == 2 and len(judged.time_seeds) == 2 and not {1, 2, 11, 12} & set(judged.time_seeds)


def test_the_replay_keeps_the_kernels_it_rebuilt_for_the_same_sources(monkeypatch):
    """Every protocol round and every configuration of one kernel sends the same kernel sources: the replay process
    rebuilds them once and reuses those triton.jit functions (their compiled specializations with them); another
    source, alias or constant is built afresh, and a refused kernel is refused every time."""
    pytest.importorskip("triton")
    from kernels_eval.harness import replay

    built = []
    monkeypatch.setattr(replay, "_built", {})
    monkeypatch.setattr(replay, "build", lambda kernels: built.append(kernels) or {k.name: object() for k in kernels})
    kernels = _program().kernels
    first = replay.built_kernels(kernels)
    assert replay.built_kernels(decode_program(encode(_program(grid=(9, 1, 1)))).kernels) is first
    other = (KernelSource(name="k", source=kernels[0].source, aliases={"tl": "triton.language"}, constants={"N": 4}),)
    assert replay.built_kernels(other) is not first and len(built) == 2
    monkeypatch.setattr(replay, "build", lambda kernels: (_ for _ in ()).throw(KernelRefused("kernel k: refused")))
    bad = (KernelSource(name="k", source="def k(x):\n    import os\n", aliases={}),)
    for _ in range(2):
        with pytest.raises(KernelRefused):
            replay.built_kernels(bad)
