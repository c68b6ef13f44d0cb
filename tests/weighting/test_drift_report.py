"""The HTML drift report: self-contained, and rendered by a real headless browser."""

from __future__ import annotations

import base64
import re
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


def _outside_data(html: str) -> str:
    """The page with every data URI's payload left out: what a browser could fetch or run."""
    return re.sub(r"data:image/svg\+xml;base64,[A-Za-z0-9+/=]+", "data:", html)


def test_html_is_self_contained_and_has_the_plots(report):
    html = render_html(report, "v1", "v2<b>")
    charts = re.findall(r'<img class="chart" alt="([^"]+)" src="data:image/svg\+xml;base64,([^"]+)"', html)
    assert [alt for alt, _ in charts] == ["Operator weights, v1 → v2&lt;b&gt;",
                                         "Top movers: problems whose weight changed most",
                                         "Lorenz curves of problem weights"]
    for _, data in charts:
        assert base64.b64decode(data).lstrip().startswith(b"<?xml")  # matplotlib's own SVG, nothing hand-placed
    page = _outside_data(html)
    assert not re.search(r"""(src|href)\s*=\s*"(?!data:)|url\(|@import|<script""", page, re.I)
    assert not re.search(r"https?://", page)
    assert "v2&lt;b&gt;" in html and "v2<b>" not in html
    for pid in report.newly_hot:
        assert pid[:30].replace('"', "&#34;") in html


def _png_pixels(path):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import image

    return image.imread(str(path))[..., :3]


def _has_colour(pixels: np.ndarray, hex_colour: str) -> bool:
    rgb = np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)]) / 255
    return bool(np.any(np.all(np.abs(pixels - rgb) < 0.02, axis=-1)))


def long_labels(report) -> dict[str, str]:
    """Shape labels as long as the longest a release names (a paged-attention shape runs past 150 characters)."""
    return {pid: f"{op} hidden_size=4096, token_count={i}, a_long_parameter_name=" + "x" * 80
            for i, (pid, op) in enumerate(report.problems.select("problem_id", "operator").iter_rows())}


def test_report_renders_in_headless_chromium_with_no_chart_clipped(report, tmp_path):
    """Regression: the movers chart's hand-built SVG ran past a 1,400 px window. Each chart is measured where the
    browser lays it out, at 1,400 and 700 px: inside its container and the window, decoded, not squashed."""
    from tests.chromium import browser, clipped

    page = write_html(report, tmp_path / "drift.html", "v1", "v2", labels=long_labels(report))
    assert clipped(page) == []
    shot = tmp_path / "drift.png"
    cmd = [browser(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--window-size=1000,1400", f"--screenshot={shot}", page.as_uri()]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    pixels = _png_pixels(shot)
    assert pixels.shape[:2] == (1400, 1000)
    ink = np.any(pixels < 0.9, axis=-1).mean()
    assert 0.02 < ink < 0.6, f"screenshot looks blank or broken ({ink:.3f} of pixels inked)"
    assert _has_colour(pixels, NEW_COLOUR) and _has_colour(pixels, OLD_COLOUR)  # the bars were drawn


def test_the_browser_check_sees_a_chart_run_past_its_container(report, tmp_path):
    """Without the rule that scales charts to the page, the 1,083 px movers chart runs past a 700 px window: the
    check above says so (it can fail)."""
    from tests.chromium import clipped

    page = tmp_path / "unscaled.html"
    page.write_text(render_html(report, "v1", "v2", labels=long_labels(report)).replace("max-width:100%;", ""))
    problems = clipped(page, widths=(700,))
    assert any("Top movers" in p and "outside its box" in p for p in problems), problems


def test_labels_are_shapes_in_full_wrapped_onto_lines(report):
    """Labels were cut to 38 characters with an ellipsis; then a hand-built label column was sized by guessing
    character widths. Now matplotlib draws each label whole, wrapped onto lines, and sizes the figure to them."""
    from weighting.drift_report import bars_movers

    labels = long_labels(report)
    causes = {report.problems["problem_id"][0]: "deployment d (alone +3.00 pt): card-hours 10 → 40"}
    movers = [(labels[p], d) for p, d in report.problems.head(15).select("problem_id", "delta").iter_rows()]
    fig = bars_movers(movers)
    ticks = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert ["".join(t.split()) for t in ticks] == ["".join(label.split()) for label, _ in movers]  # nothing cut
    assert max(len(line) for t in ticks for line in t.split("\n")) <= 60 and "…" not in "".join(ticks)
    html = render_html(report, "v1", "v2", labels=labels, causes=causes)
    assert "Causes of the large movements" in html and "card-hours 10 → 40" in html
    assert labels[report.problems["problem_id"][0]] in html  # in full in the causes table
    assert "what it means" in html and "Above 0.10 is large" in html


def test_shape_labels_summarise_long_lists():
    from weighting.drift import shape_labels

    manifest = pl.DataFrame({"problem_id": ["a", "b"], "operator": ["unified_attention"] * 2,
                             "init_kwargs": ['{"num_heads":8}'] * 2,
                             "input_kwargs": ['{"seq_lens":[256,256,256,256,256,256,256]}', '{"seq_lens":[1,2,3,4,5,6,7,8]}'],
                             "dtypes": ['{"dtype":"bf16","input_dtypes":{"q":"bf16"}}'] * 2})
    labels = shape_labels(manifest)
    assert labels == {"a": "unified_attention dtype=bf16, num_heads=8, seq_lens=[256]×7",
                      "b": "unified_attention dtype=bf16, num_heads=8, seq_lens=[8 values 1–8, sum 36]"}


def test_the_report_marks_movements_beyond_the_bootstrap_intervals():
    import polars as pl

    from weighting.drift import beyond_intervals, compare
    from weighting.drift_report import render_html

    old = pl.DataFrame({"problem_id": ["a", "b"], "operator": ["x", "y"], "weight": [0.6, 0.4]})
    new = pl.DataFrame({"problem_id": ["a", "b"], "operator": ["x", "y"], "weight": [0.5, 0.5]})
    report = compare(old, new)
    ivals = pl.DataFrame({"problem_id": ["a", "b"], "weight_lo": [0.45, 0.3], "weight_hi": [0.55, 0.6]})
    ops = pl.DataFrame({"operator": ["x", "y"], "weight_lo": [0.45, 0.3], "weight_hi": [0.55, 0.6]})
    beyond = beyond_intervals(report.to_dict(), report, ivals, ops)["beyond_interval"]
    page = render_html(report, beyond=beyond)
    assert "Beyond the bootstrap intervals (1 problems, 1 operators)" in page and "beyond interval" in page
    assert "Beyond the bootstrap" not in render_html(report)


def test_the_same_drift_gives_the_same_page(report):
    """Chart ids are fixed (svg.hashsalt) and no date is written: a page can be diffed and content-addressed."""
    assert render_html(report, "v1", "v2") == render_html(report, "v1", "v2")


def test_charts_scale_to_the_page_and_meanings_are_escaped(report):
    """Regression: the movers chart ran past a 1,400 px window (widths guessed from label lengths) and the phase
    row's meaning lost its `weight_<phase>` to the HTML parser."""
    html = render_html(report, "v1", "v2")
    assert "img.chart{display:block;max-width:100%;height:auto" in html
    for width, height in re.findall(r'<img class="chart"[^>]* width="(\d+)" height="(\d+)">', html):
        assert 100 < int(width) < 2000 and 100 < int(height) < 4000
    assert "weight_&lt;phase&gt;" in html and "weight_<phase>" not in html
