"""An operator's PyTorch reference as one self-contained Python source: what a FlashInfer-Trace definition's
`reference` carries, so that a consumer runs it with torch alone (no hotshape installed).

The source is the operator's `Model` (kernels_eval/operators/<op>.py) and exactly the top-level definitions it
uses, followed through `from kernels_eval.operators.<m> import ...` into the helper modules, in dependency order,
as code only (ast.unparse: no docstrings or comments); third-party imports (torch, math) are kept, hotshape's are
dropped. Then `run(...)`
calls the model with the definition's init kwargs and returns its outputs in the definition's order.
"""

from __future__ import annotations

import ast
import copy
import json
from dataclasses import dataclass
from pathlib import Path

OPERATORS = Path(__file__).with_name("operators")
PACKAGE = "kernels_eval.operators"


class NotSelfContained(ValueError):
    """The reference cannot be written out on its own (a name defined twice, an import of another package)."""


@dataclass(frozen=True)
class _Module:
    name: str
    defs: dict[str, ast.stmt]  # top-level name -> its statement
    imported: dict[str, tuple[str, str]]  # local name -> (operator module, name there)
    imports: list[str]  # third-party import statements, as written


def _top_names(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def _read(name: str) -> _Module:
    text = (OPERATORS / f"{name}.py").read_text()
    tree = ast.parse(text)
    defs, imported, imports = {}, {}, []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PACKAGE + "."):
            for alias in node.names:
                imported[alias.asname or alias.name] = (node.module.rsplit(".", 1)[1], alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] in
                                                     ("kernels_eval", "catalogue", "ingest", "weighting", "release", "pipelines")):
                raise NotSelfContained(f"kernels_eval/operators/{name}.py imports {node.module!r}, which a "
                                       f"self-contained reference cannot carry")
            imports.append(ast.get_source_segment(text, node))
        else:
            for top in _top_names(node):
                defs[top] = node
    return _Module(name, defs, imported, imports)


def _used_names(node: ast.stmt) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _source(node: ast.stmt) -> str:
    """The statement as code without its docstrings or comments: prose about where an operator comes from
    (frameworks, models) stays in hotshape, and the release's leak check would refuse it in an export."""
    node = copy.deepcopy(node)
    for n in ast.walk(node):
        body = getattr(n, "body", None)
        if (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            n.body = body[1:] or [ast.Pass()]
    return ast.unparse(node)


def reference_source(op: str, init_kwargs: dict, inputs: list[str], outputs: list[str]) -> str:
    """Python source defining `run(<inputs>)`: the operator's model at `init_kwargs` on those inputs, returning
    its outputs in the order `outputs` names (one tensor when there is one)."""
    modules: dict[str, _Module] = {}
    needed: dict[str, list[ast.stmt]] = {}  # module -> statements, in file order once sorted
    defined: dict[str, str] = {}  # name -> module that defines it in the output

    def need(module_name: str, name: str) -> None:
        if module_name not in modules:
            modules[module_name] = _read(module_name)
        module = modules[module_name]
        if name in module.imported:
            src, orig = module.imported[name]
            if orig != name:
                raise NotSelfContained(f"kernels_eval/operators/{module_name}.py imports {orig} as {name}")
            need(src, orig)
            return
        node = module.defs.get(name)
        if node is None:
            return  # a builtin, a local variable or an attribute name
        if node in needed.setdefault(module_name, []):
            return
        if defined.get(name, module_name) != module_name:
            raise NotSelfContained(f"{op}: {name} is defined in both {defined[name]} and {module_name}")
        for top in _top_names(node):
            defined[top] = module_name
        needed[module_name].append(node)
        for used in sorted(_used_names(node)):
            need(module_name, used)

    need(op, "Model")
    order: list[str] = []  # modules, each after the ones it takes names from

    def visit(name: str) -> None:
        for src, _ in modules[name].imported.values():
            if src in needed and src not in order:
                visit(src)
        if name not in order:
            order.append(name)

    visit(op)
    imports: list[str] = []
    for name in order:
        imports += [i for i in modules[name].imports if i not in imports]
    parts = ["\n".join(imports)]
    for name in order:
        body = "\n\n\n".join(_source(n) for n in sorted(needed[name], key=lambda n: n.lineno))
        parts.append(f"# from hotshape kernels_eval/operators/{name}.py\n{body}")
    call = ", ".join(f"{k}={k}" for k in inputs)
    returned = (f"    return tuple(out[k] for k in {tuple(outputs)!r}) if isinstance(out, dict) else out"
                if len(outputs) > 1 else
                f"    return out[{outputs[0]!r}] if isinstance(out, dict) else out")
    parts.append(f"def run({', '.join(inputs)}):\n"
                 f"    out = Model(**{json.dumps(init_kwargs, sort_keys=True)})({call})\n{returned}")
    return "\n\n\n".join(parts) + "\n"
