"""A recorded kernel's source, checked to be a plain Triton kernel and rebuilt with nothing of its module.

The replay (harness/replay.py) never imports the candidate: it rebuilds each kernel of a launch program from the
source text discovery recorded, after `validate` has read the whole function: one `def` with no decorators,
statements and expressions of the Triton language only (arithmetic, comparisons, control flow, calls), names
that are its parameters, its own locals, module aliases of Triton (`tl`), constants recorded with the kernel,
other recorded kernels or a few harmless builtins, and no attribute that starts with an underscore. `build`
executes that source in a namespace holding only those names, so a kernel reaches nothing of the candidate's
module, of the evaluator or of Python's import machinery.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import importlib
import linecache

from kernels_eval.harness.protocol import KernelSource

SAFE_BUILTINS = ("range", "min", "max", "abs", "len", "int", "float", "bool", "tuple", "enumerate", "zip", "isinstance")
ALLOWED_NODES = (
    ast.Module, ast.FunctionDef, ast.arguments, ast.arg, ast.Return, ast.Assign, ast.AugAssign, ast.AnnAssign,
    ast.For, ast.While, ast.If, ast.IfExp, ast.Expr, ast.Pass, ast.Break, ast.Continue, ast.Assert,
    ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Call, ast.keyword, ast.Attribute, ast.Subscript,
    ast.Slice, ast.Name, ast.Constant, ast.Tuple, ast.List, ast.Load, ast.Store, ast.JoinedStr, ast.FormattedValue,
    ast.operator, ast.unaryop, ast.boolop, ast.cmpop, ast.expr_context,
)


def allowed_module(name: str) -> bool:
    """Modules a kernel may name: Triton and its language (tl, tl.math, libdevice)."""
    return name == "triton" or name == "triton.language" or name.startswith("triton.language.")


class KernelRefused(ValueError):
    """A recorded kernel that is not a plain Triton kernel (the reason names the construct)."""


def validate(kernel: KernelSource) -> ast.FunctionDef:
    """The kernel's function definition, or KernelRefused saying what is not plain Triton in it."""
    where = f"kernel {kernel.name}"
    try:
        tree = ast.parse(kernel.source)
    except SyntaxError as exc:
        raise KernelRefused(f"{where}: its source does not parse ({exc.msg})") from None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef) or tree.body[0].name != kernel.name:
        raise KernelRefused(f"{where}: the source must be exactly one def {kernel.name}(...)")
    fn = tree.body[0]
    if kernel.name.startswith("_hotshape"):
        raise KernelRefused(f"{where}: the name is the evaluator's (its timing markers)")
    if fn.decorator_list or fn.args.vararg or fn.args.kwarg:
        raise KernelRefused(f"{where}: decorators and *args/**kwargs are not plain Triton")
    for module in kernel.aliases.values():
        if not allowed_module(module):
            raise KernelRefused(f"{where}: names module {module!r} (only triton and triton.language are allowed)")
    params = {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
    stored = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    known = params | stored | set(kernel.aliases) | set(kernel.constants) | set(kernel.calls) | set(SAFE_BUILTINS)
    for node in ast.walk(fn):
        if not isinstance(node, ALLOWED_NODES):
            raise KernelRefused(f"{where}: line {getattr(node, 'lineno', '?')}: {type(node).__name__} is not "
                                "allowed in a replayed kernel")
        if node is not fn and isinstance(node, ast.FunctionDef):
            raise KernelRefused(f"{where}: nested function definitions are not allowed")
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in known:
            raise KernelRefused(f"{where}: line {node.lineno}: name {node.id!r} is neither a parameter, a local, "
                                "Triton, a recorded constant nor a recorded kernel")
        if isinstance(node, ast.Name) and node.id.startswith("__"):
            raise KernelRefused(f"{where}: line {node.lineno}: name {node.id!r}")
        if isinstance(node, ast.Attribute):
            if node.attr.startswith("_"):
                raise KernelRefused(f"{where}: line {node.lineno}: attribute {node.attr!r}")
            if isinstance(node.value, ast.Constant):
                raise KernelRefused(f"{where}: line {node.lineno}: attribute of a constant")
        if isinstance(node, ast.Call):
            target = node.func
            if isinstance(target, ast.Name) and target.id not in kernel.calls and target.id not in SAFE_BUILTINS:
                raise KernelRefused(f"{where}: line {node.lineno}: calls {target.id!r}, which is neither Triton, a "
                                    "recorded kernel nor an allowed builtin")
            if not isinstance(target, (ast.Name, ast.Attribute)):
                raise KernelRefused(f"{where}: line {node.lineno}: calls the result of an expression")
    return fn


def constant_value(value):
    """A recorded constant as the kernel sees it: `tl.<dtype>` text as that Triton dtype, numbers as constexpr."""
    import triton.language as tl

    if isinstance(value, str) and value.startswith("tl."):
        dtype = getattr(tl, value[3:], None)
        if not isinstance(dtype, tl.dtype):
            raise KernelRefused(f"constant {value!r} is not a Triton dtype")
        return dtype
    return tl.constexpr(value)


def build(kernels: tuple[KernelSource, ...] | list[KernelSource]) -> dict:
    """name -> the kernel rebuilt with `triton.jit` from its validated source (the interpreter's kernel where
    TRITON_INTERPRET=1), callees first; KernelRefused for a kernel that fails validation or a call cycle."""
    import triton

    by_name = {k.name: k for k in kernels}
    built: dict = {}
    visiting: set[str] = set()

    def make(name: str):
        if name in built:
            return built[name]
        if name in visiting:
            raise KernelRefused(f"kernel {name}: calls itself through recorded kernels")
        kernel = by_name.get(name)
        if kernel is None:
            raise KernelRefused(f"kernel {name} is called but was not recorded")
        visiting.add(name)
        validate(kernel)
        digest = hashlib.sha256(kernel.source.encode()).hexdigest()[:16]
        # __name__ becomes the function's __module__, which Triton's code generator reads for calls between kernels
        namespace: dict = {"__builtins__": {n: getattr(builtins, n) for n in SAFE_BUILTINS},
                           "__name__": f"hotshape_replayed_{digest}"}
        for alias, module in kernel.aliases.items():
            namespace[alias] = importlib.import_module(module)
        for const, value in kernel.constants.items():
            namespace[const] = constant_value(value)
        for alias, callee in kernel.calls.items():
            namespace[alias] = make(callee)
        filename = f"<replayed kernel {name} {digest}>"
        lines = kernel.source.splitlines(keepends=True)
        linecache.cache[filename] = (len(kernel.source), None, lines, filename)  # for triton.jit's getsource
        exec(compile(kernel.source, filename, "exec"), namespace)  # noqa: S102 - validated plain Triton only
        built[name] = triton.jit(namespace[name])
        visiting.discard(name)
        return built[name]

    for name in by_name:
        make(name)
    return built
