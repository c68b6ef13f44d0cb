"""The parent's commands to the sandboxed worker (harness/worker.py), typed: one slots dataclass per command, sent
over the command pipe as a JSON object tagged with `cmd` (`encode_command`) and decoded strictly by the worker
(`decode_command`: an unknown command or field, a missing field or a value of the wrong type is a ProtocolError
naming it, which the worker answers as a failed reply). The worker's replies are protocol.WorkerReply. Plain
dataclasses, as in protocol.py: the GPU machine has no msgspec.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from kernels_eval.harness.protocol import ProtocolError


@dataclass(slots=True, kw_only=True)
class Warm:
    """Make the CUDA context and the profiler's first start ahead, before any candidate is imported."""

    device: str = "cpu"
    markers_cache: str | None = None


@dataclass(slots=True, kw_only=True)
class Init:
    """Import the candidate file (once per worker) and build Model(**init_kwargs); export its init-time state."""

    operator: str
    file: str
    device: str
    init_kwargs: dict
    outputs: list
    exchange: str
    cuda_ipc: bool = True
    gpu_memory_fraction: float | None = None
    autotune_bench_ms: list | None = None
    markers_cache: str | None = None


@dataclass(slots=True, kw_only=True)
class Call:
    """One judged call on inputs drawn from `seed`; `record` asks for its launch program, `tune` (GPU) for the
    untimed call before it, `pins` for autotuning configurations (kernel -> key -> index)."""

    input_kwargs: dict
    seed: int
    digest_key: int
    pins: dict = field(default_factory=dict)
    poison: bool = True
    record: bool = False
    tune: bool = False
    reuse_buffers: bool = False


@dataclass(slots=True, kw_only=True)
class Sweep:
    """One untimed call that reports which (kernel, key) its autotuners tuned (harness/autotune_sweep.py)."""

    input_kwargs: dict
    pins: dict = field(default_factory=dict)


@dataclass(slots=True, kw_only=True)
class Time:
    """The worker's own timing loop (harness/worker_gpu.py time_command; diagnostics: no parent sends it, no verdict reads it)."""

    input_kwargs: dict
    seed: int
    pins: dict = field(default_factory=dict)
    tune: bool = True
    max_sets: int = 8
    rotation_bytes: int = 2 << 30
    samples: int = 4
    sample_bytes: int = 1 << 30
    warmup: int = 3
    min_calls: int = 10
    max_calls: int = 200
    budget_s: float = 0.5
    warmup_s: float = 0.05


COMMANDS: dict[str, type] = {"warm": Warm, "init": Init, "call": Call, "sweep": Sweep, "time": Time}
NAMES: dict[type, str] = {cls: name for name, cls in COMMANDS.items()}
Command = Warm | Init | Call | Sweep | Time

# the JSON types each annotation admits (bool is not an int here, an int is a float)
_ADMITS: dict[str, tuple[type, ...]] = {
    "str": (str,), "str | None": (str, type(None)), "int": (int,), "bool": (bool,), "float": (int, float),
    "float | None": (int, float, type(None)), "dict": (dict,), "list": (list,), "list | None": (list, type(None)),
}


def name_of(command: Command) -> str:
    """The command's name on the pipe ("call", ...)."""
    return NAMES[type(command)]


def encode_command(command: Command) -> dict:
    """`command` as the JSON object the pipe carries: its fields and `cmd`, its name."""
    return {"cmd": name_of(command), **{f.name: getattr(command, f.name) for f in fields(command)}}


def decode_command(data: Any) -> Command:
    """The command in `data` (a JSON object from the pipe), or ProtocolError naming the first fault."""
    if not isinstance(data, dict):
        raise ProtocolError("command: not an object")
    cls = COMMANDS.get(data.get("cmd"))
    if cls is None:
        raise ProtocolError(f"command: unknown command {data.get('cmd')!r} (one of {', '.join(COMMANDS)})")
    name, given = data["cmd"], {k: v for k, v in data.items() if k != "cmd"}
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ProtocolError(f"command {name}: unknown fields {unknown}")
    for key, f in known.items():
        if key not in given:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ProtocolError(f"command {name}: no {key}")
            continue
        value, admits = given[key], _ADMITS[f.type]
        if not isinstance(value, admits) or (type(value) is bool and bool not in admits):
            raise ProtocolError(f"command {name}: {key} is a {type(value).__name__}, not {f.type}")
    return cls(**given)
