"""Accelerator table: datasheet peaks per dtype path, HBM bandwidth and measured ceilings (hardware.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from catalogue.operators._common import PATHS

DEFAULT_PATH = Path(__file__).with_name("hardware.yaml")
_TERA = 1e12


@dataclass(frozen=True)
class Hardware:
    """One accelerator: peaks in TFLOP/s per path (None = no such path), HBM TB/s, measured ceilings."""

    name: str
    peak_tflops: dict[str, float | None]
    hbm_tbps: float
    memory_gb: float | None = None
    measured_copy_tbps: float | None = None
    measured_tflops: dict[str, float] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    notes: str = ""

    @property
    def has_measurements(self) -> bool:
        """True when a copy bandwidth and a bf16 GEMM ceiling were measured on this device."""
        return self.measured_copy_tbps is not None and "bf16_tensor" in self.measured_tflops

    def peak_flops(self, path: str) -> float:
        """Datasheet FLOP/s of `path`."""
        if path not in PATHS:
            raise ValueError(f"{self.name}: unknown path {path!r}; known: {PATHS}")
        value = self.peak_tflops.get(path)
        if value is None:
            raise ValueError(f"{self.name} has no {path} execution path in its hardware table")
        return value * _TERA

    def bandwidth(self) -> float:
        """Datasheet HBM bytes/s."""
        return self.hbm_tbps * _TERA

    def measured_flops(self, path: str) -> float | None:
        """Measured FLOP/s of `path`; an unmeasured path gets its datasheet peak times the measured bf16
        efficiency (fp16 runs on the same tensor cores as bf16), None without measurements."""
        if not self.has_measurements:
            return None
        if path in self.measured_tflops:
            return self.measured_tflops[path] * _TERA
        efficiency = self.measured_tflops["bf16_tensor"] / self.peak_tflops["bf16_tensor"]
        return self.peak_flops(path) * efficiency

    def measured_bandwidth(self) -> float | None:
        """Measured device-to-device copy bytes/s (read + write), None if not measured."""
        return None if self.measured_copy_tbps is None else self.measured_copy_tbps * _TERA


def _positive(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{where} must be a positive number, got {value!r}")
    return float(value)


def _parse(name: str, raw, where: str) -> Hardware:
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: entry {name!r} must be a mapping")
    for key in ("peak_tflops", "hbm_tbps"):
        if key not in raw:
            raise ValueError(f"{where}: {name} lacks {key!r}")
    peaks = raw["peak_tflops"]
    if not isinstance(peaks, dict) or set(peaks) != set(PATHS):
        raise ValueError(f"{where}: {name}.peak_tflops must name exactly the paths {PATHS}, got {sorted(peaks or {})}")
    clean = {p: (None if v is None else _positive(v, f"{where}: {name}.peak_tflops.{p}")) for p, v in peaks.items()}
    measured = raw.get("measured") or {}
    if clean["bf16_tensor"] is None and (measured or clean["fp16_tensor"] is None):
        # Measured ceilings scale the datasheet by the bf16 efficiency; a pre-bf16 chip (V100) has fp16.
        raise ValueError(f"{where}: {name} needs a bf16_tensor peak (or, without measured ceilings, an fp16_tensor one)")
    m_peaks = measured.get("peak_tflops") or {}
    unknown = set(m_peaks) - set(PATHS)
    if unknown:
        raise ValueError(f"{where}: {name}.measured.peak_tflops has unknown paths {sorted(unknown)}")
    copy = measured.get("copy_tbps")
    return Hardware(
        name=name, peak_tflops=clean, hbm_tbps=_positive(raw["hbm_tbps"], f"{where}: {name}.hbm_tbps"),
        memory_gb=raw.get("memory_gb"),
        measured_copy_tbps=None if copy is None else _positive(copy, f"{where}: {name}.measured.copy_tbps"),
        measured_tflops={p: _positive(v, f"{where}: {name}.measured.peak_tflops.{p}") for p, v in m_peaks.items()},
        sources=tuple(raw.get("sources") or ()), notes=str(raw.get("notes") or ""))


def load_hardware(path: str | Path | None = None) -> dict[str, Hardware]:
    """The hardware table {accelerator name: Hardware} from `path` (default: the packaged hardware.yaml)."""
    path = Path(path) if path is not None else DEFAULT_PATH
    try:
        # libyaml's parser where pyyaml has it: a tenth of the pure-Python one's time, the same document
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except FileNotFoundError:
        raise FileNotFoundError(f"hardware table {path} does not exist") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"hardware table {path} is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"hardware table {path} must be a non-empty mapping of accelerator name to entry")
    table = {str(name): _parse(str(name), entry, str(path)) for name, entry in raw.items()}
    for hw in table.values():
        if not hw.sources:
            raise ValueError(f"{path}: {hw.name} cites no sources")
    return table
