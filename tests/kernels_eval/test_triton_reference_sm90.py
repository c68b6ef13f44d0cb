"""The Triton reference submission compiles for Hopper: every @triton.jit kernel that its operator files launch
on the registry smoke shapes and the CPU test's edge shapes compiles for sm_90 down to a cubin, with no GPU, using the ptxas in the triton
wheel. This catches what Triton's CPU interpreter (test_triton_reference.py) never runs: the frontend's type
and constexpr checks, layout and MMA lowering, LLVM and ptxas. A kernel that fails here fails on the H200.

Two child processes. The first runs every operator's Model on those shapes under the interpreter (with the
evaluator's shims) and records each launch as a GPU launch would compile it: Triton's own binder with the
CUDA backend turns the real arguments into the signature (pointer dtypes, i32/i64), the constexprs (including
the ints equal to 1 and the Nones that Triton specialises) and the 16-byte divisibility hints of pointers and
ints, and the launch options (num_warps, num_stages, ...) are those the autotuner or the caller passed. The
second (no interpreter) imports each submission file normally and compiles the distinct records for sm_90.

Covered: the launch the interpreter's autotuner shim chose (the first config left after pruning) for every
shape, plus for each autotuned kernel up to EXTRA_CONFIGS more of the configs it benchmarked (the
smallest and the largest); a kernel launched without an autotuner must also fit the H200's shared memory.
Not covered: the other autotune configs (an autotuner skips configs that fail to compile or do not fit, so
one compiling config suffices to run), shapes beyond those (other constexpr branches, other divisibility),
register spills and speed. The GPU machine runs an older Triton (3.6), whose frontend accepts and rejects
slightly different code: with HOTSHAPE_SM90_TRITON_PATH set (CI sets it) every record compiles with that one too.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

if __name__ == "__main__":  # the children: make the repo importable without an installed package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kernels_eval import registry  # noqa: E402
from tests.kernels_eval.test_triton_reference import EXTRA  # noqa: E402 - the CPU test's edge shapes, compiled too

REPO = Path(__file__).resolve().parents[2]
# A folder holding another Triton (`pip install --target DIR --no-deps triton==3.6.0`): the compile children
# import it first, so the launches recorded under the installed Triton's interpreter compile with that version.
OTHER_TRITON = "HOTSHAPE_SM90_TRITON_PATH"
SUBMISSION = REPO / "examples" / "submissions" / "triton_reference"
pytestmark = pytest.mark.slow  # ~30 s on 2 cores: an interpreter run of every operator, then ~95 compiles
RECORDS = "SM90_LAUNCH_RECORDS "
RESULTS = "SM90_COMPILE_RESULTS "
SKIP = "SM90_SKIP "
EXTRA_CONFIGS = 2  # benchmarked-but-not-chosen autotune configs compiled per kernel and operator
SHARED_BYTES_SM90 = 232448  # the most shared memory one block may opt into on H100/H200 (227 KB)
OPTION_KEYS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


def _operators() -> list[str]:
    known = set(registry.operator_names())
    return sorted(p.stem for p in SUBMISSION.glob("*.py") if p.stem in known)


def _marked(stdout: str, marker: str):
    lines = [ln for ln in stdout.splitlines() if ln.startswith(marker)]
    return json.loads(lines[-1][len(marker):]) if lines else None


@pytest.fixture(scope="module")
def launches() -> dict:
    """{"records": distinct launches, "errors": {op: error}} from running every operator under the interpreter."""
    for module in ("torch", "triton", "numpy"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed in this environment")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, __file__, "record"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    if (reason := _marked(proc.stdout, SKIP)) is not None:
        pytest.skip(reason)
    out = _marked(proc.stdout, RECORDS)
    assert proc.returncode == 0 and out is not None, (
        f"record child failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    return out


@pytest.fixture(scope="module", params=["installed"] + (["other"] if os.environ.get(OTHER_TRITON) else []))
def compiled(launches, tmp_path_factory, request) -> list[dict]:
    """One result per compiled record, from parallel compile children with a fresh Triton cache; once with the
    installed Triton and once more with the one in OTHER_TRITON's folder when that is set."""
    records = _to_compile(launches["records"])
    workers = max(1, min(len(records), os.cpu_count() or 1, 4))
    work = tmp_path_factory.mktemp("sm90")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"TRITON_CACHE_DIR": str(work / "cache")}
    if request.param == "other":  # another Triton (the GPU machine's version, say) shadows the installed one
        env["PYTHONPATH"] = os.pathsep.join(x for x in (os.environ[OTHER_TRITON], env.get("PYTHONPATH")) if x)
    procs = []
    for i in range(workers):  # dealt round-robin: each child gets a share of every operator's kernels
        (work / f"records{i}.json").write_text(json.dumps(records[i::workers]))
        with open(work / f"out{i}", "w") as out, open(work / f"err{i}", "w") as err:
            procs.append(subprocess.Popen([sys.executable, __file__, "compile", str(work / f"records{i}.json")],
                                          stdout=out, stderr=err, cwd=REPO, env=env))
    results = []
    for i, proc in enumerate(procs):
        rc = proc.wait(timeout=600)
        stdout, stderr = (work / f"out{i}").read_text(), (work / f"err{i}").read_text()
        if (reason := _marked(stdout, SKIP)) is not None:
            pytest.skip(reason)
        got = _marked(stdout, RESULTS)
        assert rc == 0 and got is not None, f"compile child failed (rc {rc}):\n{stderr[-4000:]}"
        results += got
    return results


