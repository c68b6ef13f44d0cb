"""A release's problems as a FlashInfer-Trace dataset: one Definition per (operator, init kwargs, dtypes) and one
workload trace per problem (the published schema of flashinfer-ai/flashinfer-bench, `flashinfer_bench/data`:
definition.py, workload.py, trace.py; our JSON Schema of it is kernels_eval/flashinfer_schema.json).

Concrete input shapes and output dtypes come from each operator's `make_inputs` and reference run under a
fake-tensor mode (no memory is allocated); which kwarg or input dimension each output dimension follows is
learnt from the operator's smoke shapes, run for real. Each definition's `reference` is self-contained
(kernels_eval/flashinfer_reference.py: torch only). Inputs are {"type": "random"} except those whose values
carry structure (ids, indices, lengths: kernels_eval/flashinfer_inputs.yaml), which a random tensor would make
invalid: their values, from hotshape's make_inputs at the problem, go in the workload's safetensors file under
blob/, and what the operator requires of them in the input's description. Only public data goes out: the
manifest's operators, kwargs and dtypes, problem ids and weights, and those generated values.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from functools import cache
from pathlib import Path

import yaml

from kernels_eval.flashinfer_reference import NotSelfContained, reference_source

# The dtype names flashinfer-bench reads (flashinfer_bench.utils.dtype_str_to_torch_dtype, 0.1.2).
DTYPE_NAMES = {"torch.float32": "float32", "torch.float16": "float16", "torch.bfloat16": "bfloat16",
               "torch.float8_e4m3fn": "float8_e4m3fn", "torch.float8_e5m2": "float8_e5m2", "torch.int64": "int64",
               "torch.int32": "int32", "torch.int16": "int16", "torch.int8": "int8", "torch.bool": "bool"}


# Materialising a problem's inputs (for its structured ones) is refused above this many bytes of inputs.
MAX_INPUT_BYTES = 2 << 30


class NotExportable(ValueError):
    """An operator the FlashInfer schema cannot carry as it stands; the message says why."""


@cache
def structured_inputs() -> dict[str, dict[str, str]]:
    """{operator: {input: what the operator requires of its values}} (flashinfer_inputs.yaml)."""
    return yaml.safe_load(Path(__file__).with_name("flashinfer_inputs.yaml").read_text())


def _itemsize(dtype: str) -> int:
    return {"float32": 4, "int32": 4, "int64": 8, "float16": 2, "bfloat16": 2, "int16": 2}.get(dtype, 1)


def _int_kwargs(kwargs: dict) -> dict[str, int]:
    return {k: v for k, v in kwargs.items() if isinstance(v, int) and not isinstance(v, bool)}


def _shapes(op: str, input_kwargs: dict, fake: bool) -> dict[str, tuple[tuple[int, ...], str]]:
    """{input name: (shape, FlashInfer dtype)} of the operator's inputs at `input_kwargs`."""
    import torch

    mod = importlib.import_module(f"kernels_eval.operators.{op}")
    if fake:
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode(allow_non_fake_inputs=True):
            inputs = mod.make_inputs(**input_kwargs, device="cpu")
    else:
        inputs = mod.make_inputs(**input_kwargs, device="cpu")
    out = {}
    for name, value in inputs.items():
        if not isinstance(value, torch.Tensor) or str(value.dtype) not in DTYPE_NAMES:
            raise NotExportable(f"{op}: input {name} is {getattr(value, 'dtype', type(value).__name__)}, which the "
                                f"FlashInfer schema has no dtype for")
        out[name] = (tuple(int(d) for d in value.shape), DTYPE_NAMES[str(value.dtype)])
    return out


def _follow(value: int, kwargs: dict[str, int], inputs: dict) -> set:
    """What a dimension of size `value` could be: ('kw', name) of an int kwarg, ('in', tensor, dim) of an input."""
    found = {("kw", k) for k, v in kwargs.items() if v == value}
    return found | {("in", t, i) for t, (shape, _) in inputs.items() for i, d in enumerate(shape) if d == value}


