"""The fleet registry: fleet.yaml's deployments, validated, with each trace file assigned to one."""

from __future__ import annotations

import datetime
import difflib
import math
import re
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Iterable

import msgspec
import yaml

from catalogue.vocabulary import PHASES
from ingest.discovery import is_profile
from ingest.tracefile import within_folder


MAX_FLEET_BYTES = 16 * 2**20  # a fleet of thousands of deployments is a few hundred kB


class FleetError(ValueError):
    """fleet.yaml is invalid; the message names the file, the deployment and the field."""


class FleetWarning(UserWarning):
    """fleet.yaml is usable but something looks wrong (e.g. a trace no deployment claims)."""


def _doc(text: str) -> msgspec.Meta:
    return msgspec.Meta(description=text)


class WindowSpec(msgspec.Struct, forbid_unknown_fields=True):
    """The period the fleet's card-hours cover (informational; its end dates a release by default)."""

    start: Annotated[datetime.date | None, _doc("first day of the window")] = None
    end: Annotated[datetime.date | None, _doc("last day of the window; the default release date")] = None


class DeploymentSpec(msgspec.Struct, forbid_unknown_fields=True):
    """One deployment as fleet.yaml writes it: give `card_hours`, or `cards` and `hours`."""

    id: Annotated[str, _doc("unique name; sealed (never in a release's public files)")]
    model: Annotated[str, _doc("model served; sealed")]
    framework: Annotated[str, _doc("serving framework; sealed")]
    accelerator: Annotated[str, _doc("accelerator name, a key of catalogue/hardware.yaml")]
    traces: Annotated[list[str] | str, _doc("glob(s) of this deployment's trace files, relative to the trace root")]
    card_hours: Annotated[float | None, _doc("accelerator-hours the deployment ran in the window (card-hours)")] = None
    cards: Annotated[float | None, _doc("number of accelerators; with `hours` instead of `card_hours`")] = None
    hours: Annotated[float | None, _doc("hours the cards ran (h); with `cards`")] = None
    phase_mix: Annotated[
        dict[str, float] | None,
        _doc("GPU-time fraction per phase (prefill, decode, mixed) from serving metrics; sums to 1"),
    ] = None


class FleetSpec(msgspec.Struct, forbid_unknown_fields=True):
    """fleet.yaml: the deployments whose traces a release is mined from."""

    deployments: Annotated[list[DeploymentSpec], _doc("every deployment of the fleet (at least one)")]
    window: Annotated[WindowSpec | None, _doc("the period the card-hours cover")] = None


_SPECS = {"": FleetSpec, "window": WindowSpec, "deployments[]": DeploymentSpec}


def fleet_json_schema() -> dict:
    """The JSON Schema of fleet.yaml (docs/fleet.schema.json is this, committed)."""
    return msgspec.json.schema(FleetSpec)


