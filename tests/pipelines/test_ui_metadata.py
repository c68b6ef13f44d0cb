"""What the Dagster UI shows is what the data says: column descriptions as written once markdown renders them,
absolute paths, column lineage where a column is derived, code versions that follow the code."""

from __future__ import annotations

import html
import re
from pathlib import Path

import dagster as dg
from markdown_it import MarkdownIt

from pipelines.definitions import ASSETS
from tests.pipelines.conftest import definition_metadata

RENDER = MarkdownIt("commonmark")


def _shown(markdown: str) -> str:
    """The text a markdown renderer shows for `markdown` (tags dropped, entities decoded)."""
    return html.unescape(re.sub(r"<[^>]+>", "", RENDER.render(markdown))).strip()


def _specs():
    return [s for a in ASSETS for s in (a.specs if hasattr(a, "specs") else [a])]


def _source_descriptions() -> dict[str, str]:
    """Every column description of every package's schema module, with its unit as column_schema appends it."""
    import ingest.schema
    import kernels_eval.results_schema
    import release.schema
    import weighting.schema

    out = {}
    for module in (ingest.schema, weighting.schema, release.schema, kernels_eval.results_schema):
        for column, (text, unit) in module.COLUMNS.items():
            out[f"{module.__name__}.{column}"] = f"{text} [{unit}]" if unit else text
    return out


def test_column_descriptions_render_as_written():
    """`operators/<operator>.py` stayed `operators/.py` and `__init__` turned bold before the escaping."""
    from pipelines.defs.metadata import markdown_text

    texts = _source_descriptions()
    assert any("<operator>" in t for t in texts.values()) and any("__init__" in t or "_" in t for t in texts.values())
    for where, text in texts.items():
        assert _shown(markdown_text(text)) == " ".join(text.split()), where
    # and what the definitions carry is that escaped text: each table asset's schema renders as its module says
    shown = {}
    for spec in _specs():
        schema = spec.metadata.get("dagster/column_schema")
        for column in schema.schema.columns if schema else []:
            shown[(spec.key.to_user_string(), column.name)] = _shown(column.description)
    assert shown[("release_bundle", "init_kwargs")] == "canonical JSON of the arguments of the operator's Model.__init__"
    assert shown[("evaluation_results", "file_sha256")] == "sha256 of the submission's <operator>.py"
    assert len(shown) > 50


def test_column_lineage_names_real_upstream_columns():
    """Each derived column's lineage points at columns the upstream asset's schema has."""
    columns = {s.key: {c.name for c in s.metadata["dagster/column_schema"].schema.columns}
               for s in _specs() if "dagster/column_schema" in s.metadata}
    traced = 0
    for spec in _specs():
        lineage = spec.metadata.get("dagster/column_lineage")
        if lineage is None:
            continue
        assert set(lineage.lineage.deps_by_column) <= columns[spec.key], spec.key
        for deps in lineage.lineage.deps_by_column.values():
            for dep in deps:
                traced += 1
                assert dep.asset_key == dg.AssetKey("fleet_file") or dep.column_name in columns[dep.asset_key], dep
    assert traced >= 15
    assert {d.column_name for d in definition_metadata("op_shape_time")["dagster/column_lineage"].lineage
            .deps_by_column["gpu_ns"]} == {"dur_ns"}


def test_code_versions_follow_the_source_of_the_packages_an_asset_calls(tmp_path, monkeypatch):
    from pipelines.defs import code_versions

    versions = {s.key.to_user_string(): s.code_version for s in _specs() if s.code_version}
    assert {"kernel_events", "op_shape_time", "fleet_weights", "release_bundle", "weight_drift", "evaluation_results",
            "scores"} <= set(versions)
    assert versions["kernel_events"] == versions["op_shape_time"] != versions["fleet_weights"]
    # a copy of a package with one byte changed has another version
    (tmp_path / "weighting").mkdir()
    for path in (code_versions.REPO_ROOT / "weighting").glob("*.py"):
        (tmp_path / "weighting" / path.name).write_bytes(path.read_bytes())
    monkeypatch.setattr(code_versions, "REPO_ROOT", tmp_path)
    code_versions._package_digest.cache_clear()
    same = code_versions.code_version("weighting")
    (tmp_path / "weighting" / "fleet.py").write_text((tmp_path / "weighting" / "fleet.py").read_text() + "\n")
    code_versions._package_digest.cache_clear()
    assert code_versions.code_version("weighting") != same
    code_versions._package_digest.cache_clear()


def test_every_path_in_the_metadata_is_absolute(materialized_on_sqlite):
    _, _, instance = materialized_on_sqlite
    seen = 0
    for key in ("kernel_events", "op_shape_time", "fleet_weights", "release_bundle"):
        for record in instance.fetch_materializations(dg.AssetKey(key), limit=100).records:
            for name, value in record.asset_materialization.metadata.items():
                if isinstance(value, dg.PathMetadataValue):
                    seen += 1
                    assert Path(value.path).is_absolute() and Path(value.path).exists(), (key, name, value.path)
    assert seen >= 4


def test_every_traces_top_operators_in_one_pass_are_each_traces_own():
    """top_operators_by (op_shape_time's figures for a batch of partitions in one pass) gives each group what
    top_operators gives that group alone: ties broken by name, more than `limit` operators cut, a trace with no GPU
    time at all (shares 0, not NaN)."""
    import polars as pl
    from polars.testing import assert_frame_equal

    from pipelines.defs.metadata import top_operators, top_operators_by

    rows = [("a", f"op{i % 13}", (i * 7919) % 1000) for i in range(60)]  # 13 operators, repeated, some equal sums
    rows += [("b", "gemm", 5), ("b", "attention", 5), ("b", "rms_norm", 1), ("c", "gemm", 0), ("c", "copy", 0)]
    frame = pl.DataFrame(rows, schema={"trace_id": pl.String, "operator": pl.String, "gpu_ns": pl.Int64}, orient="row")
    together = top_operators_by(frame, "trace_id", "gpu_ns")
    for (trace,), part in frame.partition_by("trace_id", as_dict=True).items():
        alone = top_operators(part, "gpu_ns")
        mine = together.filter(pl.col("trace_id") == trace).drop("trace_id")
        assert_frame_equal(mine, alone.select(mine.columns))
    assert together.filter(pl.col("trace_id") == "a").height == 10 and together["share"].is_nan().sum() == 0


def test_a_markdown_table_from_rows_is_the_one_from_their_frame():
    """kernel_events' per-partition table is made from the summary's rows without a frame (markdown_rows): the same
    text markdown_table makes from the frame, floats rounded, nulls empty, `|` and markdown escaped, ints as they are."""
    import polars as pl

    from pipelines.defs.metadata import markdown_rows, markdown_table

    schema = {"attribution": pl.String, "dur_ns": pl.Int64, "share": pl.Float64}
    rows = [("a|b *x*", 5, 0.123456789), ("gemm", None, None), ("unattributed", 123456789012, 1.0)]
    frame = pl.DataFrame(rows, schema=schema, orient="row")
    made = markdown_rows(schema, rows).value
    assert made == markdown_table(frame).value
    assert "a\\|b" in made and "| gemm |  |  |" in made and "0.1235" in made
