"""The import graph of the packages, read from the source with ast: no circle, no hidden arrow between packages.

- No two modules import each other, directly or round a loop (function-local imports included: a circle
  broken only by importing late is still a circle to the reader).
- An import of a first-party module inside a function (its own package's too) says why on its line (a comment:
  it loads torch, triton or pyarrow where the caller must not, say), or the module says once why its imports sit
  in functions (a line at the head starting `# Imports inside functions:`, as the command modules do): every
  arrow is read at the head of its module.
- The Dagster definitions never import torch or triton when they load, and ingest never imports them at all.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("catalogue", "ingest", "weighting", "release", "flow", "kernels_eval", "pipelines")
HEAVY = {"torch", "triton"}
MODULE_REASON = "# Imports inside functions:"


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name
    line: int
    target: str  # the module imported: a first-party module, or the top-level name of another distribution
    local: bool  # inside a function (runs when called, not when the module loads)
    reason: bool  # a comment on the import's first line, or the module's one reason for all


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def first_party(root: Path, packages=PACKAGES) -> dict[str, Path]:
    """Every module of the packages under `root`, by dotted name."""
    return {module_name(root, path): path for package in packages for path in sorted((root / package).rglob("*.py"))}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """The imports of one module, each resolved to the first-party module it loads (or a distribution's name)."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    module_reason = any(line.startswith(MODULE_REASON) for line in lines)
    tree = ast.parse(source, str(path))
    found: list[Import] = []

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                visit_else(child, local)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                add(child, local)
            visit(child, local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    def visit_else(node: ast.If, local: bool) -> None:
        for child in node.orelse:
            visit(ast.Module(body=[child], type_ignores=[]), local)

    def add(node: ast.Import | ast.ImportFrom, local: bool) -> None:
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                package = name.split(".")[: len(name.split(".")) - node.level + (path.name == "__init__.py")]
                base = ".".join(package + ([base] if base else []))
            names = [f"{base}.{alias.name}" for alias in node.names]
        reason = module_reason or "#" in lines[node.lineno - 1]
        for full in names:
            target = _resolve(full, modules) or full.split(".")[0]
            if target != name:
                found.append(Import(name, node.lineno, target, local, reason))

    visit(tree, False)
    return sorted(set(found), key=lambda i: (i.line, i.target))


def import_graph(root: Path, packages=PACKAGES) -> list[Import]:
    modules = first_party(root, packages)
    return [imp for name, path in modules.items() for imp in imports_of(name, path, modules)]


def circles(graph: list[Import]) -> list[list[str]]:
    """The strongly connected groups of two or more modules (Tarjan), each sorted."""
    edges: dict[str, set[str]] = {}
    for imp in graph:
        edges.setdefault(imp.importer, set()).add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return sorted(found)


def hidden_imports(graph: list[Import], packages=PACKAGES) -> list[str]:
    """`file:line imports module` for each function-local import of a first-party module with no reason."""
    return [f"{imp.importer}:{imp.line} imports {imp.target}" for imp in graph
            if imp.local and not imp.reason and imp.target.split(".")[0] in packages]


def reaches(graph: list[Import], start: list[str], follow_local: bool) -> dict[str, str]:
    """Every distribution reached from the `start` modules through first-party modules: {name: first importer}.
    Function-local imports are followed only when `follow_local` (they run only when called)."""
    edges: dict[str, list[Import]] = {}
    for imp in graph:
        edges.setdefault(imp.importer, []).append(imp)
    seen, todo, outside = set(start), list(start), {}
    while todo:
        for imp in edges.get(todo.pop(), ()):
            if imp.local and not follow_local:
                continue
            if imp.target.split(".")[0] in PACKAGES:
                if imp.target not in seen:
                    seen.add(imp.target)
                    todo.append(imp.target)
            else:
                outside.setdefault(imp.target, f"{imp.importer}:{imp.line}")
    return outside


GRAPH = import_graph(REPO)


def test_no_import_circle():
    assert circles(GRAPH) == []


def test_no_first_party_import_inside_a_function_without_a_reason():
    assert hidden_imports(GRAPH) == []


def test_the_dagster_definitions_load_without_torch_and_ingest_never_imports_it():
    definitions = reaches(GRAPH, ["pipelines.definitions"], follow_local=False)
    assert {name: where for name, where in definitions.items() if name in HEAVY} == {}
    ingest = reaches(GRAPH, [i.importer for i in GRAPH if i.importer.startswith("ingest")], follow_local=True)
    assert {name: where for name, where in ingest.items() if name in HEAVY} == {}


def test_the_checks_catch_a_circle_a_hidden_import_and_torch(tmp_path):
    for package in ("ingest", "weighting"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "ingest" / "a.py").write_text("from ingest import b\n")
    (tmp_path / "ingest" / "b.py").write_text("def f():\n    import ingest.a\n    import torch\n")
    (tmp_path / "weighting" / "w.py").write_text(
        "def f():\n    from ingest.a import x\n    from ingest import b  # the reason\n")
    (tmp_path / "weighting" / "commands.py").write_text(
        "# Imports inside functions: the reason\ndef f():\n    from ingest.a import x\n")
    (tmp_path / "weighting" / "v.py").write_text(
        "import os\n\ndef f():\n    import json\n    from weighting import w\n    from . import commands  # why\n")
    graph = import_graph(tmp_path, ("ingest", "weighting"))
    assert circles(graph) == [["ingest.a", "ingest.b"]]
    assert hidden_imports(graph, ("ingest", "weighting")) == [
        "ingest.b:2 imports ingest.a", "weighting.v:5 imports weighting.w", "weighting.w:2 imports ingest.a"]
    assert reaches(graph, ["weighting.w"], follow_local=False) == {}
    assert reaches(graph, ["ingest.a"], follow_local=True) == {"torch": "ingest.b:3"}
