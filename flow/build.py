"""Building and refreshing releases from traces: ingest → weights → selection → bundle."""

from __future__ import annotations

import json
import math
import os
import shutil
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path, PurePosixPath

import msgspec
import polars as pl
import pyarrow as pa

from catalogue.registry import split_kwargs
from catalogue.vocabulary import PHASES, ROW_PHASES
from ingest import schema as ingest_schema
from ingest.output import write_parquet_atomic
from ingest.pipeline import traces_frame_from
from ingest.store import TraceStore
from ingest.tracefile import is_url
from release import ids
from release.admission import refusals, refuse
from release.bundle import (MANIFEST_FILE, SEALED_FILES, ReleaseError, candidates_file, drift_file, intervals_files,
                            json_bytes, read_release, table_file, weights_file, write_bundle)
from release.card import NOT_BENCHMARKED, card_files
from release.lock import release_lock
from release.roofline import has_our_roofline, load_hardware_or_none, regained_roofline, roofline_frame, roofline_rows
from release.schema import PROVENANCE
from release.sealing import assert_no_leak, public_vocabulary, sealed_strings
from weighting.drift import beyond_intervals, compare
from weighting.fleet import load_fleet
from weighting.schema import COLUMNS as WEIGHTING_COLUMNS
from weighting.selection import coverage_of, select_hot
from weighting.uncertainty import LEVEL, N_BOOT, SEED, version_intervals
from weighting.weights import deployment_inputs, fleet_weights

WEIGHT_COLUMNS = ("weight",) + tuple(f"weight_{p}" for p in PHASES)

# ---- mining the traces ----------------------------------------------------------------------------

@dataclass
class Mined:
    """What the traces of one fleet say: traces table, op_shape_time, fleet weights and selection."""

    fleet: object
    traces: pl.DataFrame
    op_shape_time: pl.DataFrame
    by_kernel: pl.LazyFrame  # trace_id, operator, shape, op, kernel, gpu_ns: for provenance (read when needed)
    quarantined: list[dict]
    fleet_weights: pl.DataFrame
    selected: pl.DataFrame
    coverage: dict
    left_out: list[dict] = field(default_factory=list)  # {path, trace_id, reason}: read, but kept out by a check


def default_store(release: str | Path) -> Path:
    """The trace store a release is built from unless one is named: `<release>.store` beside it."""
    release = Path(release)
    return release.with_name(f"{release.name}.store")


def mine(traces_root: str | Path, fleet_path: str | Path, hardware: dict | None = None, policy=None, *,
         store: str | Path, jobs: int | None = None, cluster: str | None = None) -> Mined:
    """Put the traces the fleet claims into the trace store (only what it lacks; on the Dask scheduler at
    `cluster` when given), then mine the store."""
    root = Path(traces_root)
    fleet = load_fleet(fleet_path, root, accelerators=set(hardware) if hardware else None)
    names = sorted(fleet.assignment())
    with _removed_on_failure(store):
        ts = TraceStore(store)
        report = ts.ingest([root / n for n in names], names, jobs=jobs, cluster=cluster, meanwhile=release_imports)
        return mine_store(ts, fleet, report.ids, policy, unreadable=report.unreadable)


@contextmanager
def _removed_on_failure(store: str | Path):
    """A local trace store that did not exist before, removed again when reading the traces into it fails (no
    trace readable, a bad fleet): such a build leaves nothing behind. A store that existed keeps what was parsed
    into it, and so does one whose traces were read before a later step failed (they are valid whatever the
    release is called)."""
    local = not is_url(str(store))
    fresh = local and not os.path.lexists(store)
    try:
        yield
    except BaseException:
        if fresh:
            shutil.rmtree(store, ignore_errors=True)
        raise


