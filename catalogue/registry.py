"""Operator registry: names, kwarg split and work model of every operator (torch-free; the torch references
are kernels_eval.registry.load_reference)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from catalogue.vocabulary import OPERATOR_TRAITS
from catalogue.operators import CATALOGUE_OPERATORS, MODELLED_OPERATORS, OPERATORS, load_work
from catalogue.operators._common import PATHS, Smoke


@dataclass(frozen=True)
class OperatorSpec:
    """What the registry knows about one operator without importing torch."""

    name: str
    init_keys: tuple[str, ...]
    input_keys: tuple[str, ...]
    outputs: tuple[str, ...]
    inplace: dict[str, str]
    tolerance: dict[str, float]
    smoke: tuple[Smoke, ...]
    in_catalogue: bool
    order_free_outputs: tuple[str, ...] = ()
    data_dependent_size: bool = False  # output lengths depend on input values (the host must read them)
    traits: frozenset[str] = frozenset()  # what the work model declares it is (catalogue.vocabulary.OPERATOR_TRAITS)


def operator_names() -> list[str]:
    """Every operator with a reference and a work model, sorted."""
    return sorted(OPERATORS)


def is_benchmarkable(name: str) -> bool:
    """True when `name` has a reference, inputs and a work model (so a problem can be scored)."""
    return name in OPERATORS


def spec(name: str) -> OperatorSpec:
    """The torch-free description of operator `name`."""
    w = load_work(name)
    return OperatorSpec(name=name, init_keys=tuple(w.INIT_KEYS), input_keys=tuple(w.INPUT_KEYS),
                        outputs=tuple(w.OUTPUTS), inplace=dict(w.INPLACE), tolerance=dict(w.TOLERANCE),
                        smoke=tuple(w.SMOKE), in_catalogue=name in CATALOGUE_OPERATORS,
                        order_free_outputs=tuple(getattr(w, "ORDER_FREE_OUTPUTS", ())),
                        data_dependent_size=bool(getattr(w, "DATA_DEPENDENT_SIZE", False)), traits=traits(name))


@lru_cache(maxsize=None)
def traits(name: str) -> frozenset[str]:
    """The traits operator `name`'s work model declares (TRAITS), checked against the vocabulary's."""
    w = load_work(name)
    declared = frozenset(getattr(w, "TRAITS", ()))
    unknown = sorted(declared - set(OPERATOR_TRAITS))
    if unknown:
        raise ValueError(f"catalogue/operators/{name}/__init__.py: TRAITS {unknown} not in {', '.join(OPERATOR_TRAITS)}")
    if "attention" in declared and not callable(getattr(w, "phase_of_shape", None)):
        raise ValueError(f"catalogue/operators/{name}/__init__.py: an attention operator defines phase_of_shape(shape)")
    return declared


@lru_cache(maxsize=None)
def operators_with(trait: str) -> frozenset[str]:
    """Every operator with a work model (benchmarkable or modelled) that declares `trait`."""
    if trait not in OPERATOR_TRAITS:
        raise KeyError(f"unknown trait {trait!r}; known: {', '.join(OPERATOR_TRAITS)}")
    return frozenset(name for name in OPERATORS + MODELLED_OPERATORS if trait in traits(name))


@lru_cache(maxsize=None)
def _phase_rules() -> dict:
    return {name: load_work(name).phase_of_shape for name in operators_with("attention")}


def phase_of_shape(operator: str, shape: dict) -> str | None:
    """The serving phase an attention call's shape implies (its work model's rule); None for any other operator
    or a shape that says nothing."""
    rule = _phase_rules().get(operator)  # called once per attention row of a trace: one dict lookup
    return None if rule is None else rule(shape)


def split_kwargs(operator: str, kwargs: dict) -> tuple[dict, dict]:
    """Split flat catalogue kwargs into (init_kwargs, input_kwargs) as shapes.json does; a key used by both
    goes to both. A `*dtype*` key the operator does not take is dropped (its reference fixes that dtype, as
    the catalogue's does); any other unknown key is an error."""
    w = load_work(operator)
    init, inputs = {}, {}
    for key, value in kwargs.items():
        known = False
        if key in w.INIT_KEYS:
            init[key], known = value, True
        if key in w.INPUT_KEYS:
            inputs[key], known = value, True
        if not known and "dtype" not in key:
            raise KeyError(f"{operator}: kwarg {key!r} is neither an init kwarg {w.INIT_KEYS} "
                           f"nor an input kwarg {w.INPUT_KEYS}")
    return init, inputs


def merged_kwargs(init_kwargs: dict | None, input_kwargs: dict | None) -> dict:
    """One kwargs dict for the work functions; init and input values of a shared key must agree."""
    merged = dict(init_kwargs or {})
    for key, value in (input_kwargs or {}).items():
        if key in merged and merged[key] != value:
            raise ValueError(f"kwarg {key!r} differs between init ({merged[key]!r}) and input ({value!r})")
        merged[key] = value
    return merged


def work_path(name: str, kwargs: dict) -> str:
    """The dtype path that bounds the operator's compute for these kwargs."""
    w = load_work(name)
    path = w.path(**kwargs) if hasattr(w, "path") else w.PATH
    if path not in PATHS:
        raise ValueError(f"{name}: path {path!r} is not one of {PATHS}")
    return path


def work(name: str, init_kwargs: dict | None, input_kwargs: dict | None) -> dict:
    """flops, bytes_read, bytes_written and path of one problem."""
    w = load_work(name)
    kw = merged_kwargs(init_kwargs, input_kwargs)
    if hasattr(w, "check"):
        w.check(**kw)
    try:
        return {"flops": int(w.flops(**kw)), "bytes_read": int(w.bytes_read(**kw)),
                "bytes_written": int(w.bytes_written(**kw)), "path": work_path(name, kw)}
    except TypeError as exc:  # a missing kwarg surfaces as a TypeError from the keyword-only signature
        raise ValueError(f"{name}: kwargs {sorted(kw)} do not fit the work model: {exc}") from exc

