"""The base of the agent side's typed records: msgspec Structs where msgspec is installed, the same classes
as stdlib dataclasses where it is not (the GPU machine has no msgspec, and the optimize loop runs there)."""

from __future__ import annotations

import dataclasses

try:
    import msgspec

    Struct = msgspec.Struct
    field = msgspec.field

    def as_builtins(record) -> dict:
        """The record (and the records inside it) as plain dicts, lists and scalars."""
        return msgspec.to_builtins(record)

except ImportError:  # the GPU machine: torch, triton, numpy, pyarrow and pyyaml only
    msgspec = None
    field = dataclasses.field

    class Struct:  # type: ignore[no-redef]
        """Stands in for msgspec.Struct: each subclass becomes a keyword-only dataclass."""

        def __init_subclass__(cls, kw_only: bool = False, **kwargs) -> None:
            super().__init_subclass__()
            dataclasses.dataclass(cls, kw_only=kw_only)

    def as_builtins(record) -> dict:  # type: ignore[misc]
        """The record (and the records inside it) as plain dicts, lists and scalars."""
        return dataclasses.asdict(record)
