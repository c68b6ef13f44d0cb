"""A release's problems as a FlashInfer-Trace dataset: one Definition per (operator, init kwargs, dtypes) and one
workload trace per problem (the published schema of flashinfer-ai/flashinfer-bench, `flashinfer_bench/data`:
definition.py, workload.py, trace.py; our JSON Schema of it is kernels_eval/flashinfer_schema.json).

Concrete input shapes come from each operator's `make_inputs` run under a fake-tensor mode (no memory is
allocated); which kwarg or input dimension each output dimension follows is learnt from the operator's smoke
shapes, run for real. Only public data goes out: the manifest's operators, kwargs and dtypes, problem ids and
weights. Inputs are declared random: operators whose inputs carry structure (routing ids, block tables, cache
slots) need hotshape's make_inputs to be meaningful.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from pathlib import Path

DTYPE_NAMES = {"torch.float32": "float32", "torch.float16": "float16", "torch.bfloat16": "bfloat16",
               "torch.float8_e4m3fn": "float8_e4m3", "torch.float8_e5m2": "float8_e5m2", "torch.int64": "int64",
               "torch.int32": "int32", "torch.int16": "int16", "torch.int8": "int8", "torch.bool": "bool"}


class NotExportable(ValueError):
    """An operator the FlashInfer schema cannot carry as it stands; the message says why."""


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

    work = importlib.import_module(f"catalogue.work.{op}")
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


def _output_shapes(op: str, problem: dict) -> dict[str, tuple[int, ...]]:
    """The operator's output shapes at a problem, from its reference run under a fake-tensor mode."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    work = importlib.import_module(f"catalogue.work.{op}")
    mod = importlib.import_module(f"kernels_eval.operators.{op}")
    try:
        with FakeTensorMode(allow_non_fake_inputs=True), torch.no_grad():
            out = mod.Model(**problem["init_kwargs"])(**mod.make_inputs(**problem["input_kwargs"], device="cpu"))
    except Exception as exc:  # noqa: BLE001 - data-dependent shapes (bincount, nonzero) cannot be faked
        raise NotExportable(f"{op}: output shapes depend on the input data ({type(exc).__name__})") from exc
    outs = out if isinstance(out, dict) else dict(zip(work.OUTPUTS, out if isinstance(out, (tuple, list)) else (out,)))
    return {k: tuple(int(d) for d in v.shape) for k, v in outs.items()}


