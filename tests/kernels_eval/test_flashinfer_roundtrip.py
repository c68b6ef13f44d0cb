"""The FlashInfer export round-trips through FlashInfer-Bench itself: its own loader (`TraceSet.from_path`) reads
every definition and workload `hotshape export-flashinfer` writes for the examples' release, its safetensors
loader accepts every workload's structured inputs (shape and dtype against the definition), and every
definition's reference, built by its own `BuilderRegistry`, runs on inputs its own `gen_inputs` draws, on CPU,
with outputs of the definition's shapes and dtypes and no NaN. The references need torch only (run in a process that
cannot import hotshape).

flashinfer-bench is installed by this test (`pip install --no-deps`, 0.1.2) where it is not importable: its
loaders and evaluator need only torch, pydantic, safetensors and docstring-parser (the test extra); its declared
dependency flashinfer-python pulls CUDA toolkits that a CPU machine has no use for.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from flow.build import build_release
from tests.conftest import EXAMPLES

torch = pytest.importorskip("torch")
VERSION = "0.1.2"
HOTSHAPE = str(Path(sys.executable).with_name("hotshape"))


@pytest.fixture(scope="module")
def fib(tmp_path_factory):
    """flashinfer_bench, imported from the environment or installed for this test with pip --no-deps."""
    try:
        import flashinfer_bench  # noqa: F401
    except ImportError:
        target = tmp_path_factory.mktemp("flashinfer-bench")
        done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                               f"flashinfer-bench=={VERSION}"], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"pip install flashinfer-bench=={VERSION}: {done.stderr[-2000:]}"
        sys.path.insert(0, str(target))
    import flashinfer_bench

    return flashinfer_bench


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("fi")
    build_release(EXAMPLES / "traces", EXAMPLES / "fleet.yaml", root / "release", name="examples")
    done = subprocess.run([HOTSHAPE, "export-flashinfer", str(root / "release"), "--out", str(root / "dataset"), "--json"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    return root / "dataset", json.loads(done.stdout)


def _smallest(definition, workloads):
    def size(trace):
        return sum(int(torch.Size(s).numel()) for s in definition.get_input_shapes(trace.workload.axes) if s is not None)
    return min(workloads, key=size)


def test_every_definition_and_workload_loads_in_flashinfer_bench(fib, dataset):
    from flashinfer_bench.bench.utils import load_safetensors
    from flashinfer_bench.data import TraceSet

    out, summary = dataset
    traces = TraceSet.from_path(str(out))
    assert len(traces.definitions) == summary["definitions"] >= 6 and not summary["skipped"]
    assert sum(len(w) for w in traces.workloads.values()) == summary["workloads"] == 34
    structured = 0
    for name, definition in traces.definitions.items():
        for trace in traces.workloads[name]:
            loaded = load_safetensors(definition, trace.workload, out)  # checks shape and dtype of each
            assert set(loaded) == {k for k, v in trace.workload.inputs.items() if v.type == "safetensors"}
            structured += len(loaded)
    assert structured >= 4 + 4 + 2 * 2 + 2 * 3  # embedding ids, moe routing, paged and unified attention indices


def test_every_reference_runs_on_flashinfer_bench_inputs_on_cpu(fib, dataset):
    from flashinfer_bench.bench.evaluators.utils import normalize_result
    from flashinfer_bench.bench.utils import gen_inputs, load_safetensors
    from flashinfer_bench.compile import BuilderRegistry
    from flashinfer_bench.data import TraceSet

    out, _ = dataset
    traces = TraceSet.from_path(str(out))
    ran = []
    for name, definition in sorted(traces.definitions.items()):
        trace = _smallest(definition, traces.workloads[name])
        workload = trace.workload
        inputs = gen_inputs(definition, workload, "cpu", load_safetensors(definition, workload, out))
        reference = BuilderRegistry.get_instance().build_reference(definition)
        with torch.no_grad():
            outputs = normalize_result(definition, reference(*inputs), "cpu")
        shapes = definition.get_output_shapes(definition.get_axes_values_from_inputs(inputs))
        for o, want_shape, want_dtype, got in zip(definition.outputs, shapes, definition.torch_output_dtypes, outputs):
            assert got.dtype == want_dtype, f"{name} {o}: the reference returns {got.dtype}, the definition says {want_dtype}"
            assert list(got.shape) == list(want_shape), f"{name} {o}"
            if got.is_floating_point():  # -inf is topk_filter's mask; NaN would be an invalid input's mark
                assert not torch.isnan(got.float()).any(), f"{name} {o}: NaN on generated inputs"
        ran.append(definition.op_type)
    assert sorted(set(ran)) == ["embedding", "fused_moe", "gemm", "paged_attention_decode", "topk_filter", "unified_attention"]


def test_bf16_problems_declare_bf16_outputs(dataset):
    """Regression: gemm and paged_attention_decode declared float16 outputs (the last smoke shape's dtype)."""
    out, _ = dataset
    for op in ("gemm", "paged_attention_decode"):
        for path in (out / "definitions" / op).glob("*.json"):
            d = json.loads(path.read_text())
            assert {o["dtype"] for o in d["outputs"].values()} == {"bfloat16"}, path.name


def test_references_need_torch_only(dataset, tmp_path):
    """Each reference runs in a fresh interpreter where hotshape's packages cannot be imported."""
    out, _ = dataset
    script = tmp_path / "run_refs.py"
    script.write_text(
        "import json, sys, builtins, pathlib\n"
        "real = builtins.__import__\n"
        "def guard(name, *a, **k):\n"
        "    if name.split('.')[0] in ('kernels_eval', 'catalogue', 'ingest', 'weighting', 'release', 'pipelines'):\n"
        "        raise ImportError('hotshape package imported: ' + name)\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = guard\n"
        "for p in sorted(pathlib.Path(sys.argv[1]).glob('definitions/*/*.json')):\n"
        "    ns = {}\n"
        "    exec(compile(json.loads(p.read_text())['reference'], str(p), 'exec'), ns)\n"
        "    assert callable(ns['run']), p\n"
        "print('ok')\n")
    done = subprocess.run([sys.executable, "-I", str(script), str(out)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_the_inlined_reference_is_hotshapes_model(dataset):
    """On hotshape's own inputs, each definition's reference gives exactly what kernels_eval's Model gives."""
    import importlib

    from release.bundle import read_release

    out, _ = dataset
    manifest = {r["problem_id"]: r for r in read_release(out.parent / "release").manifest.iter_rows(named=True)}
    for path in sorted(out.glob("definitions/*/*.json")):
        d = json.loads(path.read_text())
        traces = [json.loads(line)["workload"] for line in
                  (out / "workloads" / d["op_type"] / f"{d['name']}.jsonl").read_text().splitlines()]
        smallest = min(traces, key=lambda w: (torch.tensor(list(w["axes"].values()) or [1]).prod().item(), w["uuid"]))
        row = manifest[smallest["uuid"]]
        init, kwargs = json.loads(row["init_kwargs"]), json.loads(row["input_kwargs"])
        mod = importlib.import_module(f"kernels_eval.operators.{d['op_type']}")
        inputs = mod.make_inputs(**kwargs, device="cpu")
        ns: dict = {}
        exec(compile(d["reference"], str(path), "exec"), ns)
        with torch.no_grad():
            want = mod.Model(**init)(**inputs)
            got = ns["run"](**{k: inputs[k] for k in d["inputs"]})
        want = list(want.values()) if isinstance(want, dict) else want if isinstance(want, (tuple, list)) else [want]
        got = list(got) if isinstance(got, (tuple, list)) else [got]
        assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want)), d["name"]
