"""Typed messages between the evaluator's processes: the launch program discovery records in the candidate's
process, and the requests and results of the trusted replay.

Plain slots dataclasses (the GPU machine has no msgspec), encoded to JSON-able dicts with a `kind` tag and
decoded strictly: an unknown field, a wrong type, a role or step kind outside the lists, or a size over the caps
below is a ProtocolError naming the field. Everything discovery sends is hostile input; decoding is the first
check the parent makes of it (docs/threat-model.md, "The trust boundary").
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Union

# Roles of the memory a kernel argument points into (docs/threat-model.md): a forward input, the storage of an
# output, a tensor that existed right after __init__ (parameters, buffers, attributes), memory allocated during
# the forward and not returned.
ROLES = ("input", "output", "state", "scratch")
# Launch options a replay passes on (Triton's compile options that a launch may set); anything else is dropped.
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion")
MAX_STEPS = 20_000
MAX_KERNELS = 64
MAX_SOURCE_CHARS = 200_000
MAX_ARGS = 256
MAX_DIMS = 16
MAX_TEXT = 400
Scalar = Union[int, float, bool, str, None]


class ProtocolError(ValueError):
    """A message that is not a well-formed record of this protocol."""


@dataclass(frozen=True, slots=True)
class TensorView:
    """Where a tensor lies: `ref` (an input's or state tensor's name, or a buffer id) of memory of `role`,
    `offset_bytes` from its storage's start, with shape, strides (elements) and dtype (torch's name)."""

    role: str
    ref: str
    offset_bytes: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str


@dataclass(frozen=True, slots=True)
class KernelArg:
    """One argument of a launch, by the kernel's parameter name: a tensor's view, or a scalar / constexpr value
    (a Triton dtype travels as the text `tl.<name>`)."""

    name: str
    tensor: TensorView | None = None
    value: Scalar = None
    constexpr: bool = False


@dataclass(frozen=True, slots=True)
class Alloc:
    """Memory allocated during the forward (poisoned by the replay before the run)."""

    buffer: str
    nbytes: int


@dataclass(frozen=True, slots=True)
class Fill:
    """`target` filled with a constant (zeros, full, fill_, zero_)."""

    target: TensorView
    value: Scalar


@dataclass(frozen=True, slots=True)
class Copy:
    """`dst` written with `src`'s elements (copy_, clone, contiguous, a dtype conversion)."""

    dst: TensorView
    src: TensorView


@dataclass(frozen=True, slots=True)
class Read:
    """A device-to-host read of one value (`.item()`): the host round trip a data-dependent size needs."""

    src: TensorView


@dataclass(frozen=True, slots=True)
class Launch:
    """One @triton.jit launch: the kernel (by name in LaunchProgram.kernels), its grid and its arguments."""

    kernel: str
    grid: tuple[int, int, int]
    args: tuple[KernelArg, ...]
    options: dict[str, int | bool] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class KernelSource:
    """A kernel as the replay rebuilds it: its source (the function without decorators), the module aliases it
    names (`tl` -> `triton.language`), the constants it reads from its module, and the kernels it calls."""

    name: str
    source: str
    aliases: dict[str, str] = field(default_factory=dict)
    constants: dict[str, Scalar] = field(default_factory=dict)
    calls: dict[str, str] = field(default_factory=dict)  # name in the source -> kernel name in the program


@dataclass(frozen=True, slots=True)
class LaunchProgram:
    """What one forward call did, as the replay runs it: the kernels, the steps in order, where each output
    lies, and why it cannot be replayed (empty: replayable). `host_reads` counts device-to-host reads of single
    values (`.item()`): a program with them may depend on the data."""

    kernels: tuple[KernelSource, ...]
    steps: tuple[Union[Alloc, Fill, Copy, Read, Launch], ...]
    outputs: dict[str, TensorView]
    refused: tuple[str, ...] = ()
    host_reads: int = 0

    def launches(self) -> list[Launch]:
        return [s for s in self.steps if isinstance(s, Launch)]

    def shape_key(self) -> Any:
        """The program as plain data (two recordings with the same key launch the same work)."""
        return encode(self)


KINDS = {cls.__name__: cls for cls in (TensorView, KernelArg, Alloc, Fill, Copy, Read, Launch, KernelSource,
                                       LaunchProgram)}


