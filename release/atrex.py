"""Atrex-Bench data layout ⇄ release: import its 30 operators / 440 shapes, export them back.

Weights. Atrex publishes one importance score per operator (they sum to 1.0948, not 1). A shape's
weight is its operator's score split over the operator's shapes in proportion to their
`call_count` when every shape of that operator has a positive one, else equally (a partial set
of counts would need the missing ones invented), then divided by the sum of all scores so the
440 weights sum to 1. Per-phase weights (each summing to 1, as in weighting) follow the operator's
phase tag: a "prefill" operator counts in weight_prefill, "decode" in weight_decode, and
"prefill/decode" (runs in both, split unknown) in both in proportion to its weight; weight_mixed
(batches mixing both phases) is 0, as Atrex-Bench has no such label.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl

from catalogue.vocabulary import PHASES
from release import ids
from release.roofline import (has_our_roofline, load_hardware_or_none, published_roofline, roofline_frame,
                              roofline_rows)
from release.bundle import MANIFEST_FILE, SEALED_FILES, read_release, table_file, weights_file, write_bundle
from release.card import card_files
from release.sealing import assert_no_leak, public_vocabulary, sealed_strings

SOURCE = "atrex-bench"
IMPORTANCE = "operator_importance.json"
OPERATOR_FILES = ("shapes.json", "metadata.json", "roofline.json")
PHASE_TAGS = {"prefill": ("prefill",), "decode": ("decode",), "prefill/decode": ("prefill", "decode")}


class AtrexError(ValueError):
    """The Atrex-Bench data is not in the expected layout; the message names the file."""


def data_dir(path: str | Path) -> Path:
    """The folder holding operator_importance.json: `path` itself or its data/ folder."""
    path = Path(path)
    for cand in (path, path / "data"):
        if (cand / IMPORTANCE).is_file():
            return cand
    raise AtrexError(f"{path}: no {IMPORTANCE} here or under data/ (not an Atrex-Bench layout)")


def _load(path: Path):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise AtrexError(f"{path}: missing") from exc
    except json.JSONDecodeError as exc:
        raise AtrexError(f"{path}: not valid JSON ({exc})") from exc


def read_atrex(path: str | Path) -> dict:
    """{'importance': ..., 'operators': {op: {'shapes', 'metadata', 'roofline'}}}, cross-checked."""
    root = data_dir(path)
    importance = _load(root / IMPORTANCE)
    if not isinstance(importance.get("operators"), dict) or not importance["operators"]:
        raise AtrexError(f"{root / IMPORTANCE}: no 'operators' object")
    ops = {}
    for op in importance["operators"]:
        files = {f.split(".")[0]: _load(root / op / f) for f in OPERATOR_FILES}
        shape_ids = list(files["shapes"])
        for part, holder in (("metadata", files["metadata"]), ("roofline", files["roofline"])):
            if not isinstance(holder.get("shapes"), dict) or set(holder["shapes"]) != set(shape_ids):
                raise AtrexError(f"{root / op / (part + '.json')}: its shape ids differ from shapes.json")
        ops[op] = files
    extra = sorted(p.name for p in root.iterdir() if p.is_dir() and p.name not in ops)
    if extra:
        raise AtrexError(f"{root}: operator folders {extra} are not in {IMPORTANCE}")
    return {"importance": importance, "operators": ops}


def shape_weights(data: dict) -> dict[tuple[str, str], float]:
    """(operator, shape id) → weight, summing to 1 (see the module docstring for the rule)."""
    scores = {op: float(e["importance_score"]) for op, e in data["importance"]["operators"].items()}
    total = math.fsum(scores.values())
    if not total > 0:
        raise AtrexError(f"{IMPORTANCE}: importance scores sum to {total}")
    out = {}
    for op, files in data["operators"].items():
        sids = list(files["shapes"])
        counts = [files["metadata"]["shapes"][s].get("call_count") for s in sids]
        if all(isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in counts):
            split = [c / sum(counts) for c in counts]
        else:
            split = [1 / len(sids)] * len(sids)
        for s, f in zip(sids, split):
            out[(op, s)] = scores[op] / total * f
    return out


def tag_split(data: dict) -> dict[str, float]:
    """Share of the (normalised) importance held by operators of each Atrex-Bench phase tag."""
    scores = data["importance"]["operators"]
    total = math.fsum(float(e["importance_score"]) for e in scores.values())
    return {tag: math.fsum(float(e["importance_score"]) for e in scores.values() if e["phase"] == tag) / total
            for tag in PHASE_TAGS}


def normalise_phases(weights: pl.DataFrame) -> pl.DataFrame:
    """Each weight_<phase> column divided by its sum (left at 0 when the phase has no weight)."""
    for p in PHASES:
        col = f"weight_{p}"
        total = math.fsum(weights[col].to_list())
        if total > 0:
            weights = weights.with_columns(pl.col(col) / total)
    return weights


def _names(meta_op: dict, meta_shape: dict) -> dict[str, list[str]]:
    """The sealed names of one shape: frameworks, raw op names, kernel names."""
    origin = meta_op.get("origin") or {}
    frameworks = {origin.get("framework"), meta_shape.get("source_framework")}
    for perf in (meta_shape.get("production_performance") or {}).values():
        if isinstance(perf, dict):
            frameworks.add(perf.get("framework"))
    for f in list(frameworks):
        if isinstance(f, str) and "/" in f:
            frameworks.update(f.split("/"))
    raw_ops = {origin.get("symbol"), origin.get("module")}
    kernels = {meta_shape.get("origin_kernel"), meta_shape.get("source_kernel_name")}
    clean = lambda xs: sorted(x for x in xs if isinstance(x, str) and x)  # noqa: E731
    return {"frameworks": clean(frameworks), "raw_ops": clean(raw_ops), "kernels": clean(kernels)}


def atrex_tables(data: dict, key: bytes, hardware: dict | None = None) -> dict[str, pl.DataFrame]:
    """The release tables of an Atrex-Bench dataset: manifest, weights v1, provenance, roofline."""
    weights = shape_weights(data)
    man, wts, prov, roof, opers = [], [], [], [], []
    for op, files in data["operators"].items():
        meta_op = {k: v for k, v in files["metadata"].items() if k != "shapes"}
        entry = data["importance"]["operators"][op]
        if entry.get("phase") not in PHASE_TAGS:
            raise AtrexError(f"{IMPORTANCE}: operator {op!r} has phase {entry.get('phase')!r}, not one of {list(PHASE_TAGS)}")
        phases = PHASE_TAGS[entry["phase"]]
        dtypes = {k: meta_op[k] for k in ("dtype", "input_dtypes", "output_dtypes") if k in meta_op}
        opers.append({"operator": op, "importance": json.dumps(entry), "metadata": json.dumps(meta_op),
                      "shape_ids": list(files["shapes"])})
        for sid, shape in files["shapes"].items():
            init, inp = shape.get("init_kwargs") or {}, shape.get("input_kwargs") or {}
            pid = ids.problem_id(key, ids.canonical_problem(op, init, inp, dtypes))
            man.append({"problem_id": pid, "operator": op, "init_kwargs": ids.canonical_json(init),
                        "input_kwargs": ids.canonical_json(inp), "dtypes": ids.canonical_json(dtypes)})
            w = weights[(op, sid)]
            wts.append({"problem_id": pid, "weight": w} | {f"weight_{p}": (w if p in phases else 0.0) for p in PHASES})
            meta_shape = files["metadata"]["shapes"][sid]
            prov.append({"problem_id": pid, "source": SOURCE, "source_key": f"{op}/{sid}",
                         "deployments": [], "models": [], "trace_ids": [], "trace_files": [],
                         "profile_gpu_ns": [], **_names(meta_op, meta_shape),
                         "record": json.dumps({"shape": shape, "metadata": meta_shape})})
            roof += roofline_rows(pid, op, init, inp, files["roofline"]["shapes"][sid], hardware)
    if len({m["problem_id"] for m in man}) != len(man):
        raise AtrexError("two Atrex-Bench shapes are the same problem (same operator, kwargs, dtypes)")
    top = {k: v for k, v in data["importance"].items() if k != "operators"}
    opers.append({"operator": "", "importance": json.dumps(top), "metadata": "{}", "shape_ids": []})
    return {"manifest": pl.DataFrame(man), "weights": normalise_phases(pl.DataFrame(wts)), "provenance": pl.DataFrame(prov),
            "roofline": roofline_frame(roof), "atrex_operators": pl.DataFrame(opers)}


def import_atrex(path: str | Path, out: str | Path, *, name: str = SOURCE, key: bytes | str | None = None,
                 created: str | None = None, hardware: dict | None = None) -> dict:
    """Import an Atrex-Bench data folder as a release at `out`; a summary of what was written."""
    data = read_atrex(path)
    # Derived from the parsed content (not file bytes) so that import → export → import keeps ids.
    key, key_source = ids.resolve_key(key, derive_from=(ids.canonical_json(data).encode(),))
    if hardware is None:
        hardware = load_hardware_or_none()
    t = atrex_tables(data, key, hardware)
    files = {
        MANIFEST_FILE: table_file(MANIFEST_FILE, t["manifest"], "manifest", ("operator", "problem_id")),
        weights_file(1): table_file(weights_file(1), t["weights"], "weights", ("problem_id",)),
    }
    for tname in ("provenance", "roofline", "atrex_operators"):
        rel = SEALED_FILES[tname]
        files[rel] = table_file(rel, t[tname], tname, ("operator",) if tname == "atrex_operators"
                                else ("problem_id", "hardware") if tname == "roofline" else ("problem_id",))
    if key_source != "environment":
        files[ids.KEY_FILE] = key.hex().encode() + b"\n"
    info = {
        "name": name, "version": "1.0", "parent": None, "created": created,
        "source": {"kind": SOURCE, "content_sha256": ids.derive_key(ids.canonical_json(data).encode()).hex()},
        "key_source": key_source,
        "counts": {"problems": t["manifest"].height, "operators": t["manifest"]["operator"].n_unique()},
        "weights": [{"version": 1, "file": weights_file(1), "created": created,
                     "basis": "Atrex-Bench operator importance, split over shapes by call counts or equally"}],
        "roofline": {"ours": has_our_roofline(t["roofline"])},
        "phase_split": tag_split(data),
        "phase_split_basis": "weight of operators by their Atrex-Bench phase tag",
    }
    files.update(card_files(info, t["manifest"], {1: t["weights"]}))
    sealed = sealed_strings(t["provenance"])
    vocab = public_vocabulary(t["manifest"])
    report = {}
    written = write_bundle(out, files, info,
                           check=lambda tmp: report.update(assert_no_leak(tmp, sealed, vocab).summary()))
    return {"release": str(out), **written["counts"], "weights_sum": float(t["weights"]["weight"].sum()),
            "leak_check": report, "files": len(written["files"]) + 1}


# ---- export ---------------------------------------------------------------------------------------

def _phase_tag(weights: pl.DataFrame) -> str:
    has = [p for p in ("prefill", "decode") if weights[f"weight_{p}"].sum() > 0]
    return "/".join(has) if has else "prefill/decode"


def _our_roofline_json(rows: pl.DataFrame) -> dict:
    rows = rows.filter(pl.col("t_roofline_s").is_not_null())
    if rows.height == 0:
        return {"semantic_W_flops": {}, "semantic_Q_read_bytes": None, "semantic_Q_write_bytes": None,
                "SOL_time_ms": {}}
    first = rows.row(0, named=True)
    return {"semantic_W_flops": {first["path"] or "unknown": first["flops"]},
            "semantic_Q_read_bytes": first["bytes_read"], "semantic_Q_write_bytes": first["bytes_written"],
            "SOL_time_ms": {r["hardware"]: r["t_roofline_s"] * 1e3 for r in rows.iter_rows(named=True)}}


def export_atrex(release: str | Path, out: str | Path, weights_version: int | None = None) -> dict:
    """Write a release in the Atrex-Bench layout under `out`/data; a summary of what was written.

    Imported problems get their published records back verbatim (so import → export → import is
    lossless); problems built from traces get our kwargs, dtypes and roofline. Importance scores
    are the published ones unless `weights_version` is given, then W_op of that version.
    """
    rel = read_release(release)
    weights = rel.weights(weights_version)
    prov = rel.sealed("provenance")
    roof = rel.sealed("roofline")
    opers = rel.sealed("atrex_operators")
    records = {} if prov is None else {
        r["problem_id"]: r for r in prov.filter(pl.col("source") == SOURCE).iter_rows(named=True)}
    op_rows = {} if opers is None else {r["operator"]: r for r in opers.iter_rows(named=True)}
    man = rel.manifest.join(weights, on="problem_id", how="left").fill_null(0.0)
    w_op = {op: float(g["weight"].sum()) for (op,), g in man.group_by("operator")}
    top = json.loads(op_rows[""]["importance"]) if "" in op_rows else {"metadata": {"release": rel.name}}
    importance = {**top, "operators": {}}
    root = Path(out) / "data"
    order = sorted(w_op, key=lambda op: (-(json.loads(op_rows[op]["importance"])["importance_score"]
                                           if op in op_rows else w_op[op]), op))
    for op in order:
        problems = man.filter(pl.col("operator") == op).sort("problem_id")
        by_sid, native = {}, []
        for r in problems.iter_rows(named=True):
            rec = records.get(r["problem_id"])
            if rec is not None:
                by_sid[rec["source_key"].split("/", 1)[1]] = (r, json.loads(rec["record"]))
            else:
                native.append(r)
        sids = [s for s in (op_rows[op]["shape_ids"] if op in op_rows else []) if s in by_sid]
        next_id = max([int(s) for s in sids if s.isdigit()] + [-1]) + 1
        for i, r in enumerate(native):
            dt = json.loads(r["dtypes"])
            shape = {"init_kwargs": json.loads(r["init_kwargs"]), "input_kwargs": json.loads(r["input_kwargs"])}
            by_sid[str(next_id + i)] = (r, {"shape": shape, "metadata": {
                "description": f"{op} {r['input_kwargs']}", "production_performance": {}}, "dtypes": dt})
            sids.append(str(next_id + i))
        shapes, meta_shapes, roof_shapes = {}, {}, {}
        for sid in sids:
            r, rec = by_sid[sid]
            shapes[sid], meta_shapes[sid] = rec["shape"], rec["metadata"]
            rows = roof.filter(pl.col("problem_id") == r["problem_id"]) if roof is not None else pl.DataFrame()
            if rows.height and r["problem_id"] in records and rows["published_bytes_read"].null_count() < rows.height:
                roof_shapes[sid] = published_roofline(rows)
            else:
                roof_shapes[sid] = _our_roofline_json(rows) if rows.height else _our_roofline_json(
                    pl.DataFrame(schema={"t_roofline_s": pl.Float64}))
        phase = _phase_tag(problems)
        if op in op_rows:
            entry, meta = json.loads(op_rows[op]["importance"]), json.loads(op_rows[op]["metadata"])
        else:
            dt = json.loads(problems["dtypes"][0])
            entry = {"importance_score": w_op[op], "phase": phase, "num_profiles": None}
            meta = {"id": op, "status": "hotshape", **{k: dt[k] for k in ("dtype", "input_dtypes", "output_dtypes") if k in dt},
                    "phase": phase, "importance_score": w_op[op]}
        if weights_version is not None:
            entry["importance_score"] = meta["importance_score"] = w_op[op]
        importance["operators"][op] = entry
        for name, obj in (("shapes", shapes), ("metadata", {**meta, "shapes": meta_shapes}),
                          ("roofline", {"shapes": roof_shapes})):
            _write_json(root / op / f"{name}.json", obj)
    _write_json(root / IMPORTANCE, importance)
    return {"out": str(root), "operators": len(order), "problems": int(man.height),
            "weights_version": weights_version or rel.versions[-1]}


def _write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")
