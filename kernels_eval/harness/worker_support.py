"""What the worker's command modules (harness/worker.py, harness/worker_gpu.py) share: a command's autotuning pins,
the candidate's return value as named outputs, and the error that marks tampering."""

from __future__ import annotations

from kernels_eval.harness import autotune_pins


def pin(pins: dict) -> None:
    """Pin the configurations a command names (kernel -> key -> index: autotune_pins.PINS), none when it names none."""
    autotune_pins.PINS.clear()
    for kernel, keys in (pins or {}).items():
        autotune_pins.PINS[str(kernel)] = {str(k): int(i) for k, i in keys.items()}


class TamperError(RuntimeError):
    """The candidate patched a function the evaluation relies on."""


def as_named(out, names: tuple[str, ...], torch) -> dict:
    """The candidate's return value as {output name: plain torch.Tensor}, or a TypeError saying what is wrong."""
    if isinstance(out, dict):
        missing = [n for n in names if n not in out]
        if missing:
            raise TypeError(f"returned dict lacks outputs {missing}")
        named = {n: out[n] for n in names}
    elif isinstance(out, (tuple, list)):
        if len(out) != len(names):
            raise TypeError(f"returned {len(out)} values; the operator has outputs {list(names)}")
        named = dict(zip(names, out))
    else:
        if len(names) != 1:
            raise TypeError(f"returned one value; the operator has outputs {list(names)}")
        named = {names[0]: out}
    for n, t in named.items():
        if type(t) is not torch.Tensor:
            raise TypeError(f"output {n!r} is a {type(t).__module__}.{type(t).__name__}, not a plain torch.Tensor")
    return named
