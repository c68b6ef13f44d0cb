"""Discovery, in the candidate's (untrusted, sandboxed) process: the launch program of one forward call and the
init-time state the replay restores.

`Recorder` is told the forward's inputs, then sees every tensor op the dispatcher runs (through the worker's
audit mode) and every @triton.jit launch (through the worker's launch wrapper), and builds a
protocol.LaunchProgram: allocations, fills and copies (the allowed plumbing), each launch with its kernel's
source, grid, options and arguments (a tensor as a view of input, init-time state or memory allocated in the
forward), and where each output lies. An aten op that computes, memory from outside the program or a launch of
a kernel defined elsewhere makes the program unreplayable (`refused`). Nothing here is believed by the parent:
the program is only what the trusted replay (harness/replay.py) runs, on inputs the candidate never saw.
"""

from __future__ import annotations

import ast
import inspect
import os
import textwrap

from kernels_eval.harness.kernel_source import SAFE_BUILTINS, allowed_module
from kernels_eval.harness.protocol import (LAUNCH_OPTIONS, Alloc, Copy, Fill, KernelArg, KernelSource, Launch,
                                           LaunchProgram, Read, TensorView)

ALLOC_OPS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted",
                       "zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like",
                       "new_full", "scalar_tensor", "_scalar_tensor"})
FILL_VALUES = {"zeros": 0, "zeros_like": 0, "new_zeros": 0, "ones": 1, "ones_like": 1, "new_ones": 1}
COPY_OPS = frozenset({"clone", "contiguous", "_to_copy", "to", "lift_fresh_copy"})  # a new tensor holding a copy
VIEW_OPS = frozenset({"detach", "alias", "view", "_unsafe_view", "reshape", "as_strided", "permute", "transpose",
                      "t", "expand", "squeeze", "unsqueeze", "flatten", "select", "slice", "narrow", "split",
                      "split_with_sizes", "chunk", "unbind", "view_as", "expand_as", "unflatten", "movedim",
                      "_reshape_alias", "view_as_real", "view_as_complex", "lift_fresh", "is_same_size",
                      "_has_compatible_shallow_copy_type", "sym_size", "sym_stride", "sym_numel",
                      "sym_storage_offset", "record_stream"})
HOST_READ_OPS = frozenset({"_local_scalar_dense", "item"})


def state_tensors(model, torch) -> dict:
    """name -> tensor of every tensor the model holds right after __init__: parameters, buffers and tensor
    attributes of each submodule (a plain object's tensor attributes too), one per distinct storage."""
    found: dict = {}
    modules = model.named_modules() if isinstance(model, torch.nn.Module) else [("", model)]
    for prefix, module in modules:
        owner = f"{prefix}." if prefix else ""
        items = list(vars(module).items())
        if isinstance(module, torch.nn.Module):
            items += [(n, p) for n, p in module.named_parameters(recurse=False)]
            items += [(n, b) for n, b in module.named_buffers(recurse=False)]
        for name, value in items:
            if isinstance(value, torch.Tensor) and not name.startswith("__"):
                found.setdefault(f"{owner}{name}", value)
    by_storage: dict = {}
    for name, t in sorted(found.items()):
        if t.numel():
            by_storage.setdefault(_storage_ptr(t), (name, t))
    return {name: t for name, t in by_storage.values()}


def storage_bytes(t, torch):
    """The whole storage under tensor `t` as a flat uint8 tensor (what the snapshot exports)."""
    storage = t.untyped_storage()
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage, 0, (storage.nbytes(),), (1,))


def _storage_ptr(t) -> int:
    return t.untyped_storage().data_ptr()


