"""Fixtures of the release tests: one Atrex-Bench import shared by the tests that only read it."""

from __future__ import annotations

import pytest

from release.atrex import import_atrex


@pytest.fixture(scope="session")
def atrex_release(atrex_dir, tmp_path_factory):
    """A release imported from the published Atrex-Bench data (read-only for tests)."""
    out = tmp_path_factory.mktemp("atrex") / "release"
    import_atrex(atrex_dir, out)
    return out
