"""The quick subset's split (tests/conftest.py SLOW_FILES, SLOW_TESTS) names only files and tests that exist."""

from __future__ import annotations

import tests.conftest as conftest


def test_every_slow_name_is_there():
    assert conftest.stale_slow_names() == []


def test_a_renamed_slow_file_or_test_is_caught(tmp_path, monkeypatch):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_kept():\n    pass\n\n\ndef test_quick():\n    pass\n")
    monkeypatch.setattr(conftest, "SLOW_FILES", frozenset({"tests/test_gone.py"}))
    monkeypatch.setattr(conftest, "SLOW_TESTS", {"tests/test_a.py": {"test_kept", "test_renamed"}})
    assert conftest.stale_slow_names(tmp_path) == ["tests/test_gone.py", "tests/test_a.py::test_renamed"]
