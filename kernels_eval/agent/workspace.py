"""`hotshape workspace`: one folder per operator holding what an agent may see while generating — the
contract, the PyTorch reference, the problems' shapes and public weights, a README with the self-check — and
nothing sealed, proved by the release's own leak check before the folder appears."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from catalogue import registry
from catalogue.vocabulary import PHASES, UNKNOWN_PHASE
from kernels_eval.agent.contract import operator_contract, reference_source
from release.bundle import read_release
from release.sealing import LeakError, assert_no_leak, public_vocabulary, sealed_strings

LAYOUTS = ("hotshape", "atrex")
PHASE_COLUMNS = ("weight_prefill", "weight_decode", "weight_mixed")


class WorkspaceLeak(ValueError):
    """A file of a workspace carried a sealed string of its release; nothing was written."""


def public_problems(release, weights_version=None) -> dict[str, list[dict]]:
    """operator → its problems as an agent may see them: id, kwargs, dtypes and weights (public files only)."""

    weights = release.weights(weights_version)
    rows = release.manifest.join(weights, on="problem_id", how="left").sort(["operator", "problem_id"])
    out: dict[str, list[dict]] = {}
    for r in rows.iter_rows(named=True):
        out.setdefault(r["operator"], []).append({
            "problem_id": r["problem_id"], "init_kwargs": json.loads(r["init_kwargs"]),
            "input_kwargs": json.loads(r["input_kwargs"]), "dtypes": json.loads(r["dtypes"] or "{}"),
            "weight": r.get("weight") or 0.0,
            **{c: r.get(c) or 0.0 for c in PHASE_COLUMNS if c in weights.columns}})
    return out


def _write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def _readme(op: str, problems: list[dict], contract: dict, folder: str) -> str:
    sig = contract["signatures"]
    return "\n".join([
        f"# {op}", "",
        f"Write `{op}.py` defining `class Model(nn.Module)` with the reference's constructor and forward:", "",
        "```python", "class Model(nn.Module):", f"    {sig['init']}: ...", f"    {sig['forward']}: ...", "```", "",
        "- semantics: `reference.py` (the PyTorch reference the evaluator compares against)",
        f"- contract: `contract.json` (init/input kwargs, outputs {contract['outputs']}, in-place outputs "
        f"{contract['inplace_outputs'] or 'none'}, tolerance {contract['tolerance']}, dtypes)",
        f"- problems: `{folder}` ({len(problems)} shapes with their weights; the score weights each problem so)",
        "", "Self-check (compile and correctness on the smoke shapes; the Triton interpreter on a CPU):", "",
        "```", f"hotshape check {op}.py --op {op}", f"hotshape check {op}.py --op {op} --device cuda   # on a GPU",
        "```", "",
        "Scored: compiled, correct on fresh random inputs, native (>= 95% of GPU time in this file's own "
        "@triton.jit kernels), then the median kernel time of judged timed calls.", ""])


def _write_hotshape(root: Path, op: str, problems: list[dict], contract: dict) -> list[str]:
    folder = root / op
    folder.mkdir(parents=True)
    _write_json(folder / "contract.json", contract)
    _write_json(folder / "problems.json", problems)
    (folder / "reference.py").write_text(reference_source(op))
    (folder / "README.md").write_text(_readme(op, problems, contract, "problems.json"))
    return [op]


def _phase_tag(problems: list[dict]) -> str:
    phases = [p for p in PHASES if any(x.get(f"weight_{p}", 0) > 0 for x in problems)]
    return "/".join(phases) or UNKNOWN_PHASE


def _write_atrex(root: Path, op: str, problems: list[dict], contract: dict) -> list[str]:
    """Atrex-Bench's per-operator layout (data/<op>/shapes.json + metadata.json) with the public fields only:
    no upstream origin, no production timings, no roofline.json."""
    folder = root / "data" / op
    folder.mkdir(parents=True)
    shapes = {str(i): {"init_kwargs": p["init_kwargs"] or None, "input_kwargs": p["input_kwargs"]}
              for i, p in enumerate(problems)}
    first = problems[0]["dtypes"] if problems else {}
    meta = {**{k: first[k] for k in ("dtype", "input_dtypes", "output_dtypes") if k in first},
            "phase": _phase_tag(problems), "importance_score": sum(p["weight"] for p in problems),
            "shapes": {str(i): {"problem_id": p["problem_id"], "weight": p["weight"]}
                       for i, p in enumerate(problems)}}
    _write_json(folder / "shapes.json", shapes)
    _write_json(folder / "metadata.json", meta)
    _write_json(folder / "contract.json", contract)
    (folder / "reference.py").write_text(reference_source(op))
    (folder / "README.md").write_text(_readme(op, problems, contract, "shapes.json"))
    return [op]


def build_workspace(release_path: str | Path, out: str | Path, ops: list[str] | None = None,
                    layout: str = "hotshape", weights_version=None) -> dict:
    """Write the agent workspace of a release's operators at `out` (which must not exist); a summary with the
    leak check's report. A sealed string in any file stops it: WorkspaceLeak, and nothing is left at `out`."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r}: one of {LAYOUTS}")
    out = Path(out)
    if out.exists():
        raise FileExistsError(f"{out}: already exists; give a new --out")
    release = read_release(release_path)
    by_op = public_problems(release, weights_version)
    chosen = sorted(op for op in by_op if (ops is None or op in ops) and registry.is_benchmarkable(op))
    missing = sorted(set(ops or ()) - set(chosen))
    if missing:
        raise KeyError(f"not in the release or without a reference: {', '.join(missing)}")
    write = _write_atrex if layout == "atrex" else _write_hotshape
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent if out.parent.exists() else None))
    try:
        for op in chosen:
            contract = operator_contract(op, [p["dtypes"] for p in by_op[op]])
            write(tmp, op, by_op[op], contract)
        if layout == "atrex":
            _write_json(tmp / "data" / "operator_importance.json", {"operators": {
                op: {"importance_score": sum(p["weight"] for p in by_op[op]), "phase": _phase_tag(by_op[op])}
                for op in chosen}})
        (tmp / "README.md").write_text(
            f"# Kernel workspace: {len(chosen)} operators\n\nOne folder per operator"
            f"{' under data/' if layout == 'atrex' else ''}; each README says what to write and how to "
            "self-check it (`hotshape check FILE --op OP`).\n\n" + "".join(f"- {op}\n" for op in chosen))
        vocab = public_vocabulary(release.manifest) | {"prefill", "decode", "mixed", "unknown"}
        try:
            report = assert_no_leak(tmp, sealed_strings(release.sealed("provenance")), vocab)
        except LeakError as exc:
            raise WorkspaceLeak(str(exc).replace(str(tmp), str(out))) from None
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"out": str(out), "layout": layout, "operators": chosen,
            "problems": sum(len(by_op[op]) for op in chosen), "leak_check": report.summary()}
