"""release.json as a typed record: checked on every write and every read outside the evaluator.

The evaluator reads release.json with the standard library only (release/integrity.py, on GPU machines
without msgspec); everything else goes through `parse_info`, so a malformed release.json stops with one
line naming the file and the field. Unknown fields are refused: a field is added here first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec


class _Record(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    pass


class Source(_Record):
    """What the release was built from: traces (with their counts) or a published catalogue (its hash)."""

    kind: str
    profiles: int | None = None
    quarantined: int | None = None
    deployments: int | None = None
    content_sha256: str | None = None


class Counts(_Record):
    """Problems and operators in the manifest."""

    problems: int
    operators: int


class Roofline(_Record):
    """Whether the sealed roofline holds our FLOPs, bytes and times (not only the published ones)."""

    ours: bool


class Intervals(_Record):
    """Where a weights version's bootstrap intervals are and how they were drawn."""

    problems: str
    operators: str
    method: str
    n_boot: int
    seed: int
    level: float


class WeightsVersion(_Record):
    """One weights version: its file and what a build or refresh recorded about it."""

    version: int
    file: str
    created: str | None  # a date; None for an import of a catalogue that gives none
    parent: int | None = None
    basis: str | None = None
    coverage: float | None = None
    coverage_report: dict[str, float] | None = None
    phase_split: dict[str, float] | None = None
    hot_weight_covered: float | None = None
    dropped: int | None = None
    candidates: int | None = None
    drift: str | None = None
    left_out: int | None = None
    inputs: str | None = None
    intervals: Intervals | None = None


class ReleaseInfo(_Record):
    """The whole of release.json."""

    format: str
    digest: str
    files: dict[str, str]
    name: str
    version: str
    parent: str | None
    created: str | None
    source: Source
    key_source: str
    counts: Counts
    weights: list[WeightsVersion]
    roofline: Roofline
    coverage: dict[str, float] | None = None
    phase_split: dict[str, float] | None = None
    phase_split_basis: str | None = None
    policy: dict[str, Any] | None = None

    def weights_version(self, version: int) -> WeightsVersion | None:
        """The entry of weights `version`, None when the release has no such version."""
        return next((w for w in self.weights if w.version == version), None)


class InfoError(ValueError):
    """release.json does not have the fields or types of a ReleaseInfo; the message names file and field."""


def parse_info(info: dict, where: str | Path) -> ReleaseInfo:
    """`info` (release.json's parsed content) as a ReleaseInfo; an InfoError naming `where` and the field."""
    try:
        return msgspec.convert(info, ReleaseInfo)
    except msgspec.ValidationError as exc:
        # msgspec names the field as a path: "Expected `int`, got `str` - at `$.weights[0].version`"
        raise InfoError(f"{where}: {exc}") from None
