"""The score report's roofline scatter names each operator's problems on its x axis; the leaderboard page has a
plot of the ranking (an inline PNG, nothing fetched)."""

from __future__ import annotations

import base64
import re

from tests.kernels_eval.test_scoring import FakeRelease, V1, frame, row

from kernels_eval.leaderboard import leaderboard, leaderboard_html
from kernels_eval.report import operator_groups


def test_operator_groups_put_each_name_at_the_middle_of_its_run():
    assert operator_groups(["gemm", "gemm", "gemm", "rms_norm", "silu_and_mul", "silu_and_mul"]) == [
        ("gemm", 1.0, 2), ("rms_norm", 3.0, 3), ("silu_and_mul", 4.5, 5)]
    assert operator_groups([]) == []


def test_the_leaderboard_page_has_its_plot_inline():
    rows = ([row(p, t=2.0, submission="fast") for p in ("a1", "a2", "a3", "g1")]
            + [row(p, t=8.0, submission="slow") for p in ("a1", "a2", "a3", "g1")])
    entries = leaderboard(frame(rows), FakeRelease({1: V1}))
    assert [e["submission"] for e in entries] == ["fast", "slow"]
    page = leaderboard_html(entries, "board")
    ((width, height, svg),) = [(int(w), int(h), s) for s, w, h in re.findall(
        r'<img class="chart" alt="Leaderboard" src="data:image/svg\+xml;base64,([^"]+)" width="(\d+)" height="(\d+)">',
        page)]
    assert base64.b64decode(svg).lstrip().startswith(b"<?xml") and width > 400 and height > 100
    assert not re.search(r"https?://", re.sub(r"base64,[^\"]+", "", page))
