"""A trace file's bytes: its content address, and its text gunzipped on a worker thread."""

from __future__ import annotations

import gzip
import hashlib
import struct
import threading
import zlib
from pathlib import Path

try:  # ISA-L's inflate: the same output and checks as zlib's in ~60% of its CPU time (a trace's gunzip: 4.4 -> 2.5 ms)
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


_DEFLATE_MAX_RATIO = 1032  # deflate cannot expand its input more than this
_GZIP_MAGIC = b"\x1f\x8b\x08"  # ID1, ID2 and CM (deflate, the one method) that every gzip member begins with


def zlib_inflate(raw: bytes, size: int) -> bytes:
    """The text of a gzip file's first member, into a buffer of `size` bytes (the trailer's size), by zlib."""
    return zlib.decompress(raw, wbits=31, bufsize=max(size, 1))


def isal_inflate(raw: bytes, size: int) -> bytes:
    """zlib_inflate by ISA-L: one member, its CRC and size checked, as zlib does (tests/ingest/test_kineto.py)."""
    return isal_zlib.decompress(raw, wbits=31, bufsize=max(size, 1))


# The inflate decompress uses, and the errors it raises on a damaged stream.
inflate, INFLATE_ERRORS = ((isal_inflate, (zlib.error, isal_zlib.error)) if isal_zlib is not None
                           else (zlib_inflate, (zlib.error,)))


def decompress(path: Path, raw: bytes) -> bytes:
    """The JSON text of a trace file's bytes, gunzipped when they are gzip."""
    if raw[:2] != b"\x1f\x8b":
        return raw
    # The gzip trailer holds the text's size (mod 2**32): inflating into a buffer of exactly that
    # size takes 2/3 of gzip.decompress's time and no second copy of the text. zlib checks the
    # first member's own CRC and size and stops after it, so the file's last trailer must be that
    # member's: no second member can start where the gzip magic occurs nowhere after the header;
    # else the text's CRC must match the last trailer's too (0.02 s for 82 MB, found in a
    # compressed file now and then). Anything else (several members, a damaged file whose
    # "trailer" is noise) goes the general way. The one case this cannot tell apart is a file
    # whose members all hold the same text: it reads as one copy of that text. Checking for it
    # (zlib.decompressobj's unused_data) costs half again the inflate time.
    crc, size = struct.unpack("<II", raw[-8:]) if len(raw) >= 8 else (None, 0)
    if size <= len(raw) * _DEFLATE_MAX_RATIO:
        try:
            text = inflate(raw, size)
            if len(text) % 2**32 == size and (raw.find(_GZIP_MAGIC, 10) < 0 or zlib.crc32(text) == crc):
                return text
        except (*INFLATE_ERRORS, MemoryError):
            pass
    try:
        return gzip.decompress(raw)
    except (EOFError, OSError, zlib.error) as exc:
        raise TraceError(path, f"truncated or corrupt gzip ({exc})") from None


ROCPROF_JSON_KEY = "rocprofiler-sdk-tool"  # the top-level key of rocprofv3's JSON output


def is_rocprof_json(head: bytes) -> bool:
    """True when the first bytes of a (decompressed) JSON document are rocprofv3's, not a Chrome trace."""
    return b'"' + ROCPROF_JSON_KEY.encode() + b'"' in head[:256]


class TraceBytes:
    """A trace file being read, content-addressed and gunzipped on a worker thread.

    zlib and sha256 release the GIL, so the caller's thread can do other work meanwhile (a fresh
    process imports numpy, polars and pyarrow while its first trace is gunzipped: see
    pipeline.read_events).
    """

    def __init__(self, path: str | Path, start_helper=None):
        self.path = trace_name(path)
        # ingest.kineto_split.start_helper: called with the text once gunzipped, for a helper process that
        # decodes the trace's GPU side meanwhile (kept in _helper for the reader)
        self._start_helper = start_helper
        self._helper = None
        self._outcome: tuple[str, bytes] | Exception | None = None
        self._trace_id: str | None = None
        self._hashed = threading.Event()  # set once the bytes are hashed (or reading failed), before the gunzip
        self._worker = threading.Thread(target=self._load, name="trace-bytes", daemon=True)
        self._worker.start()

    def _load(self) -> None:
        try:
            try:
                raw = read_file(self.path)
            except OSError as exc:
                raise TraceError(self.path, f"cannot read ({exc.strerror or exc})") from None
            self._trace_id = trace_id_of(raw)
            self._hashed.set()
            text = decompress(self.path, raw)
            if self._start_helper is not None:
                self._helper = self._start_helper(text)
            self._outcome = (self._trace_id, text)
        except Exception as exc:  # raised again in the caller's thread by result()
            self._outcome = exc
        finally:
            self._hashed.set()

    def trace_id(self) -> str | None:
        """The file's trace id as soon as its bytes are hashed (the gunzip may still run); None if reading failed."""
        self._hashed.wait()
        return self._trace_id

    def head(self, n: int = 256) -> bytes:
        """The first `n` bytes of the decompressed text (to tell formats apart); b"" if reading failed."""
        self._worker.join()
        return b"" if isinstance(self._outcome, Exception) or self._outcome is None else self._outcome[1][:n]

    def take_helper(self):
        """The helper process started for this file once read (the reader that takes it answers for it), or None;
        call after result()."""
        helper, self._helper = self._helper, None
        return helper

    def drop_helper(self) -> None:
        """Stop the helper process, where one was started and no reader took it (none is started after this)."""
        self._start_helper = None
        self._worker.join()
        helper = self.take_helper()
        if helper is not None:
            helper.cancel()

    def result(self) -> tuple[str, bytes]:
        """The file's trace id and JSON text, once read; the worker's error is raised here."""
        self._worker.join()
        outcome, self._outcome = self._outcome, None  # the caller owns the text from here on
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


# A trace whose reading started before the frame libraries were imported (`hotshape ingest` of one
# file: its gunzip overlaps the imports of polars and the store), taken by the reader that needs it.
_PREFETCHED: dict[str, TraceBytes] = {}


def prefetch(path: str | Path, split: bool = False) -> None:
    """Start reading `path` now; the next `take(path)` gets it. With `split`, a large local Kineto trace also gets
    a helper process that decodes its GPU side on another core (ingest/kineto_split.py): for a process that
    reads this one trace alone."""
    start_helper = None
    if split and str(path).endswith((".json", ".json.gz")):
        from ingest.kineto_split import start_helper  # imported here: the helper it forks imports nothing
    _PREFETCHED[str(path)] = TraceBytes(path, start_helper)


def prefetched_id(path: str | Path) -> str | None:
    """The trace id of `path` from its prefetch (read once, hashed on the worker thread), or None when
    it was not prefetched or could not be read."""
    trace_bytes = _PREFETCHED.get(str(path))
    return trace_bytes.trace_id() if trace_bytes is not None else None


def take(path: str | Path) -> TraceBytes:
    """The trace being read for `path`: the prefetched one, else a fresh read."""
    return _PREFETCHED.pop(str(path), None) or TraceBytes(path)


def drop_prefetched() -> None:
    """Forget prefetched traces no reader took (a trace the store already held), and stop their helpers."""
    for trace_bytes in _PREFETCHED.values():
        trace_bytes.drop_helper()
    _PREFETCHED.clear()