def output_rules(op: str, ranks: dict[str, int]) -> dict[str, tuple[list, str]]:
    """{output name: ([what each dimension follows], dtype)} learnt from the operator's smoke shapes whose inputs
    have `ranks` (a smoke shape of another rank, silu_and_mul's [1, 2, 32] say, has other outputs)."""
    import torch

    work = importlib.import_module(f"catalogue.operators.{op}")
    mod = importlib.import_module(f"kernels_eval.operators.{op}")
    rules: dict[str, tuple[list, str]] = {}
    for smoke in work.SMOKE:
        inputs = mod.make_inputs(**smoke.inputs, device="cpu")
        shapes = {k: (tuple(v.shape), "") for k, v in inputs.items() if isinstance(v, torch.Tensor)}
        if {k: len(v[0]) for k, v in shapes.items()} != ranks:
            continue
        with torch.no_grad():
            out = mod.Model(**smoke.init)(**inputs)
        outs = out if isinstance(out, dict) else dict(zip(work.OUTPUTS, out if isinstance(out, (tuple, list)) else (out,)))
        kwargs = _int_kwargs(smoke.inputs)
        for name, t in outs.items():
            cands = [_follow(int(d), kwargs, shapes) for d in t.shape]
            if name in rules:  # every smoke shape must agree on what each dimension follows
                cands = [a & b for a, b in zip(rules[name][0], cands)] if len(cands) == len(rules[name][0]) else None
                if cands is None:
                    raise NotExportable(f"{op}: output {name} changes rank between smoke shapes")
            rules[name] = (cands, DTYPE_NAMES.get(str(t.dtype), ""))
    if not rules:
        raise NotExportable(f"{op}: no smoke shape has inputs of the ranks of its problems")
    for name, (_, dtype) in rules.items():
        if not dtype:
            raise NotExportable(f"{op}: output {name} has a dtype the FlashInfer schema lacks")
    # a kwarg before an input dimension: its name says what the axis is; None: it follows neither (half a
    # dimension, a constant), so its size is taken from the output's own shape at each problem
    return {name: ([sorted(c, key=lambda x: (x[0] != "kw", x))[0] if c else None for c in cands], dtype)
            for name, (cands, dtype) in rules.items()}


def output_dtypes(op: str, problem: dict, ranks: dict[str, int]) -> dict[str, str]:
    """{output: FlashInfer dtype} at a problem: the reference run for real on a smoke shape of the problem's input
    ranks with the problem's string kwargs (its dtypes: bf16, fp8, ...) in place of the smoke shape's."""
    import torch

    work = importlib.import_module(f"catalogue.operators.{op}")
    mod = importlib.import_module(f"kernels_eval.operators.{op}")
    strings = {part: {k: v for k, v in problem[part].items() if isinstance(v, str)} for part in ("init_kwargs", "input_kwargs")}
    for smoke in work.SMOKE:
        init = {**smoke.init, **{k: v for k, v in strings["init_kwargs"].items() if k in smoke.init}}
        kwargs = {**smoke.inputs, **{k: v for k, v in strings["input_kwargs"].items() if k in smoke.inputs}}
        inputs = mod.make_inputs(**kwargs, device="cpu")
        if {k: v.dim() for k, v in inputs.items() if isinstance(v, torch.Tensor)} != ranks:
            continue
        with torch.no_grad():
            out = mod.Model(**init)(**inputs)
        outs = out if isinstance(out, dict) else dict(zip(work.OUTPUTS, out if isinstance(out, (tuple, list)) else (out,)))
        return {k: DTYPE_NAMES.get(str(v.dtype), str(v.dtype)) for k, v in outs.items()}
    raise NotExportable(f"{op}: no smoke shape has inputs of the ranks of its problems")


