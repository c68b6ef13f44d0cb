"""Shared vocabulary of the torch-free work models: element sizes, dtype paths, smoke shapes."""

from __future__ import annotations

from dataclasses import dataclass, field

# Bytes per element at the operator's interface, keyed by the catalogue's dtype spellings.
ELEMENT_BYTES: dict[str, int] = {
    "fp64": 8, "fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
    "int64": 8, "int32": 4, "int8": 1, "bool": 1,
}

# Execution paths that bound the compute side of a roofline; hardware.yaml gives a peak for each.
PATHS = ("bf16_tensor", "fp16_tensor", "fp8_tensor", "tf32_tensor", "fp32_vector")

# Path of an MMA whose operands have this dtype.
TENSOR_PATH = {"bf16": "bf16_tensor", "fp16": "fp16_tensor", "fp8": "fp8_tensor",
               "fp8_e4m3": "fp8_tensor", "fp32": "tf32_tensor"}


def elt(dtype: str) -> int:
    """Bytes per element of a catalogue dtype name."""
    try:
        return ELEMENT_BYTES[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; known: {sorted(ELEMENT_BYTES)}") from None


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative integers."""
    return -(-a // b)


def expected_distinct(slots: int, population: int, draws_per_slot: int = 1) -> float:
    """Expected number of distinct items hit when `slots` independent draws each pick
    `draws_per_slot` distinct items uniformly from `population` (e.g. experts activated by
    T tokens routed top-k)."""
    if population <= 0 or slots <= 0:
        return 0.0
    miss = (1.0 - draws_per_slot / population) ** slots
    return population * (1.0 - miss)


@dataclass(frozen=True)
class Smoke:
    """A small problem (init kwargs, input kwargs) that runs on a CPU in well under a second."""

    init: dict = field(default_factory=dict)
    inputs: dict = field(default_factory=dict)