def _to_compile(records: list[dict]) -> list[dict]:
    """Every chosen launch, plus the smallest and largest benchmarked-only configs of each autotuned kernel."""
    chosen = [r for r in records if r["chosen"]]
    benched: dict[tuple, list[dict]] = {}
    for r in records:
        if not r["chosen"]:
            benched.setdefault((r["op"], r["file"], r["qualname"]), []).append(r)
    for group in benched.values():
        group.sort(key=_config_size)
        chosen += [group[0], group[-1]][:EXTRA_CONFIGS] if len(group) > 1 else group
    return chosen


def _config_size(record: dict) -> tuple:
    ints = [v for _, v in record["constexprs"] if isinstance(v, int) and not isinstance(v, bool) and v > 1]
    opts = record["options"]
    return (sum(math.log2(v) for v in ints) + math.log2(opts.get("num_warps", 4)), opts.get("num_stages", 3),
            json.dumps(record, sort_keys=True))


def test_every_operator_file_launched_a_kernel(launches):
    ran = {r["op"] for r in launches["records"]}
    assert launches["errors"] == {}, f"operators that raised under the interpreter: {launches['errors']}"
    assert set(_operators()) <= ran, f"no launch recorded for {sorted(set(_operators()) - ran)}"


def test_every_launched_kernel_compiles_for_sm90(compiled):
    failures = [f"{r['op']}: {r['kernel']} {r['options']} {r['constexprs']}\n  {r['error']}"
                for r in compiled if r["error"]]
    assert compiled and not failures, f"{len(failures)} of {len(compiled)} compiles failed:\n" + "\n".join(failures)


def test_kernels_fit_hopper_shared_memory(compiled):
    """A plain launch over the limit fails on the GPU; an autotuned kernel needs one config per op that fits."""
    over = [r for r in compiled if not r["error"] and r["shared"] > SHARED_BYTES_SM90]
    plain = [r for r in over if not r["autotuned"]]
    fitting = {(r["op"], r["kernel"]) for r in compiled if not r["error"] and r["shared"] <= SHARED_BYTES_SM90}
    tuned = [r for r in over if r["autotuned"] and (r["op"], r["kernel"]) not in fitting]
    bad = [f"{r['op']}: {r['kernel']} {r['options']} uses {r['shared']} B" for r in plain + tuned]
    assert not bad, "over sm_90 shared memory:\n" + "\n".join(bad)