class Recorder:
    """Builds one forward call's LaunchProgram (see the module doc); `begin`, the hooks, then `finish`."""

    def __init__(self, owned_file: str, state: dict) -> None:
        self.owned_file = os.path.realpath(owned_file)
        self.state = {_storage_ptr(t): name for name, t in state.items()}  # storage -> state name
        self.active = False
        self.in_launch = 0

    def begin(self, inputs: dict, torch) -> None:
        self.torch = torch
        self.inputs = {}
        for name, t in inputs.items():
            if isinstance(t, torch.Tensor) and t.numel():
                self.inputs.setdefault(_storage_ptr(t), name)
        self.buffers: dict[int, str] = {}
        self.steps: list = []
        self.kernels: dict[str, KernelSource] = {}
        self.refused: list[str] = []
        self.host_reads = 0
        self.active = True

    # ---- hooks -----------------------------------------------------------------------------------------

    def op(self, name: str, args: tuple, kwargs: dict, out) -> None:
        """One dispatched op (called by the worker's audit mode with the op's result)."""
        if not self.active or self.in_launch:
            return
        torch = self.torch
        if name in VIEW_OPS:
            return
        if name in HOST_READ_OPS:
            self.host_reads += 1
            view = self._view(args[0]) if args and isinstance(args[0], torch.Tensor) else None
            if view is not None:  # the replay makes the same round trip (a data-dependent size's cost)
                self.steps.append(Read(src=view))
            return
        if name in ALLOC_OPS and isinstance(out, torch.Tensor):
            self._alloc(out)
            value = FILL_VALUES.get(name)
            if name in ("full", "full_like", "new_full", "scalar_tensor", "_scalar_tensor"):
                value = args[-1] if name != "scalar_tensor" and name != "_scalar_tensor" else args[0]
                if name == "new_full":
                    value = args[2] if len(args) > 2 else kwargs.get("fill_value")
            if value is not None:
                self._fill(out, value)
            return
        if name in COPY_OPS and isinstance(out, torch.Tensor) and args and isinstance(args[0], torch.Tensor):
            if out.untyped_storage().data_ptr() == args[0].untyped_storage().data_ptr():
                return  # `to`/`contiguous` that returned the tensor itself
            if out.device != args[0].device:
                self.refused.append(f"tensor data moved between devices ({args[0].device} -> {out.device}) "
                                    "during the call")
                return
            self._alloc(out)
            self._copy(out, args[0])
            return
        if name == "copy_" and len(args) >= 2:
            self._copy(args[0], args[1])
            return
        if name in ("fill_", "zero_") and args:
            value = 0 if name == "zero_" else args[1]
            self._fill(args[0], value)
            return
        self.refused.append(f"aten::{name} computes outside the submission's kernels")

    def launch(self, fn_self, args: tuple, kwargs: dict) -> None:
        """One @triton.jit launch (before it runs), as the launch wrapper sees it."""
        if not self.active:
            return
        try:
            self._launch(fn_self, args, kwargs)
        except Exception as exc:  # noqa: BLE001 - whatever the candidate passed, the program is then refused
            self.refused.append(f"a launch could not be recorded ({type(exc).__name__})")

    def _launch(self, fn_self, args: tuple, kwargs: dict) -> None:
        fn = getattr(fn_self, "fn", None)
        kernel = self._kernel(fn)
        if kernel is None:
            return
        names = list(getattr(fn_self, "arg_names", None) or inspect.signature(fn).parameters)
        named = dict(zip(names, args))
        named.update({k: v for k, v in kwargs.items() if k in names})
        constexprs = _constexpr_names(fn)
        grid = kwargs.get("grid")
        try:
            grid = grid(dict(named)) if callable(grid) else grid
            grid = tuple(int(g) for g in grid) + (1,) * (3 - len(tuple(grid)))
        except Exception as exc:  # noqa: BLE001 - the program is then not replayable
            self.refused.append(f"the grid of {kernel} could not be read ({type(exc).__name__})")
            return
        out_args = []
        for name, value in named.items():
            arg = self._arg(name, value, name in constexprs)
            if arg is None:
                return
            out_args.append(arg)
        options = {k: v for k, v in kwargs.items() if k in LAUNCH_OPTIONS and type(v) in (int, bool)}
        self.steps.append(Launch(kernel=kernel, grid=grid, args=tuple(out_args), options=options))

    def finish(self, outputs: dict) -> LaunchProgram:
        """The program of the call that returned `outputs` (name -> tensor)."""
        self.active = False
        out_views = {}
        output_buffers = set()
        for name, t in outputs.items():
            view = self._view(t)
            if view is None:
                self.refused.append(f"output {name!r} lies in memory the recorded program did not allocate "
                                    "(made outside the dispatcher or by an earlier call)")
                continue
            out_views[name] = view
            if view.role == "scratch":
                output_buffers.add(view.ref)
        program = LaunchProgram(kernels=tuple(self.kernels.values()), steps=tuple(self.steps), outputs=out_views,
                                refused=tuple(dict.fromkeys(self.refused))[:64], host_reads=self.host_reads)
        return _with_output_roles(program, output_buffers)

    # ---- helpers ---------------------------------------------------------------------------------------

    def _alloc(self, t) -> None:
        storage = t.untyped_storage()
        buffer = f"b{len(self.buffers)}"
        self.buffers[storage.data_ptr()] = buffer
        self.steps.append(Alloc(buffer=buffer, nbytes=int(storage.nbytes())))

    def _fill(self, t, value) -> None:
        view = self._view(t)
        if view is None or not isinstance(value, (int, float, bool)):
            self.refused.append("a fill of memory outside the program, or with a tensor's value")
            return
        self.steps.append(Fill(target=view, value=value))

    def _copy(self, dst, src) -> None:
        torch = self.torch
        if not isinstance(src, torch.Tensor):
            self._fill(dst, src)
            return
        d, s = self._view(dst), self._view(src)
        if d is None or s is None:
            self.refused.append("a copy from or into memory the recorded program did not allocate")
            return
        self.steps.append(Copy(dst=d, src=s))

    def _view(self, t) -> TensorView | None:
        if t.numel() == 0:
            return TensorView(role="scratch", ref="empty", offset_bytes=0, shape=tuple(t.shape),
                              strides=tuple(t.stride()), dtype=str(t.dtype).removeprefix("torch."))
        base = _storage_ptr(t)
        if base in self.buffers:
            role, ref = "scratch", self.buffers[base]
        elif base in self.inputs:
            role, ref = "input", self.inputs[base]
        elif base in self.state:
            role, ref = "state", self.state[base]
        else:
            return None
        return TensorView(role=role, ref=ref, offset_bytes=int(t.data_ptr() - base), shape=tuple(t.shape),
                          strides=tuple(t.stride()), dtype=str(t.dtype).removeprefix("torch."))

    def _arg(self, name: str, value, constexpr: bool) -> KernelArg | None:
        torch = self.torch
        if isinstance(value, torch.Tensor):
            view = self._view(value)
            if view is None:
                self.refused.append(f"argument {name!r} of a launch points into memory the recorded program did "
                                    "not allocate (made outside the dispatcher or by an earlier call)")
                return None
            return KernelArg(name=name, tensor=view)
        value = getattr(value, "value", value) if type(value).__name__ == "constexpr" else value
        if value is None or type(value) in (int, float, bool, str):
            return KernelArg(name=name, value=value, constexpr=constexpr)
        dtype_name = _tl_dtype_name(value)
        if dtype_name is not None:
            return KernelArg(name=name, value=dtype_name, constexpr=constexpr)
        self.refused.append(f"argument {name!r} of a launch is a {type(value).__name__}, which a replay cannot carry")
        return None

    def _kernel(self, fn) -> str | None:
        """The kernel's name in the program (its source and what it reads recorded once), or None (refused)."""
        name = getattr(fn, "__name__", "?")
        if name in self.kernels:
            return name
        try:
            source = capture(fn, self.owned_file, self.kernels)
        except ValueError as exc:
            self.refused.append(str(exc))
            return None
        return source.name