def _axis_names(op: str, problems: list[dict], concrete: list[dict]) -> dict[tuple[str, int], str]:
    """(input, dim) -> axis name: the input kwarg that equals it in every problem (the one the smoke shapes
    agree on first), else `<input>_d<dim>`."""
    work = importlib.import_module(f"catalogue.work.{op}")
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
    its problems (`concrete`: each problem's input shapes)."""
    names = _axis_names(op, problems, concrete)
    outputs = output_rules(op, {t: len(shape) for t, (shape, _) in concrete[0].items()})
    values: list[dict[str, int]] = []  # per problem: axis -> value
    for p, c in zip(problems, concrete):
        v = {names[(t, i)]: d for t, (shape, _) in c.items() for i, d in enumerate(shape)}
        kw = _int_kwargs(p["input_kwargs"])
        for rule, _ in outputs.values():
            for r in rule:
                if r is not None and r[0] == "kw":
                    v.setdefault(r[1], kw[r[1]])
        if any(r is None for rule, _ in outputs.values() for r in rule):
            shapes = _output_shapes(op, p)
            v.update({f"{o}_d{i}": shapes[o][i] for o, (rule, _) in outputs.items()
                      for i, r in enumerate(rule) if r is None})
        values.append(v)
    axes = {}
    for name in values[0]:
        seen = {v[name] for v in values}
        axes[name] = ({"type": "const", "value": seen.pop()} if len(seen) == 1 else {"type": "var"})

    def out_axis(o: str, i: int, r) -> str:
        return f"{o}_d{i}" if r is None else r[1] if r[0] == "kw" else names[(r[1], r[2])]

    init = problems[0]["init_kwargs"]
    signature = ", ".join(concrete[0])
    call = ", ".join(f"{k}={k}" for k in concrete[0])
    order = tuple(outputs)
    reference = (f"from kernels_eval.operators.{op} import Model\n\n\n"
                 f"def run({signature}):\n"
                 f"    out = Model(**{json.dumps(init)})({call})\n"
                 f"    return tuple(out[k] for k in {order!r}) if isinstance(out, dict) else out\n")
    key = json.dumps([op, init, problems[0]["dtypes"], [len(sh) for sh, _ in concrete[0].values()]], sort_keys=True)
    name = f"{op}_h{hashlib.sha256(key.encode()).hexdigest()[:10]}"
    definition = {
        "name": name, "op_type": op, "axes": axes,
        "inputs": {t: {"shape": [names[(t, i)] for i in range(len(shape))], "dtype": dtype}
                   for t, (shape, dtype) in concrete[0].items()},
        "outputs": {o: {"shape": [out_axis(o, i, r) for i, r in enumerate(rule)], "dtype": dtype} for o, (rule, dtype) in outputs.items()},
        "reference": reference, "tags": ["hotshape", f"hotshape:release={release_name}"],
        "description": f"hotshape release {release_name}: {len(problems)} production-weighted problems of {op} "
                       f"with init kwargs {json.dumps(init, sort_keys=True)}; the reference needs the hotshape "
                       f"package (its PyTorch reference of {op})."}
    var = [a for a, spec in axes.items() if spec["type"] == "var"]
    workloads = [{"definition": name, "solution": None, "evaluation": None,
                  "workload": {"uuid": p["problem_id"], "axes": {a: v[a] for a in var},
                               "inputs": {t: {"type": "random"} for t in concrete[0]}}}
                 for p, v in zip(problems, values)]
    return definition, workloads


def export_flashinfer(release, out: str | Path, ops: list[str] | None = None) -> dict:
    """The release's problems written under `out` as definitions/<op>/<name>.json, workloads/<op>/<name>.jsonl and
    hotshape_weights.json (problem id -> weight per version); what was written and which operators were not."""
    out = Path(out)
    manifest = release.manifest.sort("operator", "problem_id")
    groups: dict[tuple, list[dict]] = {}
    for r in manifest.iter_rows(named=True):
        if ops is None or r["operator"] in ops:
            row = {**r, "init_kwargs": json.loads(r["init_kwargs"]), "input_kwargs": json.loads(r["input_kwargs"])}
            groups.setdefault((r["operator"], r["init_kwargs"], r["dtypes"]), []).append(row)
    summary = {"definitions": 0, "workloads": 0, "skipped": {}}
    built = []
    for (op, _, _), problems in sorted(groups.items()):
        if op in summary["skipped"]:
            continue
        try:
            concrete = [_shapes(op, p["input_kwargs"], fake=True) for p in problems]
            by_rank: dict[tuple, list[int]] = {}  # a definition has one rank per tensor
            for i, c in enumerate(concrete):
                by_rank.setdefault(tuple(len(sh) for sh, _ in c.values()), []).append(i)
            built += [definition_group(op, [problems[i] for i in idx], [concrete[i] for i in idx], release.name)
                      for idx in by_rank.values()]
        except NotExportable as exc:
            summary["skipped"][op] = str(exc)
    for definition, workloads in built:
        if definition["op_type"] in summary["skipped"]:
            continue
        op = definition["op_type"]
        d = out / "definitions" / op / f"{definition['name']}.json"
        w = out / "workloads" / op / f"{definition['name']}.jsonl"
        d.parent.mkdir(parents=True, exist_ok=True)
        w.parent.mkdir(parents=True, exist_ok=True)
        d.write_text(json.dumps(definition, indent=2) + "\n")
        w.write_text("".join(json.dumps(x, sort_keys=True) + "\n" for x in workloads))
        summary["definitions"] += 1
        summary["workloads"] += len(workloads)
    exported = {w for problems in groups.values() for w in (p["problem_id"] for p in problems)
                if problems[0]["operator"] not in summary["skipped"]}
    weights = {}
    for version in release.versions:
        for r in release.weights(version).iter_rows(named=True):
            if r["problem_id"] in exported:
                weights.setdefault(r["problem_id"], {})[f"v{version}"] = r["weight"]
    (out / "hotshape_weights.json").write_text(json.dumps(
        {"release": release.name, "note": "weight of each workload (uuid = problem id) per weights version",
         "weights": dict(sorted(weights.items()))}, indent=2) + "\n")
    return summary