def _exit_without_ptxas() -> None:
    """Print SKIP and exit when this triton has no CUDA backend or no ptxas for sm_90 (nothing to compile with)."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        get_ptxas(90).path  # noqa: B018 - resolving the tool runs `ptxas --version`
    except Exception as exc:  # noqa: BLE001 - an ImportError or "Cannot find ptxas-blackwell" alike
        print(SKIP + json.dumps(f"cannot compile for sm_90 offline: no ptxas in the triton wheel ({exc})"),
              flush=True)
        raise SystemExit(0) from exc


# ---- child 1: python tests/kernels_eval/test_triton_reference_sm90.py record (TRITON_INTERPRET=1) --------

def _encode(value):
    """A constexpr value as JSON the compile child can rebuild."""
    import triton.language as tl

    if isinstance(value, tl.constexpr):
        value = value.value
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tl.dtype):
        return {"dtype": value.name}
    if isinstance(value, (tuple, list)):
        return {"tuple": [_encode(v) for v in value]}
    fn = getattr(value, "fn", value)
    if callable(fn) and hasattr(fn, "__code__"):
        return {"jit": [os.path.realpath(fn.__code__.co_filename), fn.__qualname__]}
    raise TypeError(f"cannot replay constexpr {value!r}")


class Recorder:
    """Wraps the interpreter's launch and records each as the CUDA backend would specialise it for sm_90."""

    def __init__(self) -> None:
        from triton.backends.compiler import GPUTarget
        from triton.backends.nvidia.compiler import CUDABackend

        self.backend = CUDABackend(GPUTarget("cuda", 90, 32))
        self.binders: dict = {}
        self.records: dict[str, dict] = {}
        self.op = None
        self.tuning = 0  # depth inside Autotuner.run
        self.benching = 0  # depth inside Autotuner._bench

    def install(self) -> None:
        from triton.runtime.autotuner import Autotuner
        from triton.runtime.interpreter import InterpretedFunction

        rec = self
        launch, tune, bench = InterpretedFunction.run, Autotuner.run, Autotuner._bench

        def run(fn_self, *args, **kwargs):
            if rec.op is not None and not kwargs.get("warmup"):
                rec.record(fn_self, args, kwargs)
            return launch(fn_self, *args, **kwargs)

        def counted(original, attr):
            def wrapper(*args, **kwargs):
                setattr(rec, attr, getattr(rec, attr) + 1)
                try:
                    return original(*args, **kwargs)
                finally:
                    setattr(rec, attr, getattr(rec, attr) - 1)
            return wrapper

        InterpretedFunction.run = run
        Autotuner.run = counted(tune, "tuning")
        Autotuner._bench = counted(bench, "benching")

    def _binder(self, fn_self):
        import inspect

        from triton.runtime.jit import KernelParam, create_function_from_signature

        if fn_self not in self.binders:
            sig = inspect.signature(fn_self.fn)
            dns = fn_self.kwargs.get("do_not_specialize") or ()
            dnsa = fn_self.kwargs.get("do_not_specialize_on_alignment") or ()
            params = [KernelParam(i, p, i in dns or p.name in dns, i in dnsa or p.name in dnsa)
                      for i, p in enumerate(sig.parameters.values())]
            self.binders[fn_self] = (params, create_function_from_signature(sig, params, self.backend))
        return self.binders[fn_self]

    def record(self, fn_self, args, kwargs) -> None:
        from triton.runtime.jit import find_paths_if, get_iterable_path

        params, binder = self._binder(fn_self)
        launch_kwargs = {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}
        bound, specialization, _ = binder(*args, **launch_kwargs)
        # As JITFunction._pack_args: constexprs are the paths typed "constexpr", attrs the specialisation strings.
        sigvals = [s[0] for s in specialization]
        signature = {p.name: v for p, v in zip(params, sigvals)}
        values = list(bound.values())
        constexprs = [[list(path), _encode(get_iterable_path(values, path))]
                      for path in find_paths_if(sigvals, lambda _, v: v == "constexpr")]
        attrvals = ["" if s[0] == "constexpr" else s[1] for s in specialization]
        attrs = [[list(path), get_iterable_path(attrvals, path)]
                 for path in find_paths_if(attrvals, lambda _, v: isinstance(v, str))]
        attrs = [a for a in attrs if a[1]]
        options = {k: launch_kwargs[k] for k in OPTION_KEYS if launch_kwargs.get(k) is not None}
        fn = fn_self.fn
        entry = {"op": self.op, "file": os.path.realpath(fn.__code__.co_filename), "qualname": fn.__qualname__,
                 "signature": signature, "constexprs": constexprs, "attrs": attrs, "options": options,
                 "autotuned": self.tuning > 0}
        key = json.dumps(entry, sort_keys=True)
        chosen = self.benching == 0
        if key in self.records:
            self.records[key]["chosen"] |= chosen
        else:
            self.records[key] = entry | {"chosen": chosen}


