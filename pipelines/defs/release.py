"""Release assets: the release bundle (built, then refreshed to weights vN+1), its drift, and its checks."""

from pathlib import Path

import dagster as dg
import polars as pl

from catalogue.vocabulary import ROW_PHASES
from pipelines.defs.code_versions import code_version
from pipelines.defs.lineage import column_lineage
from pipelines.defs.metadata import column_schema, path_value, png_markdown, rounded, table
from pipelines.defs.weighting import fleet_weights, sums_to_one, weight_sums
from pipelines.resources import HotshapeStore
from flow.build import build_release, fleet_secrets, load_mined, refresh_release
from release.bundle import read_release, weights_file
from release.card import PLOT_OPERATORS, PLOT_PHASES, operator_table
from release.schema import MANIFEST
from release.sealing import leak_check, public_vocabulary, sealed_strings
from release.weight_sets import read_context
from weighting.drift import causes, compare
from weighting.drift_report import bars_before_after, write_html
from weighting.pages import png_bytes
from weighting.fleet import load_fleet


@dg.asset(group_name="release", kinds={"parquet"}, deps=[fleet_weights],
          code_version=code_version("flow", "release", "weighting", "ingest", "catalogue"),
          metadata={"dagster/column_schema": column_schema(MANIFEST), "dagster/column_lineage": column_lineage("release_bundle")})
def release_bundle(context: dg.AssetExecutionContext, store: HotshapeStore) -> dg.MaterializeResult:
    """The release: public manifest and weight versions, sealed provenance and roofline; refreshed to vN+1 once it exists.

    Built from what fleet_weights mined from the trace store (no trace is read again); traces whose
    partition failed its checks are left out, and release.json / sealed/left_out/vN.json say which and why.
    """
    out, policy = store.release_dir, store.load_policy()
    mined = _mined(store)
    if (out / "release.json").is_file():
        summary = refresh_release(out, store.trace_root, store.fleet, policy=policy, mined=mined)
    else:
        summary = build_release(store.trace_root, store.fleet, out, name=store.release_name, policy=policy, mined=mined)
    rel = read_release(out)
    coverage = rel.meta.weights[-1].coverage
    # of the problems with weight in the newest version, as the card states it (weighting.selection.coverage_of)
    report = {k: v for k, v in (rel.meta.weights[-1].coverage_report or {}).items()
              if k in ("coverage_of_operator_time", "coverage_of_benchmarkable", "n_problems")}
    return dg.MaterializeResult(metadata=rounded({
        "dagster/row_count": rel.manifest.height,
        "problems": rel.manifest.height,
        "operators": rel.manifest["operator"].n_unique(),
        "weights_version": rel.versions[-1],
        **({"coverage_of_fleet": coverage} if coverage is not None else {}),
        **({f"weighted_{k}" if k == "n_problems" else k: v for k, v in report.items()}),
        "leak_check": dg.MetadataValue.json(summary["leak_check"]),
        "top_operators": table(operator_table(rel.manifest, rel.weights())),
        "operator_weights": png_markdown(rel.read_bytes(PLOT_OPERATORS), "weight per operator"),
        "phase_split": png_markdown(rel.read_bytes(PLOT_PHASES), "phase split"),
        "path": path_value(out),
    }))


@dg.asset(group_name="release", kinds={"html"}, deps=[release_bundle],
          code_version=code_version("weighting", "release", "catalogue"))
def weight_drift(context: dg.AssetExecutionContext, store: HotshapeStore) -> dg.MaterializeResult:
    """How the release's latest weights version moved from the one before, with an HTML report."""
    rel = read_release(store.release_dir)
    v = rel.versions[-1]
    if len(rel.versions) < 2:
        return dg.MaterializeResult(metadata={"weights_version": v, "compared_with": "nothing (first version)"})
    ops = rel.manifest.select("problem_id", "operator")
    report = compare(rel.weights(v - 1).join(ops, on="problem_id"), rel.weights(v).join(ops, on="problem_id"))
    beyond = (rel.drift(v) or {}).get("beyond_interval")
    # shapes and causes as `hotshape drift` gives them, from the two versions' sealed inputs
    labels, old_inputs = read_context(store.release_dir / weights_file(v - 1))
    _, new_inputs = read_context(store.release_dir / weights_file(v))
    html = write_html(report, store.drift_dir / f"{rel.name}-v{v}.html", f"v{v - 1}", f"v{v}", beyond=beyond,
                      labels=labels, causes=causes(report, old_inputs, new_inputs))
    figures = {k: val for k, val in report.to_dict().items()
               if k in ("js_divergence", "total_variation", "operator_total_variation", "spearman", "n_kept") and val is not None}
    return dg.MaterializeResult(metadata=rounded({
        "weights_version": v, "compared_with": f"v{v - 1}", **figures,
        "newly_hot": len(report.newly_hot), "newly_cold": len(report.newly_cold),
        "operator_movers": table(report.operators),
        "operator_weights_before_after": png_markdown(png_bytes(bars_before_after(
            report.operators.head(15).select("operator", "weight_old", "weight_new").rows(), f"v{v - 1}", f"v{v}")),
            f"W_op v{v - 1} → v{v}"),
        # Movements beyond the new version's bootstrap intervals, as the release's drift JSON marks them.
        "beyond_interval": dg.MetadataValue.json(rounded(beyond or {})),
        "report": path_value(html),
        "report_url": dg.MetadataValue.url(Path(html).resolve().as_uri()),  # opens in the browser the UI runs in
    }))


