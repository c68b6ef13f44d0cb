"""A submission on disk: a directory of `<operator>.py` files, each defining `class Model(nn.Module)`."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

from catalogue import registry


def operator_files(submission: str | Path) -> dict[str, Path]:
    """{operator: absolute path} of the submission's files named after a registry operator."""
    root = Path(submission)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: a submission is a directory of <operator>.py files")
    known = set(registry.operator_names())
    return {p.stem: p.resolve() for p in sorted(root.glob("*.py")) if p.stem in known}


def jit_function_names(path: str | Path) -> list[str]:
    """Names of the functions a file decorates with triton.jit / triton.autotune / triton.heuristics
    (a static listing for reports; adoption itself is decided at run time)."""
    tree = ast.parse(Path(path).read_text(), filename=str(path))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                text = ast.unparse(target)
                if text.split(".")[-1] in ("jit", "autotune", "heuristics"):
                    names.append(node.name)
                    break
    return sorted(set(names))


def file_sha256(path: Path) -> str:
    """The sha256 of a submission file's bytes (results rows and the autotuning store key by it)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
