"""Bundles: deterministic Parquet, atomic write, sha256 manifest checked on every read."""

from __future__ import annotations

import hashlib
import io
import json
import shutil

import polars as pl
import pyarrow.parquet as pq
import pytest

from release import bundle
from release.bundle import ReleaseError, ReleaseIntegrityError, read_release, write_bundle

MANIFEST = pl.DataFrame({
    "problem_id": ["pb", "pa", "pc"], "operator": ["rms_norm", "rms_norm", "silu_and_mul"],
    "init_kwargs": ["{}"] * 3, "input_kwargs": ['{"n":2}', '{"n":1}', '{"n":3}'], "dtypes": ["{}"] * 3,
})
WEIGHTS = pl.DataFrame({"problem_id": ["pa", "pb", "pc"], "weight": [0.5, 0.25, 0.25],
                        "weight_prefill": [1.0, 0.0, 0.0], "weight_decode": [0.0, 0.5, 0.5],
                        "weight_mixed": [0.0, 0.0, 0.0]})


# release.json's fields besides those write_bundle adds (format, files, digest): release/info.py's ReleaseInfo.
INFO = {"name": "t", "version": "1.0", "parent": None, "created": "2026-11-01", "source": {"kind": "test"},
        "key_source": "file", "counts": {"problems": 3, "operators": 2}, "roofline": {"ours": False},
        "weights": [{"version": 1, "file": bundle.weights_file(1), "created": "2026-11-01"}]}


def _files(manifest=MANIFEST):
    return {bundle.MANIFEST_FILE: bundle.table_file(bundle.MANIFEST_FILE, manifest, "manifest", ("problem_id",)),
            bundle.weights_file(1): bundle.table_file(bundle.weights_file(1), WEIGHTS, "weights", ("problem_id",)),
            "README.md": b"# card\n"}


def _write(path):
    return write_bundle(path, _files(), INFO)


def test_parquet_bytes_depend_only_on_rows():
    shuffled = MANIFEST.reverse()
    a = bundle.parquet_bytes(MANIFEST, "manifest", ("problem_id",))
    assert a == bundle.parquet_bytes(shuffled, "manifest", ("problem_id",))
    meta = pq.read_metadata(io.BytesIO(a))
    assert set(meta.metadata) == {b"ARROW:schema"}  # no pandas blob, no timestamps: the schema with its units only
    schema = pq.read_schema(io.BytesIO(a))
    assert schema.metadata is None
    assert schema.field("problem_id").metadata[b"description"].startswith(b"keyed hash")
    assert all(set(f.metadata) == {b"description", b"unit"} for f in schema)
    assert pl.read_parquet(io.BytesIO(a))["problem_id"].to_list() == ["pa", "pb", "pc"]


def test_schema_is_enforced_on_write():
    with pytest.raises(ValueError, match="manifest: missing columns"):
        bundle.parquet_bytes(MANIFEST.drop("dtypes"), "manifest", ())


def test_write_lists_every_file_with_its_sha256_and_reads_back(tmp_path):
    info = _write(tmp_path / "r")
    on_disk = json.loads((tmp_path / "r" / "release.json").read_text())
    assert on_disk == info
    for rel, digest in info["files"].items():
        assert hashlib.sha256((tmp_path / "r" / rel).read_bytes()).hexdigest() == digest
    rel = read_release(tmp_path / "r")
    assert rel.versions == [1]
    assert rel.manifest.sort("problem_id").equals(MANIFEST.sort("problem_id"))
    assert rel.weights("v1")["weight"].to_list() == [0.5, 0.25, 0.25]
    assert not list(tmp_path.glob(".r.tmp-*"))


def test_same_inputs_give_identical_bytes(tmp_path):
    a, b = _write(tmp_path / "a"), _write(tmp_path / "b")
    assert a["files"] == b["files"]
    assert (tmp_path / "a" / "release.json").read_bytes() == (tmp_path / "b" / "release.json").read_bytes()


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete", "extra"])
def test_damage_is_detected_on_read(tmp_path, damage):
    _write(tmp_path / "r")
    target = tmp_path / "r" / bundle.weights_file(1)
    if damage == "flip":
        data = bytearray(target.read_bytes())
        data[len(data) // 2] ^= 0x01
        target.write_bytes(bytes(data))
    elif damage == "truncate":
        target.write_bytes(target.read_bytes()[:-10])
    elif damage == "delete":
        target.unlink()
    else:
        (tmp_path / "r" / "public" / "stray.txt").write_text("x")
    with pytest.raises(ReleaseIntegrityError, match="weights/v1.parquet|stray.txt"):
        read_release(tmp_path / "r")


def test_an_edit_after_open_changes_nothing_read_and_is_caught_by_the_next_read(tmp_path):
    _write(tmp_path / "r")
    rel = read_release(tmp_path / "r")
    (tmp_path / "r" / "README.md").write_bytes(b"# edited\n")
    assert rel.read_bytes("README.md") == b"# card\n"  # the bytes that were verified are the bytes used
    with pytest.raises(ReleaseIntegrityError, match="README.md"):
        read_release(tmp_path / "r")


def test_existing_release_is_never_overwritten(tmp_path):
    _write(tmp_path / "r")
    with pytest.raises(ReleaseError, match="already exists"):
        _write(tmp_path / "r")


def test_failed_check_leaves_no_release_and_no_temporary(tmp_path):
    def refuse(tmp):
        assert (tmp / "README.md").exists()  # the check sees the finished bundle
        raise RuntimeError("leak")

    with pytest.raises(RuntimeError, match="leak"):
        write_bundle(tmp_path / "r", _files(), INFO, check=refuse)
    assert list(tmp_path.iterdir()) == []


def test_replace_swaps_in_a_complete_release(tmp_path):
    _write(tmp_path / "r")
    files = _files()
    files["README.md"] = b"# v2\n"
    write_bundle(tmp_path / "r", files, INFO, replace=True)
    assert read_release(tmp_path / "r").read_bytes("README.md") == b"# v2\n"
    # NAME -> .NAME.d/<digest>; the version it replaced is gone, and so is the lock file.
    assert sorted(p.name for p in tmp_path.iterdir()) == [".r.d", "r"]
    assert [p.name for p in (tmp_path / ".r.d").iterdir()] == [(tmp_path / "r").resolve().name]


def test_not_a_release_is_named(tmp_path):
    with pytest.raises(ReleaseError, match="no release.json"):
        read_release(tmp_path)
    (tmp_path / "release.json").write_text("{not json")
    with pytest.raises(ReleaseIntegrityError, match="release.json"):
        read_release(tmp_path)


def test_paths_outside_the_release_are_refused(tmp_path):
    with pytest.raises(ReleaseError, match="bad file path"):
        write_bundle(tmp_path / "r", {"../evil": b"x"}, {})
    shutil.rmtree(tmp_path / "r", ignore_errors=True)


def test_edited_release_json_is_detected(tmp_path):
    _write(tmp_path / "r")
    path = tmp_path / "r" / "release.json"
    info = json.loads(path.read_text())
    info["name"] = "renamed"
    path.write_text(json.dumps(info))
    with pytest.raises(ReleaseIntegrityError, match="release.json: its digest"):
        read_release(tmp_path / "r")
