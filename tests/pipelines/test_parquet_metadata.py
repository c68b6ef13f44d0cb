"""Every Parquet file hotshape writes says what each column is: the whole pipeline (trace store, weights, release,
results) and `hotshape ingest` (the store's views) run on example traces, and what they wrote is opened."""

from __future__ import annotations

import shutil

import pyarrow.parquet as pq

from pipelines.cli import main
from tests.conftest import REPO
from tests.docs.test_docs import _tables, documented, written_tables
from tests.pipelines.conftest import DENSE_FLEET, copy_traces

# llama3-8b/graph.json.gz replays CUDA graphs: its capture traces are parsed into the store's captures/ too.
TRACES = ["llama3-8b/graph.json.gz", "llama3-8b-compiled/eager.json.gz"]


def test_every_parquet_file_written_describes_every_column_as_the_tables_doc_does(tmp_path, monkeypatch, capsys):
    (tmp_path / ".dagster_home").mkdir()
    shutil.copy(REPO / ".dagster_home" / "dagster.yaml", tmp_path / ".dagster_home" / "dagster.yaml")
    traces = copy_traces(tmp_path / "traces", TRACES)
    (tmp_path / "fleet.yaml").write_text(DENSE_FLEET)
    shutil.copytree(REPO / "tests" / "adversarial" / "honest", tmp_path / "submissions" / "honest")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    assert main(["run-pipeline", "--traces", "traces", "--fleet", "fleet.yaml", "--out", "out",
                 "--submissions", "submissions", "--json"]) == 0
    assert main(["ingest", *(str(traces / t) for t in TRACES), "--out", "ingested"]) == 0
    capsys.readouterr()

    files = sorted((tmp_path / "out").rglob("*.parquet")) + sorted((tmp_path / "ingested").rglob("*.parquet"))
    # Types aside (tests/docs checks them against the schemas): Parquet has no second unit, so the results'
    # timestamp[s] evaluated_at reads back from the file as timestamp[ms] (read_results casts it back).
    def untyped(rows):
        return [(column, unit, text) for column, _, unit, text in rows]

    docs = [untyped(t) for t in _tables((REPO / "docs" / "tables.md").read_text())]
    tables = {name: untyped(documented(schema)) for name, schema in written_tables().items()}
    found = set()
    for path in files:
        rows = untyped(documented(pq.read_schema(path)))
        where = path.relative_to(tmp_path)
        bare = [column for column, _, text in rows if not text]
        assert not bare, f"{where}: columns without a description: {bare}"
        assert rows in docs, f"{where}: docs/tables.md has no table of these columns as the file describes them: {rows}"
        found |= {name for name, table in tables.items() if table == rows}
    # every kind of file the run writes was opened: store, views, weights, release, results
    assert found >= {"ingest CLASSIFIED_EVENTS", "ingest OP_SHAPE_TIME", "ingest PROVENANCE", "ingest CAPTURES",
                     "ingest TRACES", "weighting FLEET_WEIGHTS", "weighting HOT_PROBLEMS", "results",
                     "release manifest", "release weights", "release intervals", "release operator_intervals",
                     "release provenance", "release roofline"}, found