def _outputs(op: str, problem: dict) -> dict[str, tuple[tuple[int, ...], str]]:
    """{output: (shape, FlashInfer dtype)} at a problem, from its reference run under a fake-tensor mode."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    work = importlib.import_module(f"catalogue.operators.{op}")
    mod = importlib.import_module(f"kernels_eval.operators.{op}")
    try:
        with FakeTensorMode(allow_non_fake_inputs=True), torch.no_grad():
            out = mod.Model(**problem["init_kwargs"])(**mod.make_inputs(**problem["input_kwargs"], device="cpu"))
    except Exception as exc:  # noqa: BLE001 - data-dependent shapes (bincount, nonzero) cannot be faked
        raise NotExportable(f"{op}: output shapes depend on the input data ({type(exc).__name__})") from exc
    outs = out if isinstance(out, dict) else dict(zip(work.OUTPUTS, out if isinstance(out, (tuple, list)) else (out,)))
    return {k: (tuple(int(d) for d in v.shape), DTYPE_NAMES.get(str(v.dtype), str(v.dtype))) for k, v in outs.items()}


def _axis_names(op: str, problems: list[dict], concrete: list[dict]) -> dict[tuple[str, int], str]:
    """(input, dim) -> axis name: the input kwarg that equals it in every problem (the one the smoke shapes
    agree on first), else `<input>_d<dim>`."""
    work = importlib.import_module(f"catalogue.operators.{op}")
    ranks = {t: len(shape) for t, (shape, _) in concrete[0].items()}
    smoke_shapes, smoke = {}, work.SMOKE[0]
    for smoke in work.SMOKE:
        smoke_shapes = _shapes(op, smoke.inputs, fake=False)
        if {t: len(shape) for t, (shape, _) in smoke_shapes.items()} == ranks:
            break
    names = {}
    for t, (shape, _) in concrete[0].items():
        for i in range(len(shape)):
            cands = [k for k, v in _int_kwargs(smoke.inputs).items() if smoke_shapes.get(t, ((),))[0][i:i + 1] == (v,)]
            cands += list(_int_kwargs(problems[0]["input_kwargs"]))
            name = next((k for k in cands if all(_int_kwargs(p["input_kwargs"]).get(k) == c[t][0][i]
                                                 for p, c in zip(problems, concrete))), None)
            names[(t, i)] = name or f"{t}_d{i}"
    return names


def definition_group(op: str, problems: list[dict], concrete: list[dict], release_name: str) -> tuple[dict, list[dict]]:
    """The Definition of one (operator, init kwargs, dtypes, input ranks) group and the workload trace of each of
    its problems (`concrete`: each problem's input shapes). Output dtypes are the problems' own (the group shares
    its dtype kwargs), never a smoke shape's."""
    names = _axis_names(op, problems, concrete)
    outputs = output_rules(op, {t: len(shape) for t, (shape, _) in concrete[0].items()})
    dtypes = output_dtypes(op, problems[0], {t: len(shape) for t, (shape, _) in concrete[0].items()})
    outputs = {o: (rule, dtypes.get(o, dtype)) for o, (rule, dtype) in outputs.items()}
    values: list[dict[str, int]] = []  # per problem: axis -> value
    for p, c in zip(problems, concrete):
        v = {names[(t, i)]: d for t, (shape, _) in c.items() for i, d in enumerate(shape)}
        kw = _int_kwargs(p["input_kwargs"])
        for rule, _ in outputs.values():
            for r in rule:
                if r is not None and r[0] == "kw":
                    v.setdefault(r[1], kw[r[1]])
        if any(r is None for rule, _ in outputs.values() for r in rule):
            shapes = _outputs(op, p)
            v.update({f"{o}_d{i}": shapes[o][0][i] for o, (rule, _) in outputs.items()
                      for i, r in enumerate(rule) if r is None})
        values.append(v)
    axes = {}
    for name in values[0]:
        seen = {v[name] for v in values}
        axes[name] = ({"type": "const", "value": seen.pop()} if len(seen) == 1 else {"type": "var"})

    def out_axis(o: str, i: int, r) -> str:
        return f"{o}_d{i}" if r is None else r[1] if r[0] == "kw" else names[(r[1], r[2])]

    init = problems[0]["init_kwargs"]
    structured = structured_inputs().get(op, {})
    unlisted = [t for t, (_, dtype) in concrete[0].items() if dtype.startswith(("int", "bool")) and t not in structured]
    if unlisted:
        raise NotExportable(f"{op}: integer input {', '.join(unlisted)} has no rule in kernels_eval/flashinfer_inputs.yaml "
                            f"(random values would not be valid)")
    try:
        reference = reference_source(op, init, list(concrete[0]), list(outputs))
    except NotSelfContained as exc:
        raise NotExportable(str(exc)) from exc
    key = json.dumps([op, init, problems[0]["dtypes"], [len(sh) for sh, _ in concrete[0].values()]], sort_keys=True)
    name = f"{op}_h{hashlib.sha256(key.encode()).hexdigest()[:10]}"

    def tensor(t: str, shape: list[str], dtype: str) -> dict:
        return {"shape": shape, "dtype": dtype, **({"description": structured[t]} if t in structured else {})}

    definition = {
        "name": name, "op_type": op, "axes": axes,
        "inputs": {t: tensor(t, [names[(t, i)] for i in range(len(shape))], dtype)
                   for t, (shape, dtype) in concrete[0].items()},
        "outputs": {o: {"shape": [out_axis(o, i, r) for i, r in enumerate(rule)], "dtype": dtype} for o, (rule, dtype) in outputs.items()},
        "reference": reference, "tags": ["hotshape", f"hotshape:release={release_name}"],
        "description": f"hotshape release {release_name}: {len(problems)} production-weighted problems of {op} "
                       f"with init kwargs {json.dumps(init, sort_keys=True)}. The reference needs torch only. "
                       + (f"Inputs {', '.join(sorted(set(structured) & set(concrete[0])))} carry structure (see their "
                          f"descriptions): each workload gives their values in its safetensors file; the others are random."
                          if set(structured) & set(concrete[0]) else "Every input is random.")}
    var = [a for a, spec in axes.items() if spec["type"] == "var"]

    def inputs_of(p: dict) -> dict:
        return {t: ({"type": "safetensors", "path": blob_path(op, name, p["problem_id"]), "tensor_key": t}
                    if t in structured else {"type": "random"}) for t in concrete[0]}

    workloads = [{"definition": name, "solution": None, "evaluation": None,
                  "workload": {"uuid": p["problem_id"], "axes": {a: v[a] for a in var}, "inputs": inputs_of(p)}}
                 for p, v in zip(problems, values)]
    return definition, workloads


def blob_path(op: str, definition: str, problem_id: str) -> str:
    """Where a workload's structured input values go, relative to the dataset's root."""
    return f"blob/workloads/{op}/{definition}/{problem_id}.safetensors"


def write_structured_inputs(op: str, problem: dict, names: list[str], path: Path, concrete: dict) -> None:
    """The problem's structured inputs, as hotshape's make_inputs draws them, in a safetensors file at `path`."""
    import torch
    from safetensors.torch import save_file

    size = sum(_itemsize(dtype) * _numel(shape) for shape, dtype in concrete.values())
    if size > MAX_INPUT_BYTES:
        raise NotExportable(f"{op} problem {problem['problem_id']}: its inputs are {size / 2**30:.1f} GiB, over the "
                            f"{MAX_INPUT_BYTES / 2**30:.0f} GiB the export materialises to draw its structured inputs")
    mod = importlib.import_module(f"kernels_eval.operators.{op}")
    with torch.no_grad():
        inputs = mod.make_inputs(**problem["input_kwargs"], device="cpu")
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({t: inputs[t].contiguous() for t in names}, str(path))


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def export_flashinfer(release, out: str | Path, ops: list[str] | None = None) -> dict:
    """The release's problems written under `out` as definitions/<op>/<name>.json, workloads/<op>/<name>.jsonl,
    blob/workloads/... (structured input values) and hotshape_weights.json (problem id -> weight per version);
    what was written and which operators (or problems, where their inputs are too large to draw) were not."""
    out = Path(out)
    manifest = release.manifest.sort("operator", "problem_id")
    groups: dict[tuple, list[dict]] = {}
    for r in manifest.iter_rows(named=True):
        if ops is None or r["operator"] in ops:
            row = {**r, "init_kwargs": json.loads(r["init_kwargs"]), "input_kwargs": json.loads(r["input_kwargs"])}
            groups.setdefault((r["operator"], r["init_kwargs"], r["dtypes"]), []).append(row)
    summary = {"definitions": 0, "workloads": 0, "skipped": {}, "skipped_problems": {}}
    built = []
    for (op, _, _), problems in sorted(groups.items()):
        if op in summary["skipped"]:
            continue
        try:
            concrete = [_shapes(op, p["input_kwargs"], fake=True) for p in problems]
            by_rank: dict[tuple, list[int]] = {}  # a definition has one rank per tensor
            for i, c in enumerate(concrete):
                by_rank.setdefault(tuple(len(sh) for sh, _ in c.values()), []).append(i)
            built += [(definition_group(op, [problems[i] for i in idx], [concrete[i] for i in idx], release.name),
                       [problems[i] for i in idx], [concrete[i] for i in idx]) for idx in by_rank.values()]
        except NotExportable as exc:
            summary["skipped"][op] = str(exc)
    exported = set()
    for (definition, workloads), problems, concrete in built:
        op = definition["op_type"]
        if op in summary["skipped"]:
            continue
        structured = [t for t in definition["inputs"] if t in structured_inputs().get(op, {})]
        kept = []
        for trace, problem, shapes in zip(workloads, problems, concrete):
            if structured:
                try:
                    write_structured_inputs(op, problem, structured, out / blob_path(op, definition["name"], problem["problem_id"]), shapes)
                except NotExportable as exc:
                    summary["skipped_problems"][problem["problem_id"]] = str(exc)
                    continue
            kept.append(trace)
            exported.add(problem["problem_id"])
        if not kept:
            continue
        d = out / "definitions" / op / f"{definition['name']}.json"
        w = out / "workloads" / op / f"{definition['name']}.jsonl"
        d.parent.mkdir(parents=True, exist_ok=True)
        w.parent.mkdir(parents=True, exist_ok=True)
        d.write_text(json.dumps(definition, indent=2) + "\n")
        w.write_text("".join(json.dumps(x, sort_keys=True) + "\n" for x in kept))
        summary["definitions"] += 1
        summary["workloads"] += len(kept)
    weights = {}
    for version in release.versions:
        for r in release.weights(version).iter_rows(named=True):
            if r["problem_id"] in exported:
                weights.setdefault(r["problem_id"], {})[f"v{version}"] = r["weight"]
    (out / "hotshape_weights.json").write_text(json.dumps(
        {"release": release.name, "note": "weight of each workload (uuid = problem id) per weights version",
         "weights": dict(sorted(weights.items()))}, indent=2) + "\n")
    return summary
