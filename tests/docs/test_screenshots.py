"""docs/screenshots/ holds the drift page, the score report and the leaderboard as headless Chromium drew them at
1,400 × 1,800 px, each with its chart's colours on it, and its README says how they were made and checked."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import REPO

SHOTS = REPO / "docs" / "screenshots"
# a colour each page's charts draw in (weighting/drift_report.py NEW_COLOUR, kernels_eval/report.py and leaderboard.py)
CHART_COLOUR = {"drift": "#2e86de", "score": "#4caf50", "leaderboard": "#3b7dd8"}


@pytest.mark.parametrize("page", sorted(CHART_COLOUR))
def test_each_page_has_its_screenshot_with_its_chart_drawn(page):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import image

    pixels = image.imread(str(SHOTS / f"{page}.png"))[..., :3]
    assert pixels.shape[:2] == (1800, 1400)
    rgb = np.array([int(CHART_COLOUR[page][i : i + 2], 16) for i in (1, 3, 5)]) / 255
    assert np.any(np.all(np.abs(pixels - rgb) < 0.02, axis=-1)), f"{page}.png shows no chart"
    readme = (SHOTS / "README.md").read_text()
    assert f"]({page}.png)" in readme and "--screenshot=docs/screenshots/$p.png" in readme
    assert "tests.chromium import clipped" in readme
