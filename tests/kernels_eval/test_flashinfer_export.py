"""`hotshape export-flashinfer`: a release's problems as FlashInfer-Trace definitions and workload traces, valid
against the published schema (tests/fixtures/flashinfer_trace_schema.json, checked with `jsonschema`) and the
models' own rules, with nothing sealed in them."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import polars as pl
import pytest

from release.atrex import import_atrex
from release.bundle import read_release
from release.sealing import LeakError, assert_no_leak, public_vocabulary, sealed_strings
from tests.conftest import REPO

HOTSHAPE = str(Path(sys.executable).with_name("hotshape"))
SCHEMA = json.loads((REPO / "tests" / "fixtures" / "flashinfer_trace_schema.json").read_text())
OPS = "rms_norm,silu_and_mul,fused_add_rms_norm,moe_count_and_sort"


def validator(kind: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({**SCHEMA, "$ref": f"#/$defs/{kind}"})


@pytest.fixture(scope="module")
def atrex_release(atrex_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("atrex") / "release"
    import_atrex(atrex_dir, out)
    return out


@pytest.fixture(scope="module")
def exported(atrex_release, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("flashinfer") / "dataset"
    done = subprocess.run([HOTSHAPE, "export-flashinfer", str(atrex_release), "--out", str(out), "--ops", OPS,
                           "--json"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return out, json.loads(done.stdout)


def test_definitions_and_workloads_follow_the_schema(exported, atrex_release):
    out, summary = exported
    definitions = {d["name"]: d for d in (json.loads(p.read_text()) for p in out.glob("definitions/*/*.json"))}
    assert len(definitions) == summary["definitions"] > 0
    for d in definitions.values():
        validator("definition").validate(d)
        tree = ast.parse(d["reference"])  # the models' checks: a top-level run; shapes name declared axes
        assert any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in tree.body)
        assert {a for t in (*d["inputs"].values(), *d["outputs"].values()) for a in t["shape"] or ()} <= set(d["axes"])
    manifest = read_release(atrex_release).manifest
    traces = [json.loads(line) for p in out.glob("workloads/*/*.jsonl") for line in p.read_text().splitlines()]
    assert len(traces) == summary["workloads"]
    for t in traces:
        validator("workload_trace").validate(t)
        d = definitions[t["definition"]]
        assert set(t["workload"]["axes"]) == {a for a, spec in d["axes"].items() if spec["type"] == "var"}
        assert set(t["workload"]["inputs"]) == set(d["inputs"])
    exported_ops = {d["op_type"] for d in definitions.values()}
    ids = manifest.filter(pl.col("operator").is_in(list(exported_ops)))["problem_id"].to_list()
    assert sorted(t["workload"]["uuid"] for t in traces) == sorted(ids)  # every problem once
    assert summary["skipped"].keys() == {"moe_count_and_sort"}  # its output sizes depend on the data
    assert exported_ops == {"rms_norm", "silu_and_mul", "fused_add_rms_norm"}


def test_a_workload_binds_the_shapes_of_its_problem(exported, atrex_release):
    out, _ = exported
    (path,) = out.glob("definitions/rms_norm/*.json")
    d = json.loads(path.read_text())
    assert d["inputs"]["x"]["shape"] == ["token_count", "hidden_size"] and d["inputs"]["weight"]["shape"] == ["hidden_size"]
    manifest = {r["problem_id"]: json.loads(r["input_kwargs"]) for r in read_release(atrex_release).manifest.iter_rows(named=True)}
    for line in (out / "workloads" / "rms_norm" / f"{d['name']}.jsonl").read_text().splitlines():
        w = json.loads(line)["workload"]
        fixed = {a: s["value"] for a, s in d["axes"].items() if s["type"] == "const"}
        assert {**fixed, **w["axes"]} == manifest[w["uuid"]]


def test_nothing_sealed_goes_out_and_the_check_would_say_so(exported, atrex_release, tmp_path):
    out, _ = exported
    release = read_release(atrex_release)
    sealed = sealed_strings(release.sealed("provenance"))
    vocabulary = public_vocabulary(release.manifest)
    assert sealed and assert_no_leak(out, sealed, vocabulary).ok
    weights = json.loads((out / "hotshape_weights.json").read_text())["weights"]
    assert set(weights) <= set(release.manifest["problem_id"])
    planted = sorted(s for s in sealed if s not in vocabulary and len(s) > 5)[0]
    (tmp_path / "definitions").mkdir()
    (tmp_path / "definitions" / "x.json").write_text(json.dumps({"description": planted}))
    with pytest.raises(LeakError):
        assert_no_leak(tmp_path, sealed, vocabulary)
