"""A polars frame's Arrow schema with described fields, for polars' Parquet writer, without pyarrow.

`DataFrame.write_parquet(arrow_schema=...)` takes any object with `__arrow_c_schema__` (the Arrow
PyCapsule interface). Building it with pyarrow (ingest.field_metadata.frame_schema) imports pyarrow
and numpy: ~0.1 s of every `hotshape ingest`, which otherwise needs neither. This module fills the
Arrow C data interface's ArrowSchema structs itself (ctypes), for the dtypes the ingest tables hold;
`export` answers None for any other, and the caller goes the pyarrow way. Oracle:
tests/ingest/test_fast_paths.py (the same Parquet bytes as with pyarrow's schema, for every table).
"""

from __future__ import annotations

import ctypes
import struct

import polars as pl

# Arrow C data interface format strings of the Arrow types polars writes (large strings and lists).
_FORMATS = {pl.String: b"U", pl.Int64: b"l", pl.Int32: b"i", pl.Boolean: b"b", pl.Float64: b"g", pl.UInt32: b"I"}
_NULLABLE = 2  # ARROW_FLAG_NULLABLE


class _ArrowSchema(ctypes.Structure):
    pass


_RELEASE = ctypes.CFUNCTYPE(None, ctypes.POINTER(_ArrowSchema))
_ArrowSchema._fields_ = [
    ("format", ctypes.c_char_p),
    ("name", ctypes.c_char_p),
    ("metadata", ctypes.c_char_p),
    ("flags", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("children", ctypes.POINTER(ctypes.POINTER(_ArrowSchema))),
    ("dictionary", ctypes.POINTER(_ArrowSchema)),
    ("release", _RELEASE),
    ("private_data", ctypes.c_void_p),
]


@_RELEASE
def _release(schema) -> None:
    # The structs are owned by the DescribedSchema that made them; the consumer's release only marks its copy.
    schema.contents.release = _RELEASE()


_capsule = ctypes.pythonapi.PyCapsule_New
_capsule.restype = ctypes.py_object
_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def _metadata(pairs: list[tuple[bytes, bytes]]) -> bytes | None:
    if not pairs:
        return None
    out = [struct.pack("=i", len(pairs))]
    for key, value in pairs:
        out += [struct.pack("=i", len(key)), key, struct.pack("=i", len(value)), value]
    return b"".join(out)


class DescribedSchema:
    """The Arrow schema of a frame's columns, each field with its description and unit as metadata."""

    def __init__(self, fields: list[tuple[str, bytes, bytes | None, dict]]):
        self._keep: list = []  # every struct, string and array the exported pointers refer to
        self._root = self._struct(b"+s", b"", None, [self._field(*f) for f in fields], flags=0)

    def _struct(self, fmt: bytes, name: bytes, metadata: bytes | None, children: list, flags: int = _NULLABLE):
        node = _ArrowSchema()
        pointers = (ctypes.POINTER(_ArrowSchema) * len(children))(*[ctypes.pointer(c) for c in children])
        strings = [ctypes.create_string_buffer(fmt), ctypes.create_string_buffer(name)]
        node.format, node.name = ctypes.cast(strings[0], ctypes.c_char_p), ctypes.cast(strings[1], ctypes.c_char_p)
        if metadata is not None:
            strings.append(ctypes.create_string_buffer(metadata, len(metadata)))
            node.metadata = ctypes.cast(strings[-1], ctypes.c_char_p)
        node.flags, node.n_children, node.children, node.release = flags, len(children), pointers, _release
        self._keep += [node, pointers, strings]
        return node

    def _field(self, name: str, fmt: bytes, child: bytes | None, described: dict):
        children = [self._struct(child, b"item", None, [])] if child is not None else []
        pairs = [(k.encode(), v.encode()) for k, v in described.items()]
        return self._struct(fmt, name.encode(), _metadata(pairs), children)

    def __arrow_c_schema__(self):
        return _capsule(ctypes.addressof(self._root), b"arrow_schema", None)


def export(frame: pl.DataFrame, columns: dict[str, tuple[str, str]]) -> DescribedSchema | None:
    """`frame`'s schema described from `columns` ({column: (description, unit)}, as field_metadata.described
    takes them), or None when a column's dtype is not one this module spells (the caller then uses pyarrow)."""
    from ingest.field_metadata import UNITS

    fields = []
    for name, dtype in frame.schema.items():
        if name not in columns:
            raise KeyError(f"column {name!r} has no description")
        text, unit = columns[name]
        if unit not in UNITS:
            raise ValueError(f"column {name!r}: unit {unit!r} is not one of {UNITS}")
        base = dtype.base_type()
        if base in _FORMATS:
            fmt, child = _FORMATS[base], None
        elif base is pl.List and dtype.inner.base_type() in _FORMATS:
            fmt, child = b"+L", _FORMATS[dtype.inner.base_type()]
        else:
            return None
        fields.append((name, fmt, child, {"description": text, "unit": unit}))
    return DescribedSchema(fields)


def described_schema(frame: pl.DataFrame, columns: dict[str, tuple[str, str]]):
    """What `frame.write_parquet(arrow_schema=...)` takes to describe its columns from `columns`: built here,
    else (a dtype this module does not spell) by pyarrow."""
    schema = export(frame, columns)
    if schema is None:
        from ingest.field_metadata import frame_schema

        schema = frame_schema(frame, columns)
    return schema