def release_imports() -> None:
    """matplotlib (~0.35 s of imports; the release card draws with it), imported while the store's workers
    parse: this process has nothing else to do then, and one core idles after them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.backends.backend_agg  # noqa: F401 - the card's plots render with it
    import matplotlib.figure  # noqa: F401


def mine_store(store, fleet, ids: dict[str, str], policy=None, *, unreadable=(), left_out=()) -> Mined:
    """Weights and selection from the traces `ids` names (file name → trace_id) in a trace store.

    Only summaries and op_shape_time are read; provenance rows stay a lazy scan of the store.
    `left_out` ({path, trace_id, reason}) are read traces kept out, e.g. by a failed check.
    """
    out = {q["path"] for q in left_out}
    rows, quarantined = [], list(unreadable)
    for name in sorted(n for n in ids if n not in out):
        summary = store.summary(ids[name])
        if summary is None:
            quarantined.append({"path": name, "reason": store.quarantine_reason(ids[name])})
        else:
            rows.append({"path": name, **msgspec.structs.asdict(summary)})
    if not rows:
        raise ReleaseError(f"{store.url}: none of the {len(ids) + len(unreadable)} traces claimed by "
                           f"{fleet.source} could be read")
    traces = traces_frame_from(rows)
    trace_ids = traces["trace_id"].to_list()
    ost = store.scan("op_shape_time", trace_ids).collect()
    fw = fleet_weights(ost, traces, fleet)
    selected, coverage = select_hot(fw, policy)
    return Mined(fleet, traces, ost, store.scan("provenance", trace_ids), sorted(quarantined, key=lambda q: q["path"]),
                 fw, selected, coverage, list(left_out))


MINED_FILES = ("traces.parquet", "op_shape_time.parquet", "fleet_weights.parquet", "hot_problems.parquet")


def save_mined(mined: Mined, folder: str | Path) -> Path:
    """Write what `mine_store` found to `folder` (the Dagster fleet_weights asset), for `load_mined`."""
    folder = Path(folder)
    frames = (mined.traces, mined.op_shape_time, mined.fleet_weights, mined.selected)
    described = (ingest_schema.descriptions("TRACES"), ingest_schema.descriptions("OP_SHAPE_TIME"), WEIGHTING_COLUMNS,
                 WEIGHTING_COLUMNS)
    for name, frame, columns in zip(MINED_FILES, frames, described):
        write_parquet_atomic(frame, folder / name, columns)
    (folder / "coverage.json").write_text(json.dumps(mined.coverage, indent=2, sort_keys=True) + "\n")
    (folder / "left_out.json").write_text(json.dumps({"quarantined": mined.quarantined, "left_out": mined.left_out},
                                                     indent=2, sort_keys=True) + "\n")
    return folder


def load_mined(folder: str | Path, store, fleet) -> Mined:
    """The Mined that save_mined wrote, its provenance rows again a lazy scan of the trace store."""
    folder = Path(folder)
    traces, ost, fw, selected = (pl.read_parquet(folder / name) for name in MINED_FILES)
    unused = json.loads((folder / "left_out.json").read_text())
    return Mined(fleet, traces, ost, store.scan("provenance", traces["trace_id"].to_list()), unused["quarantined"],
                 fw, selected, json.loads((folder / "coverage.json").read_text()), unused["left_out"])


def problems_of(selected: pl.DataFrame, key: bytes) -> pl.DataFrame:
    """Selected (operator, shape) rows as problems: id, operator, kwargs split, dtypes, weights."""
    rows = []
    for r in selected.iter_rows(named=True):
        kwargs = json.loads(r["shape"])
        try:
            init, inputs = split_kwargs(r["operator"], kwargs)
        except (KeyError, LookupError, ModuleNotFoundError):
            init, inputs = {}, kwargs  # kwargs the registry does not know stay inputs, nothing is dropped
        dtypes = {k: v for k, v in kwargs.items() if "dtype" in k}
        canon = ids.canonical_problem(r["operator"], init, inputs, dtypes)
        rows.append({"problem_id": ids.problem_id(key, canon), "operator": r["operator"], "shape": r["shape"],
                     "init_kwargs": ids.canonical_json(init), "input_kwargs": ids.canonical_json(inputs),
                     "dtypes": ids.canonical_json(dtypes), **{c: r[c] for c in WEIGHT_COLUMNS}})
    frame = pl.DataFrame(rows, schema={"problem_id": pl.String, "operator": pl.String, "shape": pl.String,
                                       "init_kwargs": pl.String, "input_kwargs": pl.String, "dtypes": pl.String,
                                       **{c: pl.Float64 for c in WEIGHT_COLUMNS}})
    if frame["problem_id"].n_unique() != frame.height:
        raise ReleaseError("two selected shapes map to the same problem (same operator, kwargs and dtypes)")
    return frame


def provenance_of(problems: pl.DataFrame, mined: Mined) -> pl.DataFrame:
    """sealed/provenance rows: deployments, models, frameworks, raw names, traces and times per problem."""
    path_of = dict(mined.traces.select("trace_id", "path").iter_rows())
    owner = mined.fleet.assignment()
    deps = {d.id: d for d in mined.fleet.deployments}
    per = mined.by_kernel.lazy().join(problems.lazy().select("problem_id", "operator", "shape"),
                                      on=["operator", "shape"]).collect()
    rows = []
    for (pid,), g in per.sort("trace_id", "op", "kernel").group_by("problem_id", maintain_order=True):
        t = g.group_by("trace_id").agg(pl.col("gpu_ns").sum()).sort("trace_id")
        files = [path_of[x] for x in t["trace_id"].to_list()]
        dep_ids = sorted({owner[f] for f in files if f in owner})
        rows.append({
            "problem_id": pid, "source": "traces", "source_key": g["operator"][0] + " " + g["shape"][0],
            "deployments": dep_ids, "models": sorted({deps[d].model for d in dep_ids}),
            "frameworks": sorted({deps[d].framework for d in dep_ids}),
            "raw_ops": sorted(set(g["op"].drop_nulls().to_list())),
            "kernels": sorted(set(g["kernel"].drop_nulls().to_list())),
            "trace_ids": t["trace_id"].to_list(), "trace_files": files,
            "profile_gpu_ns": t["gpu_ns"].to_list(), "record": "{}",
        })
    return pl.from_arrow(pa.Table.from_pylist(rows, schema=PROVENANCE))


def fleet_secrets(mined: Mined) -> list[str]:
    """Sealed strings of the whole fleet, selected or not: deployments, models, frameworks, traces."""
    return secrets_of(mined.fleet, mined.traces, mined.quarantined + mined.left_out)


def secrets_of(fleet, traces: pl.DataFrame, unused: list[dict] = ()) -> list[str]:
    """Deployments, models and frameworks of `fleet`, and the ids and file names of its traces, used or not."""
    out = [s for d in fleet.deployments for s in (d.id, d.model, d.framework)]
    paths = traces["path"].to_list() + [q["path"] for q in unused]
    out += traces["trace_id"].to_list() + [q["trace_id"] for q in unused if q.get("trace_id")]
    return out + paths + [PurePosixPath(p).name for p in paths]


# ---- build and refresh ----------------------------------------------------------------------------

def admit(mined: Mined, fleet) -> None:
    """Refuse the release when a selected problem is not its operator's work (release/admission.py), naming it."""
    refuse(refusals(mined.selected, mined.by_kernel), fleet)


