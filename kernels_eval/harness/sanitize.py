"""Text from a candidate's process made safe for a results row, a terminal and HTML.

Everything a worker sends is hostile input (docs/threat-model.md, "Harness I/O"): an error text, an observation
record or a kernel name may hold a lone surrogate (`"\\ud800"` from a JSON escape), which no UTF-8 writer takes and
which once ended a whole run with no results file; terminal control sequences (ESC, CR, backspace), which drew a
fake "done" line over the summary; bidirectional overrides, which reorder what a reader sees; or megabytes of
text. `clean` keeps every other character and shows each refused one as its escape (`\\x1b`, `\\ud800`), so the
evidence survives, visible and inert. Standard library only: the evaluator's GPU machine runs it.
"""

from __future__ import annotations

import re

TEXT_CHARS = 2000  # an error text or an observation kept in a row (the rest is cut, and said to be)
NAME_CHARS = 200  # a kernel, op or fallback name
LIST_ITEMS = 64  # entries of a list column (fallbacks) kept; the last one says how many were left out

# C0 and C1 controls (tab and newline kept where asked), DEL, surrogates, and the Unicode format characters that
# move or hide text: bidi embeddings/overrides/isolates, zero-width joiners, the BOM, line/paragraph separators.
_REFUSED = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")
_REFUSED_WITH_LINES = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean(text, limit: int = TEXT_CHARS, lines: bool = True) -> str:
    """`text` (any value: str() of it) with control, escape, surrogate and bidi characters shown as escapes and
    cut to `limit` characters; lines=False also escapes newlines and tabs (one terminal line)."""
    text = text if isinstance(text, str) else str(text)
    if len(text) > 4 * limit:  # escaping can only lengthen: never scan megabytes to keep two thousand characters
        text = text[:4 * limit]
    text = (_REFUSED if lines else _REFUSED_WITH_LINES).sub(_escape, text)
    if len(text) > limit:
        cut = len(text) - limit
        text = text[:limit] + f"… [{cut}+ characters cut]"
    return text


def clean_optional(text, limit: int = TEXT_CHARS) -> str | None:
    """`clean(text)`, None kept as None."""
    return None if text is None else clean(text, limit)


def clean_list(items, limit: int = NAME_CHARS, count: int = LIST_ITEMS) -> list[str]:
    """Each entry cleaned (one line each), at most `count` of them; a last entry says how many more there were."""
    items = list(items or ())
    out = [clean(x, limit, lines=False) for x in items[:count]]
    if len(items) > count:
        out.append(f"… and {len(items) - count} more")
    return out


def terminal(text, limit: int = TEXT_CHARS) -> str:
    """One line safe to print: cleaned, newlines and tabs escaped too, runs of spaces collapsed."""
    return " ".join(clean(text, limit, lines=False).split())


# Columns of a results row that carry text the candidate's process produced or could steer; every other string
# column is the evaluator's own (ids, names, digests), cleaned all the same by `row` (a row must always encode).
def row(values: dict) -> dict:
    """A results row with every string cleaned (one line for names, the error text kept with its lines) and every
    list of strings cleaned entry by entry, so any row encodes as UTF-8 and prints inert."""
    out = {}
    for name, value in values.items():
        if isinstance(value, str):
            long = name in ("error", "autotune_config")  # a configuration per autotuned kernel: JSON kept whole
            out[name] = clean(value, TEXT_CHARS if long else NAME_CHARS * 2, lines=name == "error")
        elif isinstance(value, (list, tuple)) and all(isinstance(x, str) for x in value):
            out[name] = clean_list(value)
        else:
            out[name] = value
    return out
