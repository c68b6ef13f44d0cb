"""Keyed problem ids: stable for one key, meaningless without it, canonical over dict order."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from release import ids

KEY = bytes(range(32))


def test_id_is_hmac_sha256_of_canonical_problem():
    canon = ids.canonical_problem("rms_norm", {"eps": 1e-6}, {"token_count": 7, "hidden_size": 64}, {"dtype": "bf16"})
    text = json.dumps({"dtypes": {"dtype": "bf16"}, "init_kwargs": {"eps": 1e-6}, "input_kwargs":
                       {"hidden_size": 64, "token_count": 7}, "operator": "rms_norm"}, sort_keys=True, separators=(",", ":"))
    assert canon == text
    assert ids.problem_id(KEY, canon) == "p" + hmac.new(KEY, text.encode(), hashlib.sha256).hexdigest()[:16]


def test_dict_order_and_absent_kwargs_do_not_change_the_id():
    a = ids.canonical_problem("silu_and_mul", None, {"shape": [4, 8], "b": 1}, None)
    b = ids.canonical_problem("silu_and_mul", {}, {"b": 1, "shape": [4, 8]}, {})
    assert ids.problem_id(KEY, a) == ids.problem_id(KEY, b)


def test_id_depends_on_key_and_on_every_part_of_the_problem():
    base = ("rms_norm", {"eps": 1e-6}, {"token_count": 7}, {"dtype": "bf16"})
    pid = ids.problem_id(KEY, ids.canonical_problem(*base))
    assert pid != ids.problem_id(bytes(32), ids.canonical_problem(*base))
    variants = [("layer_norm", *base[1:]), (base[0], {"eps": 1e-5}, *base[2:]),
                (*base[:2], {"token_count": 8}, base[3]), (*base[:3], {"dtype": "fp16"})]
    assert all(ids.problem_id(KEY, ids.canonical_problem(*v)) != pid for v in variants)


def test_non_finite_numbers_and_short_keys_are_refused():
    with pytest.raises(ValueError, match="non-finite"):
        ids.canonical_problem("rms_norm", {"eps": float("nan")}, {}, {})
    with pytest.raises(ids.ProblemKeyError):
        ids.problem_id(b"short", "x")


def test_key_resolution_order(tmp_path, monkeypatch):
    monkeypatch.delenv(ids.KEY_ENV, raising=False)
    (tmp_path / "sealed").mkdir()
    (tmp_path / ids.KEY_FILE).write_text("ab" * 32 + "\n")
    assert ids.resolve_key(release=tmp_path) == (bytes([0xAB]) * 32, "release")
    monkeypatch.setenv(ids.KEY_ENV, "cd" * 16)
    # The lineage's own key wins over the environment; the environment serves releases without one.
    assert ids.resolve_key(release=tmp_path) == (bytes([0xAB]) * 32, "release")
    assert ids.resolve_key(release=tmp_path / "sealed") == (bytes([0xCD]) * 16, "environment")
    assert ids.resolve_key(derive_from=(b"x",)) == (bytes([0xCD]) * 16, "environment")
    assert ids.resolve_key(KEY, release=tmp_path) == (KEY, "argument")
    monkeypatch.setenv(ids.KEY_ENV, "not hex")
    with pytest.raises(ids.ProblemKeyError, match=ids.KEY_ENV):
        ids.resolve_key(derive_from=(b"x",))
    (tmp_path / ids.KEY_FILE).write_text("zz")
    with pytest.raises(ids.ProblemKeyError, match="problem_id.key"):
        ids.resolve_key(release=tmp_path)


def test_missing_key_file_names_the_path(tmp_path, monkeypatch):
    monkeypatch.delenv(ids.KEY_ENV, raising=False)
    with pytest.raises(ids.ProblemKeyError, match="problem_id.key"):
        ids.resolve_key(release=tmp_path)


def test_derived_key_is_deterministic_and_input_dependent(monkeypatch):
    monkeypatch.delenv(ids.KEY_ENV, raising=False)
    k1, src = ids.resolve_key(derive_from=(b"trace-a", b"fleet"))
    assert src == "derived" and k1 == ids.resolve_key(derive_from=(b"trace-a", b"fleet"))[0]
    assert k1 != ids.resolve_key(derive_from=(b"trace-b", b"fleet"))[0]