def _mined(store: HotshapeStore):
    """What the fleet_weights asset mined from the trace store."""
    return load_mined(store.weights_dir, store.trace_store(), load_fleet(store.fleet, store.trace_root))


def _sealed(store: HotshapeStore, rel) -> set[str]:
    """Every sealed string of the release's lineage: provenance, deployments, models, frameworks, traces."""
    return sealed_strings(rel.sealed("provenance"), fleet_secrets(_mined(store)))


# The checks read the files as they are on disk (verify=False): they judge content, and a file edited
# after the build must be judged, not rejected before anyone looks at it.
@dg.asset_check(asset=release_bundle, blocking=True)
def no_sealed_strings_in_public(store: HotshapeStore) -> dg.AssetCheckResult:
    """No deployment, model, framework, raw op/kernel name or trace id appears in any public file."""
    rel = read_release(store.release_dir, verify=False)
    report = leak_check(store.release_dir, _sealed(store, rel), public_vocabulary(rel.manifest) | set(ROW_PHASES))
    return dg.AssetCheckResult(passed=report.ok, metadata={
        **report.summary(), "files_with_findings": dg.MetadataValue.json(sorted({f for f, _, _ in report.findings}))})


@dg.asset_check(asset=release_bundle, name="weights_sum_to_one", blocking=True)
def release_weights_sum_to_one(store: HotshapeStore) -> dg.AssetCheckResult:
    """Every weights version of the release sums to 1 (within 1e-12), each phase column to 1 or 0."""
    rel = read_release(store.release_dir, verify=False)
    sums = {v: weight_sums(rel.weights(v)) for v in rel.versions}
    return dg.AssetCheckResult(passed=all(sums_to_one(s, rel.weights(v)) for v, s in sums.items()),
                               metadata={f"v{v}": dg.MetadataValue.json(s) for v, s in sums.items()})


def missing_rooflines(manifest: pl.DataFrame, weights: pl.DataFrame, roofline: pl.DataFrame | None,
                      accelerators: set[str]) -> pl.DataFrame:
    """Selected problems (weight > 0) lacking a roofline time on some fleet accelerator: problem_id, operator, hardware."""
    selected = manifest.join(weights.filter(pl.col("weight") > 0), on="problem_id").select("problem_id", "operator")
    wanted = selected.join(pl.DataFrame({"hardware": sorted(accelerators)}, schema={"hardware": pl.String}), how="cross")
    have = (roofline if roofline is not None else pl.DataFrame(schema={"problem_id": pl.String, "hardware": pl.String,
                                                                         "t_roofline_s": pl.Float64}))
    have = have.filter(pl.col("t_roofline_s").is_not_null()).select("problem_id", "hardware").unique()
    return wanted.join(have, on=["problem_id", "hardware"], how="anti").sort("operator", "problem_id", "hardware")


@dg.asset_check(asset=release_bundle)
def every_selected_problem_has_roofline(store: HotshapeStore) -> dg.AssetCheckResult:
    """Each problem with weight in the latest version has a roofline time on every accelerator of the fleet."""
    rel = read_release(store.release_dir, verify=False)
    accelerators = {d.accelerator for d in load_fleet(store.fleet, store.trace_root).deployments}
    missing = missing_rooflines(rel.manifest, rel.weights(), rel.sealed("roofline"), accelerators)
    lost = weight_of(missing, rel.weights())
    return dg.AssetCheckResult(passed=missing.height == 0, metadata={
        "missing": missing.height, "weight_without_roofline": lost,
        "problems_missing": table(missing)})


def weight_of(missing: pl.DataFrame, weights: pl.DataFrame) -> float:
    """Total weight of the problems in `missing`."""
    return float(weights.filter(pl.col("problem_id").is_in(missing["problem_id"].implode()))["weight"].sum())


@dg.asset_check(asset=weight_drift)
def moves_within_intervals(store: HotshapeStore) -> dg.AssetCheckResult:
    """No problem or operator weight moved beyond the new version's bootstrap interval (WARN: a real fleet change
    moves weights too; the drift report names its cause)."""
    rel = read_release(store.release_dir, verify=False)
    beyond = (rel.drift(rel.versions[-1]) or {}).get("beyond_interval") or {}
    problems, operators = beyond.get("problems", []), beyond.get("operators", [])
    return dg.AssetCheckResult(passed=not problems and not operators, severity=dg.AssetCheckSeverity.WARN, metadata={
        "weights_version": rel.versions[-1], "problems_beyond": len(problems), "operators_beyond": len(operators),
        "beyond_interval": dg.MetadataValue.json({"problems": problems, "operators": operators})})
