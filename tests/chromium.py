"""Pages measured in a real headless Chromium: where each chart lands on the page at a window width, as the
browser lays it out (no mock of layout)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

# Appended to a copy of the page under test only: the pages themselves carry no script.
MEASURE = """<script>
window.addEventListener("load", () => {
  const page = document.documentElement;
  const charts = [...document.querySelectorAll("img.chart")].map(img => {
    const r = img.getBoundingClientRect(), box = img.parentElement.getBoundingClientRect();
    const style = getComputedStyle(img.parentElement);
    return {alt: img.alt, left: r.left, right: r.right, top: r.top, width: r.width, height: r.height,
            natural_width: img.naturalWidth, natural_height: img.naturalHeight, complete: img.complete,
            box_left: box.left + parseFloat(style.paddingLeft), box_right: box.right - parseFloat(style.paddingRight)};
  });
  const out = document.createElement("pre");
  out.id = "measured";
  out.textContent = JSON.stringify({viewport_width: page.clientWidth, scroll_width: page.scrollWidth, charts});
  document.body.appendChild(out);
});
</script>"""


def browser() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if found is None:
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run installs it)")
    return found


def measure(page: Path, width: int, height: int = 1800) -> dict:
    """The page's viewport and scroll width and each chart's box, its container's content box and its decoded size,
    in CSS pixels, in a `width` × `height` window."""
    probe = page.with_name(page.stem + ".measure.html")
    probe.write_text(page.read_text(encoding="utf-8") + MEASURE, encoding="utf-8")
    done = subprocess.run([browser(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--disable-background-networking", f"--window-size={width},{height}",
                           "--virtual-time-budget=10000", "--dump-dom", probe.as_uri()],
                          capture_output=True, text=True, timeout=120, check=True)
    found = re.search(r'<pre id="measured">(.*?)</pre>', done.stdout, re.S)
    assert found, f"the page did not load in chromium: {done.stderr[-2000:]}"
    import html

    return json.loads(html.unescape(found.group(1)))


def clipped(page: Path, widths=(1400, 700)) -> list[str]:
    """What is wrong with the charts of `page` at each window width: a chart not decoded, cut by its container or
    the window, or squashed out of its aspect ratio; the page wider than the window at the widest width."""
    problems = []
    for width in widths:
        m = measure(page, width)
        if not m["charts"]:
            problems.append(f"{width}px: no chart on the page")
        if width == max(widths) and m["scroll_width"] > m["viewport_width"]:
            problems.append(f"{width}px: page is {m['scroll_width']} px wide in a {m['viewport_width']} px window")
        for c in m["charts"]:
            where = f"{width}px {c['alt']!r}"
            if not (c["complete"] and c["natural_width"] > 0 and c["natural_height"] > 0):
                problems.append(f"{where}: not decoded")
            if c["left"] < c["box_left"] - 0.5 or c["right"] > c["box_right"] + 0.5 or c["right"] > m["viewport_width"]:
                problems.append(f"{where}: spans {c['left']:.0f}-{c['right']:.0f} outside its box "
                                f"{c['box_left']:.0f}-{c['box_right']:.0f} (window {m['viewport_width']})")
            if c["natural_width"] and abs(c["width"] / c["height"] - c["natural_width"] / c["natural_height"]) > 0.02 * (
                    c["natural_width"] / c["natural_height"]):
                problems.append(f"{where}: drawn {c['width']:.0f}×{c['height']:.0f}, "
                                f"made {c['natural_width']}×{c['natural_height']}")
    return problems