def encode(obj: Any) -> Any:
    """`obj` (a protocol record, or containers of them) as JSON-able data, each record tagged with its kind."""
    if type(obj).__name__ in KINDS and hasattr(obj, "__dataclass_fields__"):
        return {"kind": type(obj).__name__, **{f.name: encode(getattr(obj, f.name)) for f in fields(obj)}}
    if isinstance(obj, (list, tuple)):
        return [encode(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): encode(v) for k, v in obj.items()}
    return obj


def _text(value: Any, where: str, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise ProtocolError(f"{where}: expected text of at most {limit} characters")
    return value


def _int(value: Any, where: str, low: int = 0, high: int = 1 << 62) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ProtocolError(f"{where}: expected an integer in [{low}, {high}]")
    return value


def _scalar(value: Any, where: str) -> Scalar:
    if value is None or type(value) in (int, bool):
        return value
    if type(value) is float:
        return value
    if type(value) is str and len(value) <= MAX_TEXT:
        return value
    raise ProtocolError(f"{where}: expected a number, a bool, short text or null")


def _record(data: Any, cls: type, where: str) -> dict:
    if not isinstance(data, dict) or data.get("kind") != cls.__name__:
        raise ProtocolError(f"{where}: expected a {cls.__name__} record")
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - names - {"kind"})
    if unknown:
        raise ProtocolError(f"{where}: unknown fields {unknown}")
    return data


def _view(data: Any, where: str) -> TensorView:
    d = _record(data, TensorView, where)
    role = d.get("role")
    if role not in ROLES:
        raise ProtocolError(f"{where}.role: {role!r} is not one of {', '.join(ROLES)}")
    shape, strides = d.get("shape"), d.get("strides")
    if not isinstance(shape, list) or not isinstance(strides, list) or len(shape) != len(strides) \
            or len(shape) > MAX_DIMS:
        raise ProtocolError(f"{where}: shape and strides must be lists of the same length (at most {MAX_DIMS})")
    return TensorView(role=role, ref=_text(d.get("ref"), f"{where}.ref"),
                      offset_bytes=_int(d.get("offset_bytes"), f"{where}.offset_bytes"),
                      shape=tuple(_int(n, f"{where}.shape") for n in shape),
                      strides=tuple(_int(n, f"{where}.strides", -(1 << 40), 1 << 40) for n in strides),
                      dtype=_text(d.get("dtype"), f"{where}.dtype", 32))


def _arg(data: Any, where: str) -> KernelArg:
    d = _record(data, KernelArg, where)
    tensor = d.get("tensor")
    constexpr = d.get("constexpr", False)
    if type(constexpr) is not bool:
        raise ProtocolError(f"{where}.constexpr: expected a bool")
    return KernelArg(name=_text(d.get("name"), f"{where}.name", 128),
                     tensor=_view(tensor, f"{where}.tensor") if tensor is not None else None,
                     value=_scalar(d.get("value"), f"{where}.value"), constexpr=constexpr)


def _step(data: Any, where: str):
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind == "Alloc":
        d = _record(data, Alloc, where)
        return Alloc(buffer=_text(d.get("buffer"), f"{where}.buffer", 32), nbytes=_int(d.get("nbytes"), f"{where}.nbytes"))
    if kind == "Fill":
        d = _record(data, Fill, where)
        return Fill(target=_view(d.get("target"), f"{where}.target"), value=_scalar(d.get("value"), f"{where}.value"))
    if kind == "Copy":
        d = _record(data, Copy, where)
        return Copy(dst=_view(d.get("dst"), f"{where}.dst"), src=_view(d.get("src"), f"{where}.src"))
    if kind == "Read":
        d = _record(data, Read, where)
        return Read(src=_view(d.get("src"), f"{where}.src"))
    if kind == "Launch":
        d = _record(data, Launch, where)
        grid, args, options = d.get("grid"), d.get("args"), d.get("options", {})
        if not isinstance(grid, list) or len(grid) != 3:
            raise ProtocolError(f"{where}.grid: expected three integers")
        if not isinstance(args, list) or len(args) > MAX_ARGS:
            raise ProtocolError(f"{where}.args: expected a list of at most {MAX_ARGS} arguments")
        if not isinstance(options, dict) or set(options) - set(LAUNCH_OPTIONS) \
                or not all(type(v) in (int, bool) for v in options.values()):
            raise ProtocolError(f"{where}.options: only {', '.join(LAUNCH_OPTIONS)}, integers")
        return Launch(kernel=_text(d.get("kernel"), f"{where}.kernel", 128),
                      grid=tuple(_int(g, f"{where}.grid", 0, 1 << 31) for g in grid),
                      args=tuple(_arg(a, f"{where}.args[{i}]") for i, a in enumerate(args)), options=dict(options))
    raise ProtocolError(f"{where}: unknown step kind {kind!r}")


