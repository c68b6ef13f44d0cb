"""Self-contained HTML pages: jinja2 templates shipped in a package's `templates/` folder (autoescaped, so a name
from a trace or a submission is text, never markup) and charts drawn by matplotlib, embedded as SVG data. A page
opens offline with nothing beside it; no module builds markup by hand (tests/docs/test_no_hand_markup.py)."""

from __future__ import annotations

import base64
import io
import re
import textwrap
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

TEMPLATES = Path(__file__).parent / "templates"  # base.html and macros.html, which every page extends
LABEL_CHARS = 60  # a tick label longer than this wraps onto more lines, kept whole (shape labels run to 150)


@dataclass(frozen=True)
class Chart:
    """A chart as a page shows it: its title (the image's alt text), SVG data URI and size in CSS pixels."""

    title: str
    uri: str
    width_px: int
    height_px: int


@lru_cache(maxsize=None)
def _environment(folder: str):
    import jinja2

    return jinja2.Environment(loader=jinja2.FileSystemLoader([folder, str(TEMPLATES)]), autoescape=True,
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                              keep_trailing_newline=True)


def render(template: str, folder: Path = TEMPLATES, **context) -> str:
    """The page `template` (looked up in `folder`, then beside base.html) rendered with `context`, escaped."""
    return _environment(str(folder)).get_template(template).render(**context)


def figure(width_in: float, height_in: float):
    """A matplotlib Figure of that size, off pyplot's global state (safe in any thread, never shown)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure(figsize=(width_in, height_in))


def wrap_label(label: str, width: int = LABEL_CHARS) -> str:
    """A tick label broken onto lines of at most `width` characters, none of it cut."""
    return "\n".join(textwrap.wrap(label, width, break_long_words=True, break_on_hyphens=False)) or label


def svg_bytes(fig) -> bytes:
    """The figure as SVG, text drawn as paths (no font needed where the page is opened), with no date and fixed ids:
    the same figure gives the same bytes, so two pages of the same data are the same file."""
    import matplotlib

    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "hotshape", "svg.fonttype": "path"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", pad_inches=0.1, metadata={"Date": None})
    return buf.getvalue()


def png_bytes(fig, dpi: int = 100) -> bytes:
    """The figure as PNG (Dagster's markdown metadata shows PNG data), with no Software chunk."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", pad_inches=0.1, metadata={"Software": None})
    return buf.getvalue()


def chart(fig) -> Chart:
    """The figure as a page's chart: its first axes' title as the alt text, its drawn size in CSS pixels."""
    title = next((ax.get_title() for ax in fig.axes if ax.get_title()), "chart")
    data = svg_bytes(fig)
    width_pt, height_pt = _svg_size_pt(data)
    return Chart(title, "data:image/svg+xml;base64," + base64.b64encode(data).decode(),
                 round(width_pt * 96 / 72), round(height_pt * 96 / 72))


def _svg_size_pt(data: bytes) -> tuple[float, float]:
    head = data[:2000].decode("utf-8", "replace")
    width, height = (re.search(rf'{k}="([\d.]+)pt"', head).group(1) for k in ("width", "height"))
    return float(width), float(height)