def _record_intervals(files: dict, version_info: dict, mined: Mined, problems: pl.DataFrame,
                      weights: pl.DataFrame, version: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Bootstrap intervals over profiles of weights `version` (weighting.uncertainty.version_intervals) as
    public/intervals/vN*.parquet; `problems` (problem_id, operator, shape) are those weighted in it."""
    per_problem, per_operator = version_intervals(mined.op_shape_time, mined.traces, mined.fleet,
                                                  problems.select("operator", "shape"))
    operator_of = problems.select("problem_id", "operator", "shape").join(per_problem, on=["operator", "shape"])
    per_problem = weights.select("problem_id", "weight").join(operator_of.drop("shape"), on="problem_id", how="left")
    per_problem = per_problem.with_columns(pl.col("weight_lo", "weight_hi", "weight_se").fill_null(0.0),
                                           pl.col("n_profiles", "n_deployments").fill_null(0))
    w_op = per_problem.group_by("operator").agg(pl.col("weight").sum())
    per_operator = per_operator.join(w_op, on="operator", how="left").select("operator", "weight", "weight_lo",
                                                                               "weight_hi", "weight_se")
    on_problems, on_operators = intervals_files(version)
    files[on_problems] = table_file(on_problems, per_problem.drop_nulls("operator"), "intervals", ("problem_id",))
    files[on_operators] = table_file(on_operators, per_operator, "operator_intervals", ("operator",))
    version_info["intervals"] = {"problems": on_problems, "operators": on_operators, "method": "percentile bootstrap "
                                 "over profiles within each deployment", "n_boot": N_BOOT, "seed": SEED, "level": LEVEL}
    return per_problem, per_operator


def _record_left_out(files: dict, version_info: dict, mined: Mined, version: int) -> None:
    """Traces read but kept out of weights `version` (a failed check): counted in release.json, named in sealed/."""
    if mined.left_out:
        version_info["left_out"] = len(mined.left_out)
        files[f"sealed/left_out/v{version}.json"] = json_bytes(sorted(mined.left_out, key=lambda q: q["path"]))


def inputs_file(version: int) -> str:
    """Sealed record of what each deployment put into weights `version` (it names deployments, so sealed)."""
    return f"sealed/inputs/v{version}.json"


def _record_inputs(files: dict, version_info: dict, mined: Mined, problems: pl.DataFrame, version: int) -> None:
    """Each deployment's card-hours and trace ids, and its fleet card-hours per problem (`problems`: problem_id,
    operator, shape), as sealed/inputs/vN.json: what a drift between two versions is explained by."""
    deployments, parts = deployment_inputs(mined.op_shape_time, mined.traces, mined.fleet)
    parts = parts.join(problems.select("problem_id", "operator", "shape"), on=["operator", "shape"])
    per_problem: dict[str, dict[str, float]] = {}
    for pid, dep, hours in parts.sort("problem_id", "deployment").select("problem_id", "deployment", "card_hours").iter_rows():
        per_problem.setdefault(pid, {})[dep] = hours
    files[inputs_file(version)] = json_bytes({"deployments": deployments, "problems": per_problem})
    version_info["inputs"] = inputs_file(version)


def _normalised(frame: pl.DataFrame) -> pl.DataFrame:
    for c in WEIGHT_COLUMNS:
        total = math.fsum(frame[c].to_list())
        frame = frame.with_columns(pl.col(c) / total if total > 0 else pl.lit(0.0).alias(c))
    return frame


def _created(created: str | None, fleet) -> str | None:
    """The release date: given, else the end of the fleet window; never the clock."""
    if created is not None:
        return str(created)
    window = getattr(fleet, "window", None) or {}
    return str(window["end"]) if window.get("end") is not None else None


def _coverage(report: dict) -> dict:
    """The selection report's figures, and each operator the evaluator cannot benchmark (communication, memcpy,
    memset, other, ...) as `not_benchmarked_<operator>`: its share of all fleet GPU time, so the card shows it."""
    out = {k: v for k, v in report.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    for entry in report.get("operators", []):
        if entry.get("status") == "not_benchmarkable":
            out[NOT_BENCHMARKED + entry["operator"]] = entry["op_share"]
    return out


def _phase_split(fw: pl.DataFrame) -> dict[str, float]:
    total = math.fsum(fw["fleet_share"].to_list())
    return {p: (math.fsum(fw.filter(pl.col("phase") == p)["fleet_share"].to_list()) / total if total else 0.0)
            for p in ROW_PHASES}


def _finish(out, files: dict, info: dict, manifest: pl.DataFrame, weights: dict, provenance: pl.DataFrame,
            secrets: list[str], replace: bool, signing_key=None, wait_s: float = 0.0) -> dict:
    """Add the card, run the leak check on the finished bundle, and move it into place."""
    files = dict(files)
    files.update(card_files(info, manifest, weights))
    files[SEALED_FILES["provenance"]] = table_file(SEALED_FILES["provenance"], provenance, "provenance", ("problem_id",))
    sealed = sealed_strings(provenance, secrets)
    vocab = public_vocabulary(manifest) | set(ROW_PHASES)
    report: dict = {}
    written = write_bundle(out, files, info, replace=replace, signing_key=signing_key, wait_s=wait_s,
                           check=lambda tmp: report.update(assert_no_leak(tmp, sealed, vocab).summary()))
    return {"release": str(out), "name": written["name"], "problems": manifest.height,
            "operators": manifest["operator"].n_unique(), "weights_versions": [w["version"] for w in written["weights"]],
            "leak_check": report, "sha256": written["files"]}


def build_release(traces: str | Path, fleet: str | Path, out: str | Path, *, name: str | None = None,
                  key: bytes | str | None = None, created: str | None = None, policy=None,
                  hardware: dict | None = None, signing_key=None, wait_s: float = 0.0,
                  store: str | Path | None = None, jobs: int | None = None, mined: Mined | None = None,
                  cluster: str | None = None) -> dict:
    """Build a new release at `out` from a trace root and fleet.yaml; a summary of what was written.

    Traces come from the trace store `store` (default: default_store(out)), which gains what it
    lacks first; or, already mined from a store, from `mined` (the Dagster path).
    """
    hardware = load_hardware_or_none() if hardware is None else hardware
    if os.path.lexists(out) and not (Path(out).is_dir() and not any(Path(out).iterdir())):
        # write_bundle checks it again under the lock; here it stops the build before any trace is parsed
        raise ReleaseError(f"{out}: already exists; give a new --out (releases are never overwritten)")
    if mined is None:
        mined = mine(traces, fleet, hardware, policy, store=store or default_store(out), jobs=jobs, cluster=cluster)
    admit(mined, fleet)
    key, key_source = ids.resolve_key(key, derive_from=(
        ids.canonical_json(sorted(mined.traces["trace_id"].to_list())).encode(), Path(fleet).read_bytes()))
    probs = problems_of(mined.selected, key)
    roof = [r for p in probs.iter_rows(named=True) for r in roofline_rows(
        p["problem_id"], p["operator"], json.loads(p["init_kwargs"]), json.loads(p["input_kwargs"]), None, hardware)]
    roof = roofline_frame(roof)
    manifest = probs.select("problem_id", "operator", "init_kwargs", "input_kwargs", "dtypes")
    weights = probs.select("problem_id", *WEIGHT_COLUMNS)
    when = _created(created, mined.fleet)
    cov = _coverage(mined.coverage)
    policy_used = mined.coverage.get("policy")
    info = {
        "name": name or Path(out).name, "version": "1.0", "parent": None, "created": when,
        "source": {"kind": "traces", "profiles": mined.traces.height, "quarantined": len(mined.quarantined),
                   "deployments": len(mined.fleet.deployments)},
        "key_source": key_source,
        "counts": {"problems": manifest.height, "operators": manifest["operator"].n_unique()},
        "coverage": cov, "phase_split": _phase_split(mined.fleet_weights),
        "policy": asdict(policy_used) if is_dataclass(policy_used) else policy_used,
        "weights": [{"version": 1, "file": weights_file(1), "created": when,
                     "coverage": cov.get("coverage_of_fleet"), "coverage_report": cov,
                     "phase_split": _phase_split(mined.fleet_weights)}],
        "roofline": {"ours": has_our_roofline(roof)},
    }
    files = {
        MANIFEST_FILE: table_file(MANIFEST_FILE, manifest, "manifest", ("operator", "problem_id")),
        weights_file(1): table_file(weights_file(1), weights, "weights", ("problem_id",)),
        SEALED_FILES["roofline"]: table_file(SEALED_FILES["roofline"], roof, "roofline", ("problem_id", "hardware")),
    }
    if key_source != "environment":
        files[ids.KEY_FILE] = key.hex().encode() + b"\n"
    _record_left_out(files, info["weights"][-1], mined, 1)
    _record_inputs(files, info["weights"][-1], mined, probs, 1)
    _record_intervals(files, info["weights"][-1], mined, probs, weights, 1)
    return _finish(out, files, info, manifest, {1: weights}, provenance_of(probs, mined),
                   fleet_secrets(mined), replace=False, signing_key=signing_key, wait_s=wait_s) | {"coverage": cov}


def _merge_provenance(old: pl.DataFrame | None, new: pl.DataFrame) -> pl.DataFrame:
    """Old provenance extended by the new traces' (lists unioned; a trace's time is its latest)."""
    if old is None or old.height == 0:
        return new
    new_by = {r["problem_id"]: r for r in new.iter_rows(named=True)}
    rows = []
    for r in old.iter_rows(named=True):
        n = new_by.pop(r["problem_id"], None)
        if n is not None:
            for c in ("deployments", "models", "frameworks", "raw_ops", "kernels"):
                r[c] = sorted(set(r[c] or []) | set(n[c] or []))
            times = dict(zip(r["trace_ids"], r["profile_gpu_ns"])) | dict(zip(n["trace_ids"], n["profile_gpu_ns"]))
            files = dict(zip(r["trace_ids"], r["trace_files"])) | dict(zip(n["trace_ids"], n["trace_files"]))
            r["trace_ids"] = sorted(times)
            r["profile_gpu_ns"] = [times[t] for t in r["trace_ids"]]
            r["trace_files"] = [files.get(t, "") for t in r["trace_ids"]]
        rows.append(r)
    return pl.from_arrow(pa.Table.from_pylist(rows, schema=PROVENANCE))


def refresh_release(release: str | Path, traces: str | Path, fleet: str | Path, *, created: str | None = None,
                    policy=None, hardware: dict | None = None, signing_key=None, wait_s: float = 0.0,
                    store: str | Path | None = None, jobs: int | None = None, mined: Mined | None = None,
                    cluster: str | None = None) -> dict:
    """Add weights vN+1 to `release` from the current traces, under the release's lock (waiting up to `wait_s`).

    Read, mined and written under one lock: a second refresh started meanwhile builds on this one's
    vN+1 instead of losing it. A signed release stays signed: `signing_key` is then required.
    """
    with release_lock(release, wait_s):
        return _refresh(release, traces, fleet, created=created, policy=policy, hardware=hardware,
                        signing_key=signing_key, store=store, jobs=jobs, mined=mined, cluster=cluster)


def _refresh(release: str | Path, traces: str | Path, fleet: str | Path, *, created: str | None, policy,
             hardware: dict | None, signing_key, store=None, jobs=None, mined: Mined | None = None,
             cluster: str | None = None) -> dict:
    """Add weights vN+1 to `release` from the current traces, over the same problem ids.

    Problems no longer hot get weight 0; the rest are renormalised to sum to 1 (each phase column
    too). Hot shapes the release lacks become public/candidates/vN+1.parquet, and the drift
    against vN is written to public/drift/vN+1.json. Traces come from the trace store as in
    build_release (default: default_store(release)): only profiles the store lacks are parsed.
    """
    rel = read_release(release)
    if rel.check.signature != "unsigned" and signing_key is None:
        raise ReleaseError(f"{release}: signed by {rel.check.key}; give --signing-key to sign weights "
                           f"v{rel.versions[-1] + 1} (a refresh never drops a signature)")
    key, _ = ids.resolve_key(release=rel.root)  # the version just verified, not whatever the path holds now
    hardware = load_hardware_or_none() if hardware is None else hardware
    if mined is None:
        mined = mine(traces, fleet, hardware, policy, store=store or default_store(release), jobs=jobs,
                     cluster=cluster)
    admit(mined, fleet)
    new = problems_of(mined.selected, key)
    ids_now = set(rel.manifest["problem_id"].to_list())
    kept = new.filter(pl.col("problem_id").is_in(ids_now))
    if kept.height == 0:
        raise ReleaseError(f"{release}: none of its problems is hot in these traces; build a new release instead")
    weights = _normalised(rel.manifest.select("problem_id").join(
        kept.select("problem_id", *WEIGHT_COLUMNS), on="problem_id", how="left").fill_null(0.0))
    cands = new.filter(~pl.col("problem_id").is_in(ids_now)).rename({"weight": "share"})
    v = rel.versions[-1] + 1
    old_w = rel.weights().join(rel.manifest.select("problem_id", "operator"), on="problem_id")
    new_w = weights.join(rel.manifest.select("problem_id", "operator"), on="problem_id")
    report = compare(old_w, new_w)
    drift = report.to_dict()
    when = _created(created, mined.fleet)
    # Coverage of the weights this version ships: the release's problems that are hot now (weight > 0), never the
    # fresh selection's, which would also count hot shapes the release lacks (they are only candidates).
    shipped = kept.select("operator", "shape").join(mined.selected.select("operator", "shape", "fleet_card_hours", "fleet_share"),
                                                   on=["operator", "shape"], how="left").fill_null(0.0)
    selection = _coverage(mined.coverage)
    cov = _coverage(coverage_of(shipped, mined.coverage["operators"])) | {
        "selection_n_problems": selection["n_problems"], "selection_coverage_of_fleet": selection["coverage_of_fleet"],
        "hot_weight_covered": math.fsum(kept["weight"].to_list())}
    info = {k: v_ for k, v_ in rel.info.items() if k not in ("files", "format")}
    info["weights"] = list(info.get("weights", [])) + [{
        "version": v, "file": weights_file(v), "created": when, "parent": v - 1,
        "coverage": cov.get("coverage_of_fleet"), "coverage_report": cov,
        "phase_split": _phase_split(mined.fleet_weights),
        "hot_weight_covered": math.fsum(kept["weight"].to_list()),
        "dropped": int((weights["weight"] == 0).sum()), "candidates": cands.height, "drift": drift_file(v)}]
    files = {k: b for k, b in rel.all_files().items() if k not in ("README.md",) and not k.startswith("plots/")}
    files[weights_file(v)] = table_file(weights_file(v), weights, "weights", ("problem_id",))
    _record_left_out(files, info["weights"][-1], mined, v)
    _record_inputs(files, info["weights"][-1], mined, kept.select("problem_id", "operator", "shape"), v)
    intervals = _record_intervals(files, info["weights"][-1], mined, kept.select("problem_id", "operator", "shape"),
                                  weights, v)
    drift = beyond_intervals(drift, report, *intervals)
    files[candidates_file(v)] = table_file(candidates_file(v), cands, "candidates", ("operator", "problem_id"))
    files[drift_file(v)] = json_bytes(drift)
    old_roof = rel.sealed("roofline")
    if hardware and (old_roof is None or not has_our_roofline(old_roof)):
        # Built without the registry: the release gains our roofline now that it is there.
        roof = regained_roofline(rel.manifest, old_roof, hardware)
        files[SEALED_FILES["roofline"]] = table_file(SEALED_FILES["roofline"], roof, "roofline", ("problem_id", "hardware"))
        info["roofline"] = {"ours": has_our_roofline(roof)}
    all_weights = {x: rel.weights(x) for x in rel.versions} | {v: weights}
    provenance = _merge_provenance(rel.sealed("provenance"), provenance_of(kept, mined))
    summary = _finish(release, files, info, rel.manifest, all_weights, provenance,
                      fleet_secrets(mined), replace=True, signing_key=signing_key)
    return summary | {"version": v, "dropped": info["weights"][-1]["dropped"], "candidates": cands.height,
                      "drift": {k: drift[k] for k in ("total_variation", "js_divergence", "spearman")}}