def _mapping(data: Any, where: str, value) -> dict:
    if not isinstance(data, dict) or len(data) > MAX_ARGS:
        raise ProtocolError(f"{where}: expected a mapping of at most {MAX_ARGS} entries")
    return {_text(k, f"{where} key", 128): value(v, f"{where}[{k}]") for k, v in data.items()}


def _kernel(data: Any, where: str) -> KernelSource:
    d = _record(data, KernelSource, where)
    return KernelSource(name=_text(d.get("name"), f"{where}.name", 128),
                        source=_text(d.get("source"), f"{where}.source", MAX_SOURCE_CHARS),
                        aliases=_mapping(d.get("aliases", {}), f"{where}.aliases", lambda v, w: _text(v, w, 64)),
                        constants=_mapping(d.get("constants", {}), f"{where}.constants", _scalar),
                        calls=_mapping(d.get("calls", {}), f"{where}.calls", lambda v, w: _text(v, w, 128)))


def decode_program(data: Any) -> LaunchProgram:
    """The LaunchProgram in `data` (hostile: every field checked), or ProtocolError naming the first fault."""
    d = _record(data, LaunchProgram, "program")
    kernels, steps, refused = d.get("kernels"), d.get("steps"), d.get("refused", [])
    if not isinstance(kernels, list) or len(kernels) > MAX_KERNELS:
        raise ProtocolError(f"program.kernels: expected a list of at most {MAX_KERNELS} kernels")
    if not isinstance(steps, list) or len(steps) > MAX_STEPS:
        raise ProtocolError(f"program.steps: expected a list of at most {MAX_STEPS} steps")
    if not isinstance(refused, list) or len(refused) > 64:
        raise ProtocolError("program.refused: expected a list of at most 64 reasons")
    program = LaunchProgram(kernels=tuple(_kernel(k, f"program.kernels[{i}]") for i, k in enumerate(kernels)),
                            steps=tuple(_step(s, f"program.steps[{i}]") for i, s in enumerate(steps)),
                            outputs=_mapping(d.get("outputs"), "program.outputs", _view),
                            refused=tuple(_text(r, "program.refused") for r in refused),
                            host_reads=_int(d.get("host_reads", 0), "program.host_reads"))
    names = {k.name for k in program.kernels}
    for i, launch in enumerate(program.launches()):
        if launch.kernel not in names:
            raise ProtocolError(f"program: launch {i} names kernel {launch.kernel!r}, which the program lacks")
    return program


# ---- parent <-> replay ------------------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class ReplayRequest:
    """One replay: the program (as encoded data), the operator whose reference draws the inputs, the seeds of the
    input sets to replay on (and, on a GPU with time_calls, to time on), the init-time state as tensor files in
    `exchange` (channel.export_tensor descriptions), and the key of the input digests."""

    operator: str
    device: str
    program: dict
    input_kwargs: dict
    seeds: list[int]
    state: dict[str, dict]
    exchange: str
    digest_key: int
    time_calls: bool = False
    time_seeds: list[int] = field(default_factory=list)
    budget_s: float = 0.15
    max_calls: int = 200


@dataclass(slots=True, kw_only=True)
class ReplayResult:
    """A replay's outcome: ok with each seed's outputs (tensor descriptions) and input digests, and the timed
    calls' seconds; or `refused` (the program is not replayable: not native) or `error` (a kernel failed)."""

    ok: bool
    outputs: list[dict[str, dict]] = field(default_factory=list)
    digests: list[dict[str, str]] = field(default_factory=list)
    times_s: list[float] | None = None
    timed_outputs: list[dict[str, dict]] = field(default_factory=list)  # each rotated set's last timed outputs
    timed_seeds: list[int] = field(default_factory=list)
    timed_digests: list[dict[str, str]] = field(default_factory=list)
    kernel_us: dict[str, float] = field(default_factory=dict)  # GPU µs per timed call by kernel name
    refused: str | None = None
    error: str | None = None


