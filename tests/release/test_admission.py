"""Admission into a release: a problem's time is its operator's work (release/admission.py), on real traces."""

from __future__ import annotations

import shutil

import polars as pl
import pytest
import yaml

from ingest.store import TraceStore
from ingest.taxonomy import default_document
from release.admission import MIN_OWN_WORK_SHARE, own_work, refusals
from flow.build import build_release
from release.bundle import ReleaseError
from tests.conftest import REPO

TRACE = "llama3-8b/eager.json.gz"  # HF Llama-3-8B on an H200: SDPA decode fills its mask inside the attention op


def _fleet(tmp_path):
    root = tmp_path / "root"
    (root / "llama3-8b").mkdir(parents=True)
    shutil.copy(REPO / "examples" / "traces" / TRACE, root / TRACE)
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump({"window": {"start": "2026-11-01", "end": "2026-11-30"}, "deployments": [
        {"id": "chat-dense-8b", "model": "llama3-8b", "framework": "hf-transformers", "accelerator": "H200",
         "card_hours": 46080, "traces": ["llama3-8b/*.json.gz"]}]}))
    return root, fleet


def _without_roles(tmp_path):
    """The shipped taxonomy as it was before kernel roles: no `roles`, so a fill inside SDPA is attention."""
    doc = default_document()  # every operator folder's rules merged in
    del doc["roles"]
    path = tmp_path / "taxonomy_without_roles.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _store(tmp_path, root, taxonomy=None):
    store = TraceStore(tmp_path / "store")
    report = store.ingest([root / TRACE], [TRACE], taxonomy=taxonomy)
    return store, report.ids[TRACE]


def test_every_shaped_problem_of_a_real_trace_is_its_operators_work(tmp_path):
    root, _ = _fleet(tmp_path)
    store, tid = _store(tmp_path, root)
    problems = store.scan("op_shape_time", [tid]).filter(pl.col("shape") != "{}").select("operator", "shape").unique().collect()
    shares = own_work(problems, store.scan("provenance", [tid]))
    assert shares.height == problems.height > 10
    assert shares["own_share"].min() >= MIN_OWN_WORK_SHARE, shares.sort("own_share").head(3).to_dicts()


def test_a_fill_classified_as_attention_is_refused_and_named(tmp_path):
    root, fleet = _fleet(tmp_path)
    old = _without_roles(tmp_path)
    store, tid = _store(tmp_path, root, taxonomy=old)
    problems = store.scan("op_shape_time", [tid]).filter(pl.col("shape") != "{}").select("operator", "shape").unique().collect()
    refused = refusals(problems, store.scan("provenance", [tid]))
    # The decode SDPA calls' mask fill ran under the attention op: with the roles that fill is memset.
    assert refused and {r.operator for r in refused} == {"paged_attention_decode"}
    assert all(set(r.foreign_ns) == {"fill"} and r.own_share < MIN_OWN_WORK_SHARE for r in refused)
    with pytest.raises(ReleaseError, match=r"not their operator's work: problem paged_attention_decode .*fill"):
        build_release(root, fleet, tmp_path / "rel", name="bench", store=tmp_path / "store")
    assert not (tmp_path / "rel").exists()