def _explain(exc: msgspec.ValidationError) -> str:
    """msgspec's error as `path: what`, with a suggestion for a misspelt field."""
    text = str(exc)
    found = re.fullmatch(r"(.*) - at `\$(.*)`", text, flags=re.S)
    what, path = (found.group(1), found.group(2).lstrip(".")) if found else (text, "")
    unknown = re.fullmatch(r"Object contains unknown field `(.*)`", what)
    if unknown:
        spec = _SPECS.get(re.sub(r"\[\d+\]", "[]", path))
        known = spec.__struct_fields__ if spec is not None else ()
        close = difflib.get_close_matches(unknown.group(1), known, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else (f" (known: {', '.join(known)})" if known else "")
        return f"{path + '.' if path else ''}{unknown.group(1)}: unknown field{hint}"
    missing = re.fullmatch(r"Object missing required field `(.*)`", what)
    if missing:
        return f"{path + ': ' if path else ''}missing field '{missing.group(1)}'"
    what = what[:1].lower() + what[1:]
    return f"{path}: {what}" if path else what


@dataclass(frozen=True)
class Deployment:
    """One deployment: what it serves on, how much of the fleet it is, and its profiles."""

    id: str
    model: str
    framework: str
    accelerator: str
    card_hours: float
    phase_mix: dict[str, float] | None
    traces: tuple[str, ...]  # glob patterns relative to the trace root
    paths: tuple[str, ...] = ()  # matched trace files, relative posix paths, sorted


@dataclass(frozen=True)
class Fleet:
    """All deployments of one fleet.yaml and the trace → deployment assignment."""

    source: str
    trace_root: str
    deployments: tuple[Deployment, ...]
    window: dict | None = None
    unclaimed: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def deployment(self, deployment_id: str) -> Deployment:
        """The deployment with this id."""
        for d in self.deployments:
            if d.id == deployment_id:
                return d
        raise KeyError(deployment_id)

    def assignment(self) -> dict[str, str]:
        """Trace path (relative to the trace root) → deployment id."""
        return {p: d.id for d in self.deployments for p in d.paths}


def _hardware_names() -> set[str]:
    from catalogue.hardware import load_hardware  # torch-free by contract

    return set(load_hardware())


class _Root:
    """A trace root, local or fsspec URL, that can list and glob files as relative posix paths, none outside it."""

    def __init__(self, root: str | Path, source: str):
        self.text = str(root)
        if "://" in self.text:
            import fsspec

            self.fs, self.base = fsspec.core.url_to_fs(self.text)
            if not self.fs.isdir(self.base):
                raise FleetError(f"{self.text}: the trace root is not a folder (named by --traces for {source})")
        else:
            self.fs, self.base = None, Path(root)
            if not self.base.is_dir():
                missing = "does not exist" if not self.base.exists() else "is not a folder"
                raise FleetError(f"{self.text}: the trace root {missing} (named by --traces for {source})")
            self.real = self.base.resolve()
            self.resolved = _Resolved()  # for every glob of this root: the folders of its files, resolved once

    def glob(self, pattern: str, where: str) -> list[str]:
        """The files `pattern` matches under the root; a FleetError naming `where` (the entry) when the pattern
        or a file it matches lies outside the root (a `..`, an absolute path, a link out of the root)."""
        if not within_folder(pattern):
            raise FleetError(f"{where} glob {pattern!r} leaves the trace root {self.text} "
                             "(globs are relative to it: no '..', no absolute path or URL)")
        if self.fs is None:
            if re.search(r"[*?[]", pattern):
                hits = [p for p in self.base.glob(pattern) if p.is_file()]
            else:  # a file named outright (a fleet of 1,303 names them so): what the glob would find, unwalked
                hits = [p for p in (self.base / pattern,) if p.is_file()]
            for p in hits:
                if not self.resolved(p).is_relative_to(self.real):
                    raise FleetError(f"{where} glob {pattern!r} matches {p.relative_to(self.base).as_posix()}, "
                                     f"a link to {p.resolve()} outside the trace root {self.text}")
            return sorted(p.relative_to(self.base).as_posix() for p in hits)
        base = self.base.rstrip("/")
        hits = [h for h in self.fs.glob(f"{base}/{pattern}") if self.fs.isfile(h)]
        for h in hits:
            if not h.startswith(f"{base}/") or not within_folder(h[len(base) + 1:]):
                raise FleetError(f"{where} glob {pattern!r} matches {h}, outside the trace root {self.text}")
        return sorted(h[len(base) + 1 :] for h in hits)

    def all_traces(self) -> list[str]:
        try:
            return [p for p in self.glob("**/*", "the trace root's") if is_profile(p)]
        except FleetError:  # a link out of the root that no deployment claims is left alone, never read
            return [p for p in self._inside("**/*") if is_profile(p)]

    def _inside(self, pattern: str) -> list[str]:
        if self.fs is not None:
            return []
        return sorted(p.relative_to(self.base).as_posix() for p in self.base.glob(pattern)
                      if p.is_file() and self.resolved(p).is_relative_to(self.real))


class _Resolved:
    """`Path.resolve()` of many files of few folders: a file that is no link resolves to its folder's resolved path
    and its name, so each folder is resolved once (a fleet's 1,303 files: 22 folders) and each file costs one lstat."""

    def __init__(self):
        self.folders: dict[Path, Path] = {}

    def __call__(self, path: Path) -> Path:
        if path.is_symlink() or path.name in ("", ".", ".."):
            return path.resolve()
        folder = self.folders.get(path.parent)
        if folder is None:
            folder = self.folders[path.parent] = path.parent.resolve()
        return folder / path.name


def _positive(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FleetError(f"{where} must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise FleetError(f"{where} must be a positive number, got {value!r}")
    return float(value)


def _card_hours(raw: dict, where: str) -> float:
    raw = {k: raw.get(k) for k in ("card_hours", "cards", "hours") if raw.get(k) is not None}
    has_total = "card_hours" in raw
    has_parts = "cards" in raw or "hours" in raw
    if not has_total and not has_parts:
        raise FleetError(f"{where}: missing field 'card_hours' (or 'cards' and 'hours')")
    if has_parts and not ("cards" in raw and "hours" in raw):
        missing = "hours" if "cards" in raw else "cards"
        raise FleetError(f"{where}: field 'cards' needs 'hours' too (missing '{missing}')")
    total = _positive(raw["card_hours"], f"{where}.card_hours") if has_total else None
    if has_parts:
        product = _positive(raw["cards"], f"{where}.cards") * _positive(raw["hours"], f"{where}.hours")
        if total is not None and not math.isclose(total, product, rel_tol=1e-9):
            raise FleetError(f"{where}: card_hours {total} disagrees with cards × hours = {product}")
        total = product
    return total


def _phase_mix(raw, where: str) -> dict[str, float] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or not raw:
        raise FleetError(f"{where}.phase_mix must be a non-empty mapping of phase → fraction")
    mix = {}
    for phase, value in raw.items():
        if phase not in PHASES:
            close = difflib.get_close_matches(str(phase), PHASES, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise FleetError(f"{where}.phase_mix: unknown phase {phase!r} (known: {', '.join(PHASES)}){hint}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise FleetError(f"{where}.phase_mix.{phase} must be a fraction in [0, 1], got {value!r}")
        mix[phase] = float(value)
    if not math.isclose(math.fsum(mix.values()), 1.0, abs_tol=1e-9):
        raise FleetError(f"{where}.phase_mix must sum to 1, sums to {math.fsum(mix.values())}")
    return mix


def _text(raw: dict, key: str, where: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value.strip():
        raise FleetError(f"{where}: missing or empty field '{key}'")
    return value


def _deployment(raw, index: int, source: str, accelerators: set[str]) -> Deployment:
    if not isinstance(raw, dict):
        raise FleetError(f"{source}: deployments[{index}] must be a mapping")
    where = f"{source}: deployment {raw.get('id', f'#{index}')!r}"
    dep_id = _text(raw, "id", f"{source}: deployments[{index}]")
    accelerator = _text(raw, "accelerator", where)
    if accelerator not in accelerators:
        known = ", ".join(sorted(accelerators))
        raise FleetError(f"{where}: unknown accelerator {accelerator!r} in field 'accelerator' (known: {known})")
    traces = raw.get("traces")
    if isinstance(traces, str):
        traces = [traces]
    if not traces or not all(isinstance(t, str) and t for t in traces):
        raise FleetError(f"{where}: field 'traces' must be a non-empty list of globs")
    return Deployment(
        id=dep_id,
        model=_text(raw, "model", where),
        framework=_text(raw, "framework", where),
        accelerator=accelerator,
        card_hours=_card_hours(raw, where),
        phase_mix=_phase_mix(raw.get("phase_mix"), where),
        traces=tuple(traces),
    )


_read_once: dict | None = None  # while read_once() is open: load_fleet's arguments -> the fleet it loaded first


@contextmanager
def read_once():
    """While open, load_fleet called again with the same arguments returns the fleet its first call loaded (or
    raises its error again), not a new reading of the file and the trace root: for one command that needs its fleet
    in several places (run-pipeline's assets and checks ask 6 times; `hotshape build` reads it once), so that all of
    them see the fleet as the command found it. Nested, the outermost decides."""
    global _read_once
    outer = _read_once
    if outer is None:
        _read_once = {}
    try:
        yield
    finally:
        _read_once = outer


def load_fleet(
    path: str | Path,
    trace_root: str | Path,
    *,
    accelerators: Iterable[str] | None = None,
    known_traces: Iterable[str] | None = None,
) -> Fleet:
    """The validated fleet of `path`, with every deployment's globs resolved under `trace_root`.

    Errors (FleetError) name the file, deployment and field; a trace that no deployment claims
    is a FleetWarning. `known_traces` (relative paths, e.g. traces.parquet's `path`) replaces
    the scan of the trace root for that check; `accelerators` replaces the hardware table.
    Inside `read_once()`, a repeated call returns the first one's fleet.
    """
    memo = _read_once
    if memo is None:
        return _load_fleet(path, trace_root, accelerators, known_traces)
    key = (str(path), str(trace_root), None if accelerators is None else frozenset(accelerators),
           None if known_traces is None else tuple(known_traces))
    if key not in memo:
        try:
            memo[key] = _load_fleet(path, trace_root, None if accelerators is None else key[2],
                                    None if known_traces is None else key[3])
        except FleetError as exc:
            memo[key] = exc
    if isinstance(memo[key], FleetError):
        raise memo[key]
    return memo[key]


def _load_fleet(path: str | Path, trace_root: str | Path, accelerators: Iterable[str] | None,
                known_traces: Iterable[str] | None) -> Fleet:
    source = str(path)
    try:
        size = Path(path).stat().st_size
        if size > MAX_FLEET_BYTES:
            raise FleetError(f"{source}: {size} bytes, over the {MAX_FLEET_BYTES} a fleet file may hold")
        # libyaml's parser where pyyaml has it: a tenth of the pure-Python one's time, the same document
        doc = yaml.load(Path(path).read_bytes().decode("utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except FileNotFoundError:
        raise FleetError(f"{source}: no such fleet file") from None
    except IsADirectoryError:
        raise FleetError(f"{source}: a folder, not a fleet file") from None
    except UnicodeDecodeError as exc:
        raise FleetError(f"{source}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except yaml.YAMLError as exc:
        if "maximum nesting depth" in str(exc):  # libyaml's own bound, where the pure-Python parser recurses
            raise FleetError(f"{source}: nested too deeply to be a fleet file") from None
        raise FleetError(f"{source}: not valid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise FleetError(f"{source}: nested too deeply to be a fleet file") from None
    try:
        return _validated(doc, source, trace_root, accelerators, known_traces)
    except RecursionError:
        raise FleetError(f"{source}: nested too deeply to be a fleet file") from None


def _validated(doc, source: str, trace_root, accelerators, known_traces) -> Fleet:
    if not isinstance(doc, dict):
        raise FleetError(f"{source}: field 'deployments' must be a non-empty list (the file is not a mapping)")
    try:  # the structure first: an unknown (misspelt) field anywhere is an error, never ignored
        msgspec.convert(doc, FleetSpec)
    except msgspec.ValidationError as exc:
        raise FleetError(f"{source}: {_explain(exc)}") from None
    if not doc["deployments"]:
        raise FleetError(f"{source}: field 'deployments' must be a non-empty list")
    names = set(accelerators) if accelerators is not None else _hardware_names()
    unknown = [(raw.get("id", f"#{i}"), raw["accelerator"]) for i, raw in enumerate(doc["deployments"])
               if isinstance(raw, dict) and isinstance(raw.get("accelerator"), str) and raw["accelerator"] not in names]
    if len(unknown) > 1:  # every one at once, so a fleet file is fixed in one pass
        listed = "; ".join(f"deployment {d!r}: {a!r}" for d, a in unknown)
        raise FleetError(f"{source}: {len(unknown)} unknown accelerators in field 'accelerator': {listed} "
                         f"(known: {', '.join(sorted(names))})")
    deployments = [_deployment(raw, i, source, names) for i, raw in enumerate(doc["deployments"])]
    seen: set[str] = set()
    for d in deployments:
        if d.id in seen:
            raise FleetError(f"{source}: deployment id {d.id!r} appears twice (field 'id')")
        seen.add(d.id)

    for d in deployments:  # every glob stays inside the root, before anything under it is listed
        for pattern in d.traces:
            if not within_folder(pattern):
                raise FleetError(f"{source}: deployment {d.id!r}: field 'traces' glob {pattern!r} leaves the trace "
                                 f"root {trace_root} (globs are relative to it: no '..', no absolute path or URL)")
    root = _Root(trace_root, source)
    owner: dict[str, str] = {}
    resolved = []
    for d in deployments:
        paths: list[str] = []
        for pattern in d.traces:
            hits = root.glob(pattern, f"{source}: deployment {d.id!r}: field 'traces'")
            if not hits:
                raise FleetError(
                    f"{source}: deployment {d.id!r}: field 'traces' glob {pattern!r} matches nothing under {root.text}"
                )
            paths.extend(hits)
        for p in sorted(set(paths)):
            if p in owner and owner[p] != d.id:
                raise FleetError(
                    f"{source}: trace {p!r} is claimed by deployments {owner[p]!r} and {d.id!r} (field 'traces')"
                )
            owner[p] = d.id
        resolved.append(Deployment(**{**d.__dict__, "paths": tuple(sorted(set(paths)))}))

    candidates = list(known_traces) if known_traces is not None else root.all_traces()
    unclaimed = tuple(sorted(p for p in set(candidates) if p not in owner))
    notes = []
    if unclaimed:
        shown = ", ".join(unclaimed[:5]) + (" …" if len(unclaimed) > 5 else "")
        notes.append(f"{source}: {len(unclaimed)} trace(s) under {root.text} claimed by no deployment: {shown}")
        warnings.warn(notes[-1], FleetWarning, stacklevel=2)
    window = doc.get("window")
    return Fleet(source, root.text, tuple(resolved), window if isinstance(window, dict) else None, unclaimed, tuple(notes))