KINDS.update({cls.__name__: cls for cls in (ReplayRequest, ReplayResult)})


def _plain(data: Any, cls: type, where: str) -> dict:
    d = _record(data, cls, where)
    return {k: v for k, v in d.items() if k != "kind"}


def decode_request(data: Any) -> ReplayRequest:
    """A ReplayRequest from the parent's message (types checked)."""
    d = _plain(data, ReplayRequest, "replay request")
    request = ReplayRequest(**d)
    if request.device not in ("cpu", "cuda") or not all(type(s) is int for s in request.seeds + request.time_seeds):
        raise ProtocolError("replay request: bad device or seeds")
    return request


def decode_result(data: Any) -> ReplayResult:
    """A ReplayResult from the replay's message (types checked)."""
    d = _plain(data, ReplayResult, "replay result")
    result = ReplayResult(**d)
    if type(result.ok) is not bool or not isinstance(result.outputs, list) or not isinstance(result.digests, list):
        raise ProtocolError("replay result: bad ok, outputs or digests")
    if result.times_s is not None and not all(isinstance(t, (int, float)) and t > 0 for t in result.times_s):
        raise ProtocolError("replay result: times must be positive numbers")
    return result


# ---- worker -> parent ---------------------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class WorkerReply:
    """The worker's reply to `init` or `call` (hostile: `decode_reply` checks every field's type). `observed` is set
    by the parent's end of the pipes (process.WorkerProcess), never taken from the worker."""

    ok: bool
    error: str | None = None
    tamper: bool = False
    traceback: str | None = None
    jit_functions: list[str] = field(default_factory=list)
    state: dict[str, dict] = field(default_factory=dict)  # the init-time snapshot's tensor files
    launches: list[dict] = field(default_factory=list)
    aten_ops: dict[str, int] = field(default_factory=dict)
    outputs: dict[str, dict] = field(default_factory=dict)
    inputs: dict[str, str] = field(default_factory=dict)  # each input's keyed digest after the call
    program: dict | None = None  # the call's LaunchProgram, decoded only by judge.plan
    records: dict | None = None
    filled_bytes: int = 0
    took_s: dict[str, float] = field(default_factory=dict)
    observed: dict = field(default_factory=dict)


_REPLY_TYPES = {"ok": bool, "error": (str, type(None)), "tamper": bool, "traceback": (str, type(None)),
                "jit_functions": list, "state": dict, "launches": list, "aten_ops": dict, "outputs": dict,
                "inputs": dict, "program": (dict, type(None)), "records": (dict, type(None)), "filled_bytes": int,
                "took_s": dict, "observed": dict}


def decode_reply(data: Any) -> WorkerReply:
    """A WorkerReply from a worker's message, or ProtocolError naming the first field of the wrong type (fields
    of other commands are dropped)."""
    if not isinstance(data, dict):
        raise ProtocolError("worker reply: not an object")
    known = {k: v for k, v in data.items() if k in _REPLY_TYPES}
    for key, value in known.items():
        if not isinstance(value, _REPLY_TYPES[key]) or (key in ("ok", "tamper") and type(value) is not bool):
            raise ProtocolError(f"worker reply: {key} is a {type(value).__name__}")
    if "ok" not in known:
        raise ProtocolError("worker reply: no ok")
    reply = WorkerReply(**known)
    if not all(isinstance(x, dict) for x in reply.launches) or not all(isinstance(x, dict) for x in reply.outputs.values()):
        raise ProtocolError("worker reply: launches and outputs must be objects")
    if not all(type(n) is int for n in reply.aten_ops.values()) or not all(isinstance(d, str) for d in reply.inputs.values()):
        raise ProtocolError("worker reply: aten op counts must be integers and input digests text")
    if not all(isinstance(d, dict) for d in reply.state.values()):
        raise ProtocolError("worker reply: state entries must be tensor descriptions")
    return reply