def _record_child() -> dict:
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("run with TRITON_INTERPRET=1 (set before triton is imported)")
    import torch

    from kernels_eval.harness.interpreter import patch_interpreter

    patch_interpreter()
    rec = Recorder()
    rec.install()
    errors = {}
    for op in _operators():
        path = SUBMISSION / f"{op}.py"
        mod_spec = importlib.util.spec_from_file_location(f"triton_reference_{op}", path)
        module = importlib.util.module_from_spec(mod_spec)
        reference = registry.load_reference(op)
        shapes = [(smoke.init, smoke.inputs) for smoke in registry.spec(op).smoke] + EXTRA.get(op, [])
        try:
            mod_spec.loader.exec_module(module)
            for init, inputs in shapes:
                given = reference.make_inputs(**inputs, device="cpu", generator=torch.Generator().manual_seed(0))
                rec.op = op
                try:
                    with torch.no_grad():
                        module.Model(**init)(**given)
                finally:
                    rec.op = None
        except Exception as exc:  # noqa: BLE001 - reported by the parent, which names the operator
            errors[op] = f"{type(exc).__name__}: {exc}"[:1000]
    return {"records": list(rec.records.values()), "errors": errors}


# ---- child 2: python tests/kernels_eval/test_triton_reference_sm90.py compile RECORDS.json -----------------

def _jit_functions(file: str, modules: dict) -> dict:
    """{qualname: JITFunction} of every @triton.jit function in a submission file, imported normally."""
    from triton.runtime.jit import JITFunction

    if file not in modules:
        mod_spec = importlib.util.spec_from_file_location(f"sm90_{Path(file).stem}", file)
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
        found = {}
        for obj in vars(module).values():
            while obj is not None and not isinstance(obj, JITFunction):
                obj = getattr(obj, "fn", None)
            if obj is not None and os.path.realpath(obj.fn.__code__.co_filename) == file:
                found[obj.fn.__qualname__] = obj
        modules[file] = found
    return modules[file]


def _decode(value, modules: dict):
    import triton.language as tl

    if isinstance(value, dict) and "dtype" in value:
        return getattr(tl, value["dtype"]) if hasattr(tl, value["dtype"]) else tl.dtype(value["dtype"])
    if isinstance(value, dict) and "tuple" in value:
        return tuple(_decode(v, modules) for v in value["tuple"])
    if isinstance(value, dict) and "jit" in value:
        return _jit_functions(value["jit"][0], modules)[value["jit"][1]]
    return value


def _compile_one(record: dict, modules: dict) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    out = {"op": record["op"], "kernel": record["qualname"], "options": record["options"],
           "constexprs": {str(p): v for p, v in record["constexprs"]}, "autotuned": record["autotuned"],
           "shared": 0, "error": ""}
    try:
        fn = _jit_functions(record["file"], modules)[record["qualname"]]
        constexprs = {tuple(p): _decode(v, modules) for p, v in record["constexprs"]}
        attrs = {tuple(p): [["tt.divisibility", 16]] for p, a in record["attrs"] if "D" in a}
        src = ASTSource(fn, record["signature"], constexprs, attrs)
        kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(record["options"]))
        out["shared"] = int(kernel.metadata.shared)
    except Exception as exc:  # noqa: BLE001 - a compile error is this record's result
        lines = [ln for ln in f"{type(exc).__name__}: {exc}".splitlines() if ln.strip()]
        out["error"] = "\n  ".join(lines[:12])[:2000]
    return out


def _compile_child(records: list[dict]) -> list[dict]:
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise SystemExit("run without TRITON_INTERPRET (the kernels must be real JITFunctions)")
    modules: dict = {}
    return [_compile_one(r, modules) for r in records]


if __name__ == "__main__":
    _exit_without_ptxas()
    if sys.argv[1] == "record":
        print(RECORDS + json.dumps(_record_child()), flush=True)
    else:
        print(RESULTS + json.dumps(_compile_child(json.loads(Path(sys.argv[2]).read_text()))), flush=True)
