"""The evaluator's autotuning protocol: which configuration of a candidate's `triton.autotune` a problem is timed
with, chosen the same way every run (docs/reproducibility.md).

Triton's own autotuner picks the fastest configuration by `do_bench` in the candidate's process, and the
evaluator shortens that to 5 + 20 ms (autotune_cache.py), so the pick is partly noise: seen on H200, the same
block_scaled_mm file scored 37.5 µs on one run and 12.6 µs on another. Here instead:

- every configuration the candidate's autotuner would consider for the problem's key (its own pruning
  applied) is timed by the evaluator's timing (CUPTI records between the evaluator's markers, judged in the
  parent), in up to `Budget.rounds` interleaved rounds of a fixed per-configuration budget; after the first round
  only those within `Budget.drop_above` of its fastest go on (`survivors`);
- a configuration's figure is the median over rounds of its round medians of the autotuned kernel's own device
  time per call (the records named after the kernel; the whole call's span where none is named so);
- the choice rule (`choose`): the first configuration in the autotuner's order whose figure is within
  `Budget.noise_band` of the fastest. Two runs whose fastest configurations differ only by noise still pick
  the same one when it is first in order, and where they do not, the times they score differ by at most the
  band;
- the choice is kept in a `ChoiceStore` the sandbox never shows, per (Triton version, file sha256, hardware) and
  problem, and per (kernel, tuning key): as Triton's own autotuner decides once per key, a later problem reaching
  a decided key pins its choice; a re-run pins the kept configurations and decides nothing;
- the row records it (`row_text`: results column `autotune_config`).

Pure standard library: the logic here (budget, rule, record, store) is tested on a CPU; the GPU part that times
each configuration is autotune_sweep.py, driven by autotune_judge.py over the worker's `sweep` command
(autotune_pins.py pins a configuration in the worker).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import statistics
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

PROTOCOL_VERSION = 2  # 2: one choice per (kernel, tuning key) shared by the problems that reach it; drop_above


class ProtocolError(ValueError):
    """The protocol cannot choose, or a kept choice cannot be read; the message names the file or kernel."""


@dataclass(frozen=True)
class Budget:
    """What each configuration is timed with: `rounds` rounds, each a replayed timing (replay.time_program) sized
    to `budget_s` seconds, at least `min_calls` and at most `max_calls` calls; `noise_band` is the choice rule's
    tie band (relative); after the first round a configuration slower than that round's fastest by more than
    `drop_above` (relative) is timed no more and not eligible (`survivors`), and a kernel with one survivor is
    decided after one round."""

    rounds: int = 3
    budget_s: float = 0.02
    min_calls: int = 10
    max_calls: int = 50
    warmup_s: float = 0.01
    noise_band: float = 0.02
    drop_above: float = 0.25

    def __post_init__(self) -> None:
        if self.rounds < 1 or self.min_calls < 1 or self.max_calls < self.min_calls:
            raise ProtocolError(f"autotuning budget: rounds and calls must be positive and min_calls <= max_calls "
                                f"({self})")
        if not (0 <= self.noise_band < 1) or self.budget_s <= 0 or self.warmup_s < 0 \
                or self.drop_above < self.noise_band:
            raise ProtocolError(f"autotuning budget: noise_band in [0, 1), budget_s > 0, warmup_s >= 0, "
                                f"drop_above >= noise_band ({self})")


DEFAULT_BUDGET = Budget()


@dataclass
class KernelChoice:
    """One autotuned kernel at one key: the configurations timed (indices into the autotuner's configs, in its
    order, with Triton's text of each), each one's round medians (seconds), the figure the rule compared (median
    over rounds) and the index chosen."""

    kernel: str
    key: str
    indices: list[int]
    configs: list[str]
    rounds_s: dict[int, list[float]] = field(default_factory=dict)
    figure_s: dict[int, float] = field(default_factory=dict)
    chosen: int | None = None
    measure: str = "kernel"  # "kernel": the kernel's own records; "span": the whole call's span
    dropped: list[int] = field(default_factory=list)  # left the sweep after the first round (`survivors`)
    decided_by: str | None = None  # the problem whose sweep decided this (kernel, key); None: this problem's

    @property
    def chosen_config(self) -> str | None:
        """Triton's text of the chosen configuration."""
        return None if self.chosen is None else self.configs[self.indices.index(self.chosen)]


@dataclass
class Record:
    """The protocol's decision for one problem: what was decided, with what budget, on what (the key of the
    store), and how long the sweep took."""

    file_sha256: str
    problem_id: str
    hardware: str
    triton: str
    kernels: list[KernelChoice]
    budget: Budget = DEFAULT_BUDGET
    sweep_s: float = 0.0
    protocol: int = PROTOCOL_VERSION
    # not kept: the sweep's recording of the call with every choice pinned (judge.Recorded), when it made one
    program: object = field(default=None, compare=False, repr=False)

    def pins(self) -> dict[str, dict[str, int]]:
        """kernel -> key -> chosen config index: what the worker pins (autotune_pins.py)."""
        out: dict[str, dict[str, int]] = {}
        for k in self.kernels:
            if k.chosen is not None:
                out.setdefault(k.kernel, {})[k.key] = k.chosen
        return out

    def as_json(self) -> str:
        data = asdict(self)
        data.pop("program")
        for k in data["kernels"]:  # JSON object keys are text: config indices written as such
            k["rounds_s"] = {str(i): v for i, v in k["rounds_s"].items()}
            k["figure_s"] = {str(i): v for i, v in k["figure_s"].items()}
        return json.dumps(data, sort_keys=True, indent=1)


def figure(rounds_s: list[float]) -> float:
    """The figure a configuration is compared by: the median of its round medians."""
    return statistics.median(rounds_s)


def choose(indices: list[int], rounds_s: dict[int, list[float]], noise_band: float) -> tuple[int, dict[int, float]]:
    """(chosen index, figure of every measured index): the first index in `indices` order whose figure is within
    `noise_band` of the smallest figure. Indices without a positive measurement in every round (a configuration
    that failed to run, or whose records went missing) are not eligible; none measured is a ProtocolError."""
    figures = {}
    for i in indices:
        times = rounds_s.get(i) or []
        if times and all(t > 0 for t in times):
            figures[i] = figure(times)
    if not figures:
        raise ProtocolError("no configuration was measured")
    fastest = min(figures.values())
    chosen = next(i for i in indices if i in figures and figures[i] <= fastest * (1 + noise_band))
    return chosen, figures


def survivors(indices: list[int], first_round: dict[int, float], drop_above: float) -> list[int]:
    """The indices (in `indices` order) timed after the first round: those measured in it (a positive time) and
    within `drop_above` (relative) of its fastest. A configuration dropped here cannot be chosen: the full rule
    would need it to come within the noise band of the fastest, i.e. to gain more than `drop_above` - noise band
    in two rounds."""
    measured = {i: t for i, t in first_round.items() if i in indices and t > 0}
    if not measured:
        return []
    fastest = min(measured.values())
    return [i for i in indices if i in measured and measured[i] <= fastest * (1 + drop_above)]


def decide(kernel: KernelChoice, noise_band: float, eligible: list[int] | None = None) -> KernelChoice:
    """`kernel` with its figures and choice filled from its rounds (in place), among `eligible` (default: every
    index, in the autotuner's order); see `choose`."""
    try:
        kernel.chosen, kernel.figure_s = choose(kernel.indices if eligible is None else eligible, kernel.rounds_s,
                                                noise_band)
    except ProtocolError as exc:
        raise ProtocolError(f"kernel {kernel.kernel} at key {kernel.key}: {exc}") from None
    return kernel


def row_text(record: Record | None) -> str | None:
    """The `autotune_config` cell of a results row: canonical JSON of [kernel, key, chosen index, its text] per
    autotuned kernel (sorted), or None without a record."""
    if record is None:
        return None
    chosen = sorted([k.kernel, k.key, k.chosen, k.chosen_config] for k in record.kernels if k.chosen is not None)
    return json.dumps(chosen, separators=(",", ":"))


def parse_record(text: str, where: str = "autotuning record") -> Record:
    """A Record from its JSON (Record.as_json); a ProtocolError naming `where` and the field when malformed."""
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("protocol") != PROTOCOL_VERSION:
            raise ProtocolError(f"{where}: not an autotuning record of protocol {PROTOCOL_VERSION}")
        kernels = []
        for k in data["kernels"]:
            indices = [int(i) for i in k["indices"]]
            configs = [str(c) for c in k["configs"]]
            if len(indices) != len(configs) or len(set(indices)) != len(indices):
                raise ProtocolError(f"{where}: kernel {k.get('kernel')!r}: indices and configs do not pair up")
            chosen = None if k["chosen"] is None else int(k["chosen"])
            if chosen is not None and chosen not in indices:
                raise ProtocolError(f"{where}: kernel {k['kernel']!r}: chosen index {chosen} was not timed")
            kernels.append(KernelChoice(
                kernel=str(k["kernel"]), key=str(k["key"]), indices=indices, configs=configs,
                rounds_s={int(i): [float(t) for t in v] for i, v in k["rounds_s"].items()},
                figure_s={int(i): float(v) for i, v in k["figure_s"].items()}, chosen=chosen,
                measure=str(k.get("measure", "kernel")), dropped=[int(i) for i in k.get("dropped", [])],
                decided_by=None if k.get("decided_by") is None else str(k["decided_by"])))
        return Record(file_sha256=str(data["file_sha256"]), problem_id=str(data["problem_id"]),
                      hardware=str(data["hardware"]), triton=str(data["triton"]), kernels=kernels,
                      budget=Budget(**data["budget"]), sweep_s=float(data["sweep_s"]))
    except ProtocolError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ProtocolError(f"{where}: malformed autotuning record ({type(exc).__name__}: {exc})") from None


_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def _part(value: str, what: str) -> str:
    if not _SAFE.match(value) or value in (".", ".."):
        raise ProtocolError(f"autotuning store: {what} {value!r} is not a safe path component")
    return value


class ChoiceStore:
    """Kept choices, one JSON file per (Triton version, file sha256, hardware, problem) under `root`, written
    atomically by the evaluator's parent (never under a worker's view: docs/threat-model.md)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(os.path.abspath(root))

    def path(self, triton: str, file_sha256: str, hardware: str, problem_id: str) -> Path:
        if not re.fullmatch(r"[0-9a-f]{64}", file_sha256 or ""):
            raise ProtocolError(f"autotuning store: file sha256 {file_sha256!r} is not 64 hex digits")
        return (self.root / f"triton-{_part(triton, 'Triton version')}" / file_sha256 / _part(hardware, "hardware")
                / f"{_part(problem_id, 'problem id')}.json")

    def load(self, triton: str, file_sha256: str, hardware: str, problem_id: str) -> Record | None:
        """The kept record, None when there is none; a ProtocolError naming the file when it does not read, or
        when it was kept for another file, hardware or problem than its path says."""
        path = self.path(triton, file_sha256, hardware, problem_id)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise ProtocolError(f"{path}: unreadable autotuning record ({exc})") from None
        if _older(text):
            return None  # kept by an earlier protocol: decided again, and replaced
        record = parse_record(text, str(path))
        if (record.triton, record.file_sha256, record.hardware, record.problem_id) != (
                triton, file_sha256, hardware, problem_id):
            raise ProtocolError(f"{path}: the record inside is for another file, hardware or problem")
        return record

    def save(self, record: Record) -> Path:
        """Write `record` (temporary file, then rename over the old one); its path."""
        path = self.path(record.triton, record.file_sha256, record.hardware, record.problem_id)
        _write(path, record.as_json())
        return path

    def key_path(self, triton: str, file_sha256: str, hardware: str, kernel: str, key: str) -> Path:
        """Where the choice for one (kernel, tuning key) of a file is kept: beside the file's problem records,
        named by the kernel and a digest of the key (a key is Triton's repr() of its values)."""
        digest = hashlib.sha256(f"{kernel}\0{key}".encode()).hexdigest()[:16]
        name = re.sub(r"[^A-Za-z0-9_]", "_", kernel)[:64] or "kernel"
        return self.path(triton, file_sha256, hardware, "x").parent / "keys" / f"{name}-{digest}.json"

    def load_choice(self, triton: str, file_sha256: str, hardware: str, kernel: str, key: str) -> KernelChoice | None:
        """The kept choice for (kernel, key), with `decided_by` naming the problem whose sweep made it; None when
        there is none (or an earlier protocol kept it); a ProtocolError naming the file when it does not read or
        was kept for another file, hardware, kernel or key."""
        path = self.key_path(triton, file_sha256, hardware, kernel, key)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise ProtocolError(f"{path}: unreadable autotuning choice ({exc})") from None
        if _older(text):
            return None
        record = parse_record(text, str(path))
        if (record.triton, record.file_sha256, record.hardware) != (triton, file_sha256, hardware) \
                or len(record.kernels) != 1 or (record.kernels[0].kernel, record.kernels[0].key) != (kernel, key) \
                or record.kernels[0].chosen is None:
            raise ProtocolError(f"{path}: the choice inside is for another file, hardware, kernel or key")
        choice = record.kernels[0]
        choice.decided_by = record.problem_id
        return choice

    def save_choice(self, record: Record, choice: KernelChoice) -> Path:
        """Keep `choice`, decided by `record`'s problem, for every problem of the file that reaches its key."""
        path = self.key_path(record.triton, record.file_sha256, record.hardware, choice.kernel, choice.key)
        _write(path, Record(file_sha256=record.file_sha256, problem_id=record.problem_id, hardware=record.hardware,
                            triton=record.triton, kernels=[choice], budget=record.budget).as_json())
        return path


def _older(text: str) -> bool:
    """Whether a kept file was written by an earlier protocol version (a valid JSON object with a smaller one)."""
    try:
        version = json.loads(text).get("protocol")
    except (ValueError, AttributeError):
        return False
    return isinstance(version, int) and version < PROTOCOL_VERSION


def _write(path: Path, text: str) -> None:
    """`text` to `path` atomically (a temporary file in its directory, then renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def default_root() -> Path:
    """$XDG_CACHE_HOME/hotshape/autotune, else ~/.cache/hotshape/autotune (beside the compile caches)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hotshape" / "autotune"


def covers(record: Record, tuned: list[dict]) -> bool:
    """Whether a kept record decides every (kernel, key) a call tuned (the worker's `tuned` list): a record that
    misses one (the file's autotuner met a key it had not) is decided again."""
    kept = {(k.kernel, k.key) for k in record.kernels if k.chosen is not None}
    return all((t["kernel"], t["key"]) in kept for t in tuned if len(t["indices"]) > 1)
