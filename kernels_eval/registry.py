"""The torch reference of each operator (`load_reference`), beside the torch-free registry of
catalogue.registry, re-exported here for the evaluator's modules that read both through this name."""

from __future__ import annotations

import importlib
from types import ModuleType

from catalogue.registry import (OperatorSpec, is_benchmarkable, merged_kwargs, operator_names,  # noqa: F401
                                spec, split_kwargs, work, work_path)
from catalogue.operators import OPERATORS


def load_reference(name: str) -> ModuleType:
    """The torch reference module of `name` (defines Model and make_inputs); imports torch."""
    if name not in OPERATORS:
        raise KeyError(f"unknown operator {name!r}; known: {', '.join(OPERATORS)}")
    return importlib.import_module(f"kernels_eval.operators.{name}")
