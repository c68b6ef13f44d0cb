"""What an agent may know about an operator without importing torch: the submission contract (from the
registry and the reference's source, parsed) and the reference's source with its prose removed."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

from catalogue import registry


def reference_path(operator: str) -> Path:
    """The file of the operator's PyTorch reference (kernels_eval/operators/<op>.py)."""
    found = importlib.util.find_spec(f"kernels_eval.operators.{operator}")
    if found is None or found.origin is None:
        raise KeyError(f"operator {operator!r} has no reference module")
    return Path(found.origin)


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


def reference_source(operator: str) -> str:
    """The reference's code without docstrings and comments: they cite upstream projects by name, which a
    workspace must not carry (the leak check would refuse it); the code alone defines the semantics."""
    path = reference_path(operator)
    tree = _strip_docstrings(ast.parse(path.read_text(), filename=str(path)))
    return (f"# PyTorch reference of {operator}: the semantics a submission must match.\n"
            + ast.unparse(tree) + "\n")


def _signature(cls: ast.ClassDef, name: str) -> str | None:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            returns = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
            return f"def {name}({ast.unparse(node.args)}){returns}"
    return None


def model_signatures(operator: str) -> dict[str, str | None]:
    """`__init__` and `forward` signatures of the reference's `Model`, as source text."""
    tree = ast.parse(reference_path(operator).read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            return {"init": _signature(node, "__init__"), "forward": _signature(node, "forward")}
    return {"init": None, "forward": None}


def operator_contract(operator: str, dtypes: list[dict] = ()) -> dict:
    """The submission contract of `operator`: file and class, signatures, kwarg split, outputs, in-place
    outputs, tolerances, the dtypes its problems use and the smoke shapes `hotshape check` runs."""
    spec = registry.spec(operator)
    distinct = sorted({json.dumps(d, sort_keys=True) for d in dtypes})
    return {"operator": operator, "file": f"{operator}.py", "class": "Model",
            "signatures": model_signatures(operator),
            "init_kwargs": list(spec.init_keys), "input_kwargs": list(spec.input_keys),
            "outputs": list(spec.outputs), "inplace_outputs": dict(spec.inplace),
            "tolerance": dict(spec.tolerance), "order_free_outputs": list(spec.order_free_outputs),
            "data_dependent_size": spec.data_dependent_size, "dtypes": [json.loads(d) for d in distinct],
            "smoke_shapes": [{"init_kwargs": dict(s.init), "input_kwargs": dict(s.inputs)} for s in spec.smoke],
            "rules": ["Model(**init_kwargs).forward(**inputs) returns the reference's outputs, in its order",
                      "inputs are not modified unless an output is in-place by contract (inplace_outputs)",
                      "native: at least 95% of GPU time in the file's own @triton.jit kernels"]}
