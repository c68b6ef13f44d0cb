"""The HTML drift report: self-contained, and rendered by a real headless browser."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import polars as pl
import pytest

from test_selection import not_memory
from weighting.drift import compare
from weighting.drift_report import NEW_COLOUR, OLD_COLOUR, render_html, write_html
from weighting.fleet import load_fleet
from weighting.selection import Policy, select_hot
from weighting.weights import fleet_weights

ACC = {"H200", "MI300X", "B200"}


@pytest.fixture(scope="module")
def report(planted_fleet):
    """Drift from a perturbed, truncated copy of the planted selection to the selection itself."""
    root, fleet_yaml, traces, ost, _ = planted_fleet
    new, _ = select_hot(fleet_weights(ost, traces, load_fleet(fleet_yaml, root, accelerators=ACC)), Policy(),
                        is_benchmarkable=not_memory)
    wobble = pl.Series([1.0 + 0.3 * ((i * 7) % 5 - 2) for i in range(new.height)])
    old = new.with_columns(pl.col("weight") * wobble).head(new.height - 2)
    return compare(old, new)


def test_html_is_self_contained_and_has_the_plots(report):
    html = render_html(report, "v1", "v2<b>")
    assert html.count("<svg") == 3  # before/after, top movers, Lorenz
    assert "<polyline" in html and html.count("<rect") > 10
    assert not re.search(r"""(src|href)\s*=|url\(|@import|<script""", html, re.I)
    # the only URL is the SVG namespace, which a browser never fetches
    assert set(re.findall(r"https?://[^\s\"'<>]+", html)) <= {"http://www.w3.org/2000/svg"}
    assert "v2&lt;b&gt;" in html and "v2<b>" not in html
    for pid in report.newly_hot:
        assert pid[:30].replace('"', "&quot;") in html


def _png_pixels(path):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import image

    return image.imread(str(path))[..., :3]


def _has_colour(pixels: np.ndarray, hex_colour: str) -> bool:
    rgb = np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)]) / 255
    return bool(np.any(np.all(np.abs(pixels - rgb) < 0.02, axis=-1)))


def test_report_renders_in_headless_chromium(report, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    page = write_html(report, tmp_path / "drift.html", "v1", "v2")
    shot = tmp_path / "drift.png"
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--window-size=1000,1400", f"--screenshot={shot}", page.as_uri()]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    pixels = _png_pixels(shot)
    assert pixels.shape[:2] == (1400, 1000)
    ink = np.any(pixels < 0.9, axis=-1).mean()
    assert 0.02 < ink < 0.6, f"screenshot looks blank or broken ({ink:.3f} of pixels inked)"
    assert _has_colour(pixels, NEW_COLOUR) and _has_colour(pixels, OLD_COLOUR)  # the SVG bars were drawn
