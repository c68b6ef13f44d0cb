"""A trace file's bytes: read within the bounds (ingest/limits.py), content-addressed, inflated a step at a time."""

from __future__ import annotations

import gc
import hashlib
import zlib
from contextlib import contextmanager
from pathlib import Path

from ingest.limits import LIMIT_BYTES_ENV, limits
from ingest.plain import plain

try:  # ISA-L's inflate: the same output and checks as zlib's in a fraction of its CPU time
    from isal import isal_zlib
except ImportError:  # zlib is the plain path, and the one where the wheel is missing
    isal_zlib = None


class TraceError(ValueError):
    """A trace file that cannot be read, with the file and the problem named."""

    def __init__(self, path: str | Path, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem


def is_url(name: str | Path | None) -> bool:
    """Whether a trace (or store) is named by an fsspec URL (s3://..., file://..., fsspec's chained a::b) rather
    than a path; a Path never is one (it would have folded the URL's `//`)."""
    return isinstance(name, str) and ("://" in name or "::" in name)


def trace_name(name: str | Path) -> str | Path:
    """A trace file's name as the readers take it: a Path, or the URL string as given."""
    return name if is_url(name) else Path(name)


def _fs(url: str):
    import fsspec

    return fsspec.core.url_to_fs(url)


def read_file(name: str | Path) -> bytes:
    """The bytes of a file named by a path or an fsspec URL (workers read traces from shared storage so)."""
    if is_url(name):
        fs, path = _fs(name)
        return fs.cat_file(path)
    return Path(name).read_bytes()


def file_exists(name: str | Path) -> bool:
    """Whether a file named by a path or an fsspec URL exists."""
    if is_url(name):
        fs, path = _fs(name)
        return fs.isfile(path)
    return Path(name).is_file()


def file_size(name: str | Path) -> int:
    """The size in bytes of a file named by a path or an fsspec URL."""
    if is_url(name):
        fs, path = _fs(name)
        return fs.size(path)
    return Path(name).stat().st_size


def within_folder(relative: str) -> bool:
    """Whether a relative name (a glob, a file named by a sidecar) stays inside the folder it is relative to:
    not absolute, no drive, no URL, no `..` part (either slash)."""
    parts = relative.replace("\\", "/").split("/")
    return bool(relative) and not (relative.startswith(("/", "\\", "~")) or ".." in parts or "://" in relative
                                   or "::" in relative or relative[1:2] == ":")


def sibling(name: str | Path, *parts: str) -> str | Path:
    """The file at `parts` under the folder of `name` (a path or an fsspec URL)."""
    if is_url(name):
        return "/".join([name.rsplit("/", 1)[0], *parts])
    return Path(name).parent.joinpath(*parts)


def list_profiles(url: str, is_profile) -> list[str] | None:
    """The files under the folder at `url` that `is_profile` takes (given each one's path relative to the
    folder), as URLs, sorted; None when `url` is not a folder."""
    fs, root = _fs(url)
    if not fs.isdir(root):
        return None
    root = root.rstrip("/")
    return [fs.unstrip_protocol(f) for f in sorted(fs.find(root)) if is_profile(f[len(root) + 1:])]


def trace_id_of(raw: bytes) -> str:
    """The content address of a trace file: first 16 hex digits of its sha256."""
    return hashlib.sha256(raw).hexdigest()[:16]


_READ_BLOCK = 4 * 2**20


def file_trace_id(name: str | Path) -> str:
    """trace_id_of the file's bytes, read a block at a time (a file of any size costs a block of memory)."""
    digest = hashlib.sha256()
    if is_url(name):
        fs, path = _fs(name)
        opened = fs.open(path, "rb")
    else:
        opened = open(name, "rb")
    with opened as f:
        while block := f.read(_READ_BLOCK):
            digest.update(block)
    return digest.hexdigest()[:16]


def read_trace_file(name: str | Path) -> bytes:
    """The bytes of a trace file, or a TraceError naming it when it cannot be read or is larger than a trace's
    text may be (limits().max_text_bytes: gzip never shrinks a text below its own size by much)."""
    try:
        check_file_size(name)
        return read_file(name)
    except OSError as exc:
        raise TraceError(name, f"cannot read ({exc.strerror or exc})") from None


def check_file_size(name: str | Path) -> None:
    """A TraceError naming the file when it is larger than a trace's text may be (limits().max_text_bytes)."""
    size = file_size(name)
    if size > limits().max_text_bytes:
        raise TraceError(name, f"file of {size} bytes, over the bound on a trace's text "
                               f"({limits().max_text_bytes} bytes; {LIMIT_BYTES_ENV} raises it)")


_GZIP_MAGIC = b"\x1f\x8b"
CHUNK_BYTES = 16 * 2**20  # text inflated per step: ISA-L inflates 16 MB steps in a third of the time of one buffer


def _decompressor():
    # ISA-L's inflate (the same output and checks as zlib's, in a fraction of its CPU time) where installed and
    # the fast paths are on; zlib's is the plain one.
    return (isal_zlib if isal_zlib is not None and not plain() else zlib).decompressobj(wbits=31)


def inflate_chunks(path: str | Path, raw: bytes, limit: int | None = None):
    """The JSON text of a trace file's bytes in steps of at most CHUNK_BYTES (one step: the bytes themselves when
    they are not gzip), every gzip member in turn, each member's CRC and size checked; a TraceError naming the
    file and the bound once the text passes `limit` bytes (default: limits().max_text_bytes), before more of it
    is inflated."""
    limit = limits().max_text_bytes if limit is None else limit
    if raw[:2] != _GZIP_MAGIC:
        if len(raw) > limit:
            raise TraceError(path, _over_text_limit(limit))
        yield raw
        return
    total = 0
    data = memoryview(raw)
    try:
        while True:
            inflater = _decompressor()
            while True:
                text = inflater.decompress(data, CHUNK_BYTES)
                total += len(text)
                if total > limit:
                    raise TraceError(path, _over_text_limit(limit))
                if text:
                    yield text
                data = inflater.unconsumed_tail
                if inflater.eof or (not data and not text):
                    break
            if not inflater.eof:
                raise TraceError(path, "truncated or corrupt gzip (the stream ends before its last member does)")
            data = inflater.unused_data.lstrip(b"\0")  # gzip pads members with zeros now and then
            if not data:
                return
            if data[:2] != _GZIP_MAGIC:
                raise TraceError(path, "truncated or corrupt gzip (bytes after the last member are not gzip)")
    except _INFLATE_ERRORS as exc:
        raise TraceError(path, f"truncated or corrupt gzip ({exc})") from None


_INFLATE_ERRORS = (zlib.error, isal_zlib.error) if isal_zlib is not None else (zlib.error,)


def is_plain_local(name: str | Path) -> bool:
    """A local trace file whose bytes are its JSON text (not gzip): read_kineto streams it from the file."""
    if is_url(name):
        return False
    with open(name, "rb") as f:
        return f.read(2) != _GZIP_MAGIC


def file_chunks(path: str | Path, limit: int | None = None):
    """The text of a plain (not gzip) local trace file in blocks of at most CHUNK_BYTES, read as they are decoded, so
    a plain file costs a block of memory, not its size; a TraceError naming the file once it passes `limit` bytes
    (default: limits().max_text_bytes)."""
    limit = limits().max_text_bytes if limit is None else limit
    total = 0
    try:
        check_file_size(path)
        with open(path, "rb") as f:
            while block := f.read(CHUNK_BYTES):
                total += len(block)
                if total > limit:
                    raise TraceError(path, _over_text_limit(limit))
                yield block
    except OSError as exc:
        raise TraceError(path, f"cannot read ({exc.strerror or exc})") from None


def _over_text_limit(limit: int) -> str:
    return (f"inflates to more than {limit} bytes of JSON, the bound on a trace's text "
            f"({LIMIT_BYTES_ENV} raises it; docs/bad-input.md)")


def text_head(path: str | Path, raw: bytes, n: int = 256) -> bytes:
    """The first `n` bytes of a trace file's text (to tell formats apart); b"" where they cannot be inflated."""
    if raw[:2] != _GZIP_MAGIC:
        return raw[:n]
    try:
        return zlib.decompressobj(wbits=31).decompress(raw[:65536], n)
    except zlib.error:
        return b""


def decompress(path: str | Path, raw: bytes, limit: int | None = None) -> bytes:
    """The JSON text of a trace file's bytes, gunzipped when they are gzip (inflate_chunks, joined)."""
    chunks = list(inflate_chunks(path, raw, limit))
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


ROCPROF_JSON_KEY = "rocprofiler-sdk-tool"  # the top-level key of rocprofv3's JSON output


def is_rocprof_json(head: bytes) -> bool:
    """True when the first bytes of a (decompressed) JSON document are rocprofv3's, not a Chrome trace."""
    return b'"' + ROCPROF_JSON_KEY.encode() + b'"' in head[:256]


@contextmanager
def gc_paused():
    """Cyclic GC off while a trace is read: its objects form no cycles, and the collector's passes
    over hundreds of thousands of young event objects cost a quarter of the reading time."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