def capture(fn, owned_file: str, into: dict) -> KernelSource:
    """The KernelSource of jit function `fn` (and, into `into`, of the kernels it calls); ValueError when it is
    not the submission's own or reads something a replay cannot carry."""
    name = getattr(fn, "__name__", "?")
    code = getattr(fn, "__code__", None)
    if code is None or os.path.realpath(code.co_filename) != owned_file:
        where = code.co_filename if code is not None else "?"
        raise ValueError(f"kernel {name} is not defined in the submission's file ({where})")
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError) as exc:
        raise ValueError(f"kernel {name}: its source cannot be read ({type(exc).__name__})") from None
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    if not defs:
        raise ValueError(f"kernel {name}: its source is not a def {name}")
    fdef = defs[0]
    fdef.decorator_list = []
    source = ast.unparse(ast.Module(body=[fdef], type_ignores=[])) + "\n"
    params = {a.arg for a in fdef.args.posonlyargs + fdef.args.args + fdef.args.kwonlyargs}
    stored = {n.id for n in ast.walk(fdef) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    free = sorted({n.id for n in ast.walk(fdef) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
                  - params - stored)
    aliases, constants, calls = {}, {}, {}
    into[name] = KernelSource(name=name, source=source)  # a placeholder against call cycles
    glb = getattr(fn, "__globals__", {})
    for ref in free:
        if ref not in glb:
            if ref in SAFE_BUILTINS:
                continue
            raise ValueError(f"kernel {name}: name {ref!r} is not a global of its module")
        value = glb[ref]
        module_name = getattr(value, "__name__", None) if type(value).__name__ == "module" else None
        if module_name is not None:
            if not allowed_module(module_name):
                raise ValueError(f"kernel {name}: reads module {module_name}")
            aliases[ref] = module_name
        elif hasattr(value, "fn") and hasattr(value, "run"):
            callee = capture(value.fn, owned_file, into) if value.fn.__name__ not in into else into[value.fn.__name__]
            calls[ref] = callee.name
        else:
            raw = getattr(value, "value", value) if type(value).__name__ == "constexpr" else value
            dtype_name = _tl_dtype_name(raw)
            if dtype_name is not None:
                constants[ref] = dtype_name
            elif raw is None or type(raw) in (int, float, bool):
                constants[ref] = raw
            else:
                raise ValueError(f"kernel {name}: global {ref!r} is a {type(raw).__name__}")
    into[name] = KernelSource(name=name, source=source, aliases=aliases, constants=constants, calls=calls)
    return into[name]


def _tl_dtype_name(value) -> str | None:
    try:
        import triton.language as tl
    except ImportError:
        return None
    if isinstance(value, tl.dtype):
        for attr in ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                     "uint16", "uint32", "uint64", "int1", "float8e4nv", "float8e5", "float8e4b15"):
            if getattr(tl, attr, None) == value:
                return f"tl.{attr}"
    return None


def _constexpr_names(fn) -> set[str]:
    try:
        annotations = inspect.get_annotations(fn)
    except Exception:  # noqa: BLE001
        return set()
    return {n for n, a in annotations.items() if "constexpr" in str(a)}


def _with_output_roles(program: LaunchProgram, output_buffers: set[str]) -> LaunchProgram:
    """The program with views of the buffers outputs lie in given the role `output` (scratch otherwise)."""
    from dataclasses import replace

    def fix(view):
        if view is not None and view.role == "scratch" and view.ref in output_buffers:
            return replace(view, role="output")
        return view

    steps = []
    for s in program.steps:
        if isinstance(s, Fill):
            s = replace(s, target=fix(s.target))
        elif isinstance(s, Copy):
            s = replace(s, dst=fix(s.dst), src=fix(s.src))
        elif isinstance(s, Launch):
            s = replace(s, args=tuple(replace(a, tensor=fix(a.tensor)) for a in s.args))
        steps.append(s)
    return replace(program, steps=tuple(steps), outputs={k: fix(v) for k, v in program.outputs.items()})
