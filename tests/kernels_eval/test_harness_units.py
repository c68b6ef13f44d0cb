"""Harness pieces without a worker: the judge, adoption rules, timing statistics, tamper snapshot, transport."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kernels_eval.harness import adoption, channel  # noqa: E402
from kernels_eval.harness.compare import compare_outputs, named_outputs, unchanged_inputs  # noqa: E402
from kernels_eval.harness.timing import quantiles  # noqa: E402

TOL = {"atol": 2e-2, "rtol": 2e-2}


def _bf16(seed=0, n=4096):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g).to(torch.bfloat16)


def test_judge_passes_rounding_noise_and_fails_nan_shape_dtype_and_systematic_error():
    e = _bf16()
    noise = (e.float() * (1 + (torch.rand(e.shape, generator=torch.Generator().manual_seed(1)) - 0.5) * 2 ** -7))
    assert compare_outputs({"out": noise.to(torch.bfloat16)}, {"out": e}, TOL)[0] == []
    holed = e.clone()
    holed[-7:] = float("nan")
    assert "7/4096 elements are NaN/Inf" in compare_outputs({"out": holed}, {"out": e}, TOL)[0][0]
    assert "shape" in compare_outputs({"out": e[:-1]}, {"out": e}, TOL)[0][0]
    assert "dtype" in compare_outputs({"out": e.float()}, {"out": e}, TOL)[0][0]
    scaled = (e.float() * 1.015).to(torch.bfloat16)  # every element inside atol + rtol·|e|
    assert "systematic" in compare_outputs({"out": scaled}, {"out": e}, TOL)[0][0]
    assert "missing" in compare_outputs({}, {"out": e}, TOL)[0][0]


def test_judge_exact_for_integers_and_order_free_outputs_compare_as_multisets():
    e = torch.arange(10, dtype=torch.int32)
    shuffled = e[torch.randperm(10, generator=torch.Generator().manual_seed(0))]
    assert "differ" in compare_outputs({"ids": shuffled}, {"ids": e}, {"atol": 0, "rtol": 0})[0][0]
    assert compare_outputs({"ids": shuffled}, {"ids": e}, {"atol": 0, "rtol": 0}, ("ids",))[0] == []


def test_inputs_must_be_unchanged_unless_written_in_place_by_contract():
    x, r = _bf16(0, 64), _bf16(1, 64)
    changed = x.clone()
    changed[3] += 1
    assert unchanged_inputs({"x": x.clone(), "residual": r}, {"x": x, "residual": r}, set()) == []
    assert "input 'x' was modified" in unchanged_inputs({"x": changed}, {"x": x}, set())[0]
    assert unchanged_inputs({"x": changed}, {"x": x}, {"x"}) == []


def test_named_outputs_accepts_tensor_tuple_and_dict():
    t = torch.zeros(2)
    assert list(named_outputs(t, ("out",))) == ["out"]
    assert list(named_outputs((t, t), ("q", "k"))) == ["q", "k"]
    assert list(named_outputs({"k": t, "q": t}, ("q", "k"))) == ["q", "k"]


def test_cpu_adoption_needs_own_kernel_and_no_compute_ops():
    own = [{"name": "k", "file": "/s/rms_norm.py", "owned": True, "count": 1}]
    interp_copies = {"empty": 3, "new_empty": 2, "set_": 4, "copy_": 2, "view": 1}
    assert adoption.cpu_adoption(own, interp_copies)["native"] is True
    mixed = adoption.cpu_adoption(own, {**interp_copies, "mean": 1, "vllm::rms_norm": 1})
    assert mixed["native"] is False and mixed["fallbacks"] == ["aten::mean x1", "vllm::rms_norm x1"]
    none = adoption.cpu_adoption([], {"pow": 1})
    assert none["native"] is False and "no @triton.jit kernel" in none["reason"]
    inductor = adoption.cpu_adoption([*own, {"name": "triton_poi_fused_0", "file": "/tmp/x.py", "owned": False}], {})
    assert inductor["native"] is False and inductor["fallbacks"] == ["triton:triton_poi_fused_0 (/tmp/x.py)"]


def test_host_escapes_and_threads_on_the_observation_channel_make_a_call_not_native():
    from kernels_eval.harness.observe import parse_records

    own = [{"name": "k", "file": "/s/rms_norm.py", "owned": True, "count": 1}]
    seen = parse_records(["op\tmean", "op\tmean", "host\thost compute: numpy via Tensor.numpy()",
                          "thread\ta thread was started during the call (work)"])
    assert seen["op"] == {"mean": 2} and not seen["tamper"]
    v = adoption.cpu_adoption(own, {"copy_": 1}, seen["host"] + seen["thread"])
    assert v["native"] is False and "host" in v["reason"]
    assert v["fallbacks"][0] == "host compute: numpy via Tensor.numpy()"
    # a record the worker never writes (a candidate writing to the pipe, or a torn line) is tampering
    assert parse_records(["op\tmean", "garbage", "op"])["tamper"] == ["unreadable observation record 'garbage'",
                                                                       "unreadable observation record 'op'"]


def test_observation_channel_sends_each_record_once_per_call_and_dies_when_replaced(tmp_path):
    import os
    import subprocess
    import sys

    from kernels_eval.harness.observe import Channel

    r, w = os.pipe()
    ch = Channel(w)
    ch.send("op", "mean")
    ch.send("op", "mean")
    ch.send("host", "host compute: x")
    os.close(w)
    assert os.read(r, 4096).decode().splitlines() == ["op\tmean", "host\thost compute: x"]
    os.close(r)
    code = ("import os; from kernels_eval.harness.observe import Channel\n"
            "r, w = os.pipe(); ch = Channel(w); n = os.open(os.devnull, os.O_WRONLY); os.dup2(n, w)\n"
            "ch.send('op', 'mean'); print('not reached')")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 86 and "replaced" in run.stderr and "not reached" not in run.stdout


def test_gpu_adoption_is_a_95_percent_time_share_with_fallbacks_named():
    own = [{"name": "rms_norm_kernel", "owned": True}]
    ok = adoption.gpu_adoption({"rms_norm_kernel": 96.0, "[CUDA memset]": 4.0}, own, {})
    assert ok["native"] and ok["native_fraction"] == pytest.approx(0.96)
    bad = adoption.gpu_adoption({"rms_norm_kernel": 10.0, "sm90_xmma_gemm_bf16": 90.0}, own, {"mm": 1})
    assert not bad["native"] and bad["fallbacks"][0].startswith("kernel:sm90_xmma_gemm_bf16 90.0%")
    assert "aten::mm x1" in bad["fallbacks"]
    assert not adoption.gpu_adoption({"rms_norm_kernel": 100.0}, [], {})["native"]  # name alone is not enough


def test_quantiles():
    q = quantiles([float(x) for x in range(1, 12)])
    assert q == {"median": 6.0, "p10": 2.0, "p90": 10.0}
    assert quantiles([])["median"] is None


def test_tamper_snapshot_names_a_replaced_function(monkeypatch):
    from kernels_eval.harness import worker

    before = worker.snapshot()
    assert "torch.allclose" in before and "torch.cuda.Event.elapsed_time" in before
    monkeypatch.setattr(torch, "allclose", lambda *a, **k: True)
    assert worker.tampered(before) == ["torch.allclose"]


def test_file_transport_refuses_paths_outside_the_exchange(tmp_path):
    t = torch.arange(6.0).reshape(2, 3)
    desc = channel.export_tensor(t, str(tmp_path), "out")
    assert torch.equal(channel.import_tensor(desc, str(tmp_path)), t)
    with pytest.raises(ValueError, match="outside"):
        channel.import_tensor({"kind": "raw", "path": "/etc/passwd", "dtype": "uint8", "shape": [1], "device": "cpu"}, str(tmp_path))
    with pytest.raises(ValueError, match="transport"):
        channel.import_tensor({"kind": "pickle"}, str(tmp_path))


def test_worker_module_imports_no_dataframe_or_orchestration_package():
    import subprocess
    import sys

    code = ("import sys, kernels_eval.harness.worker, kernels_eval.harness.timing, kernels_eval.registry, "
            "kernels_eval.operators.rms_norm; "
            "print(sorted(m for m in ('polars', 'duckdb', 'dagster', 'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_worker_accepts_only_plain_tensors_under_the_operator_output_names():
    from kernels_eval.harness.worker_support import as_named as _as_named

    class Lazy(torch.Tensor):
        pass

    t = torch.zeros(3)
    assert list(_as_named((t, t), ("q", "k"), torch)) == ["q", "k"]
    with pytest.raises(TypeError, match="not a plain torch.Tensor"):
        _as_named(t.as_subclass(Lazy), ("out",), torch)
    with pytest.raises(TypeError, match="lacks outputs"):
        _as_named({"q": t}, ("q", "k"), torch)
    with pytest.raises(TypeError, match="returned 1 values"):
        _as_named([t], ("q", "k"), torch)


def test_worker_started_ahead_answers_its_first_request_and_reports_a_death_before_ready(tmp_path):
    from kernels_eval.harness.process import WorkerDied, WorkerProcess

    ahead = WorkerProcess(device="cpu", log_path=tmp_path / "a.log", memory_bytes=8 << 30, start_timeout_s=120,
                          wait=False)
    try:
        assert not ahead.ready  # returned while the worker was still importing torch
        reply = ahead.request({"cmd": "no-such-command"}, 120)  # waits for the ready line first
        assert ahead.ready and reply["ok"] is False and "no-such-command" in reply["error"]
    finally:
        ahead.close()
    doomed = WorkerProcess(device="cpu", log_path=tmp_path / "b.log", memory_bytes=8 << 30, start_timeout_s=120,
                           wait=False)
    doomed.kill()
    with pytest.raises(WorkerDied):
        doomed.request({"cmd": "init"}, 5)


def test_topk_ids_may_differ_only_at_near_ties_of_the_reference_scores():
    from kernels_eval import registry

    ref = registry.load_reference("moe_topk_gating_softmax")
    spec = registry.spec("moe_topk_gating_softmax")
    model = ref.Model(top_k=2)
    logits = torch.tensor([[3.0, 1.0, 2.0, 2.0 + 1e-6, -1.0]])  # experts 2 and 3 near-tied for second place
    expected = named_outputs(model(gating_output=logits), spec.outputs)
    ties = ref.tie_scores(model, {"gating_output": logits})
    assert expected["topk_ids"].tolist() == [[0, 3]]

    def judged(ids):
        got = {"topk_weights": expected["topk_weights"].clone(), "topk_ids": torch.tensor([ids], dtype=torch.int32)}
        return compare_outputs(got, expected, spec.tolerance, spec.order_free_outputs, ties)[0]

    assert judged([0, 3]) == [] and judged([0, 2]) == []  # the near-tie, either way
    assert "not near-ties" in judged([0, 1])[0]  # a clearly smaller probability
    assert "not near-ties" in judged([0, 0])[0]  # the top expert twice
    assert "exact match" in compare_outputs({"topk_weights": expected["topk_weights"],
                                             "topk_ids": torch.tensor([[0, 2]], dtype=torch.int32)},
                                            expected, spec.tolerance)[0][0]  # without the scores: exact


def test_host_read_of_a_data_dependent_length_is_exempt_only_where_the_contract_needs_it():
    own = [{"name": "align_kernel", "owned": True}]
    profile = {"align_kernel": 8.0, "Memcpy DtoH (Device -> Pinned)": 2.0}
    assert not adoption.gpu_adoption(profile, own, {})["native"]  # 80%: a read counts by default
    exempt = adoption.gpu_adoption(profile, own, {}, host_reads_exempt=True)
    assert exempt["native"] and exempt["native_fraction"] == 1.0 and exempt["fallbacks"][0].startswith("exempt:")
    pushed = adoption.gpu_adoption({**profile, "Memcpy HtoD (Pinned -> Device)": 2.0}, own, {}, host_reads_exempt=True)
    assert not pushed["native"]  # results copied back from the host still count


def test_outputs_must_be_on_the_reference_device():
    e = _bf16()
    meta = {"out": e.to("meta")}
    assert "is on meta, expected cpu" in compare_outputs(meta, {"out": e}, TOL)[0][0]


def test_errors_that_kill_a_cuda_context_are_told_from_ordinary_failures():
    from kernels_eval.harness.runner import CONTEXT_LOST

    lost = [  # as the worker reported them on an H200 (torch 2.11, Triton 3.6), and CUDA's other sticky errors
        "call failed: AcceleratorError: CUDA error: an illegal memory access was encountered\nSearch for "
        "`cudaErrorIllegalAddress' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html",
        "call failed: RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered",
        "call failed: RuntimeError: CUDA error: misaligned address",
        "call failed: RuntimeError: CUDA error: unspecified launch failure",
        "call failed: RuntimeError: CUDA error: device-side assert triggered",
    ]
    ordinary = [
        "input set 1, {\"n\":4}: out: 3 of 16 elements differ (max abs err 0.5, atol 0.02)",
        "call failed: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "call failed: ValueError: head_dim 72 is not supported",
        "worker exited with code 0 during the call",
    ]
    assert all(CONTEXT_LOST.search(e) for e in lost)
    assert not any(CONTEXT_LOST.search(e) for e in ordinary)


def test_input_digests_catch_any_one_changed_word_and_depend_on_the_key():
    from kernels_eval.harness.compare import tensor_digest

    g = torch.Generator().manual_seed(3)
    x = torch.randn(1001, generator=g).to(torch.bfloat16)  # 2002 bytes: a zero-padded tail word
    key = 12345
    assert tensor_digest(x, key) == tensor_digest(x.clone(), key)
    assert tensor_digest(x, key) != tensor_digest(x, key + 1)
    for i in (0, 500, 1000):  # first word, middle, the padded tail
        changed = x.clone()
        changed[i] = -changed[i] if changed[i] != 0 else 1.0
        assert tensor_digest(changed, key) != tensor_digest(x, key)
    # two changes that keep an unkeyed sum of words (swap two words) still change the digest
    words = x[:1000].view(torch.int64).clone()
    words[[1, 2]] = words[[2, 1]]
    swapped = torch.cat([words.view(torch.bfloat16), x[1000:]])
    assert not torch.equal(swapped, x) and tensor_digest(swapped, key) != tensor_digest(x, key)
    # same bytes, other dtype or shape: another digest
    assert tensor_digest(x.view(torch.int16), key) != tensor_digest(x, key)
    assert tensor_digest(x[:1000].reshape(10, 100), key) != tensor_digest(x[:1000], key)
    # a view at an odd byte offset digests as its own bytes
    assert tensor_digest(x[1:], key) == tensor_digest(x[1:].clone(), key)


def test_unchanged_inputs_reads_a_workers_digests():
    from kernels_eval.harness.compare import tensor_digest

    x, r = _bf16(0, 64), _bf16(1, 64)
    changed = x.clone()
    changed[3] += 1
    key = 99
    sent = {"x": tensor_digest(x.clone(), key), "residual": tensor_digest(r, key)}
    assert unchanged_inputs(sent, {"x": x, "residual": r}, set(), key) == []
    assert "input 'x' was modified" in unchanged_inputs({"x": tensor_digest(changed, key)}, {"x": x}, set(), key)[0]
    assert "input 'x' was modified" in unchanged_inputs({"x": tensor_digest(x, key + 1)}, {"x": x}, set(), key)[0]
