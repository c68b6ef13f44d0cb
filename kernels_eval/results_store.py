"""Where results rows go: a per-run journal beside the results file (one signed JSON line per judged problem,
fsync'd), merged into the results Parquet atomically under the file's lock; and the check of --out before a run.

The lock is `fcntl.flock` on `.NAME.lock` beside the results file: standard library (the GPU machine has no
`filelock`), released by the kernel when its holder dies, so a killed evaluator never leaves a stale lock; a
file of its own because the results file itself is replaced by rename. pyarrow only, like the evaluator.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from kernels_eval.results_schema import read_results, results_table
from kernels_eval.results_seal import read_seals, run_ident, sealed_document, with_seals

MIN_FREE_BYTES = 4 << 20  # a run's journal and results are tens of kB; a few MB leaves room for the merge
JOURNAL_FORMAT = "hotshape-results-journal/1"
# what a cut run must share with the one resuming it (file sha256s are checked row by row)
IDENTITY = ("submission", "release", "release_digest", "hardware", "device")


class ResultsWriteError(OSError):
    """Results cannot be written; the message names the file and what failed."""


def journal_dir(out: str | Path) -> Path:
    """The directory of the per-run journals of results file `out`."""
    out = Path(out)
    return out.with_name(out.name + ".journal")


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def check_out(out: str | Path) -> None:
    """Nothing, when results can be written to `out`: outside any release, its directory writable with
    room to spare, an existing file a readable results file; a ResultsWriteError naming what is wrong."""
    out = Path(out).absolute()
    for parent in out.parents:
        if (parent / "release.json").is_file():
            raise ResultsWriteError(f"{out}: inside the release {parent}; write results outside a release")
    directory = out.parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".{out.name}.probe-{os.getpid()}-{secrets.token_hex(4)}"
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, b"\0" * 4096)
            os.fsync(fd)
        finally:
            os.close(fd)
            probe.unlink(missing_ok=True)
    except OSError as exc:
        raise ResultsWriteError(f"{directory}: cannot write results there ({_why(exc)})") from exc
    size = out.stat().st_size if out.exists() else 0
    need = MIN_FREE_BYTES + 2 * size  # the merge writes a full copy beside the old file
    free = shutil.disk_usage(directory).free
    if free < need:
        raise ResultsWriteError(f"{directory}: {free / 2**20:.2f} MiB free, results need at least "
                                f"{need / 2**20:.2f} MiB")
    if size:
        try:
            read_results(out)
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise ResultsWriteError(f"{out}: not a readable results file ({exc})") from exc


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def locked(path: str | Path):
    """Holds the exclusive lock of results file `path` (waits for another writer to finish)."""
    path = Path(path)
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _key(row: dict) -> tuple:
    return tuple(row.get(c) for c in ("submission", "hardware", "run_id", "run", "problem_id"))


def write_results(rows: list[dict], path: str | Path, append: bool = True) -> pa.Table:
    """Write rows to `path` (after the rows already there when `append`) under the file's lock; the table
    written (see merge_rows)."""
    return merge_rows(rows, path, append=append)


def merge_rows(rows: list[dict], path: str | Path, append: bool = True, skip_present: bool = False,
               key=None) -> pa.Table:
    """The results table written to `path`: its rows (when `append`) then `rows`, written to a temporary
    name unique to this writer and renamed over it under the file's lock. `skip_present` leaves out rows
    already there (same submission, hardware, run and problem), as after a merge cut before its journal
    was removed. With `key` (the host's results key) the runs of `rows` are sealed anew over their rows in the
    file (results_seal.py); the seals of the file's other runs are kept as they were."""
    path = Path(path)
    table = results_table(rows)
    seals = {"runs": [], "files": {}}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ResultsWriteError(f"{path.parent}: cannot create the results directory ({_why(exc)})") from exc
    with locked(path):
        if append and path.exists():
            seals = read_seals(path)
            old = read_results(path)
            if skip_present:
                present = {_key(r) for r in old.select(["submission", "hardware", "run_id", "run",
                                                        "problem_id"]).to_pylist()}
                table = results_table([r for r in rows if _key(r) not in present])
            table = pa.concat_tables([old, table])
        if key is not None:
            everything = table.select(["submission", "hardware", "run_id", "run", "signature"]).to_pylist()
            seals = sealed_document(seals, everything, {run_ident(r) for r in rows}, key)
        if seals["runs"] or seals["files"]:
            table = with_seals(table, seals)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            pq.write_table(table, tmp, compression="zstd")
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, path)
            _fsync_dir(path.parent)
        except OSError as exc:
            raise ResultsWriteError(f"{path}: writing the results failed ({_why(exc)})") from exc
        finally:
            tmp.unlink(missing_ok=True)
    return table


class Journal:
    """One run's rows as they are judged: a header line, then one signed row per line, each fsync'd."""

    def __init__(self, path: Path, header: dict, rows: dict[str, dict]) -> None:
        self.path, self.header, self.rows = path, header, rows  # rows: problem_id -> row, in judged order

    @classmethod
    def create(cls, out: str | Path, header: dict) -> Journal:
        """A new journal for run `header['run_id']` of results file `out`."""
        path = journal_dir(out) / f"{header['run_id']}.jsonl"
        header = {"format": JOURNAL_FORMAT, **header}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                _write_all(fd, (json.dumps(header, sort_keys=True) + "\n").encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            _fsync_dir(path.parent)
        except OSError as exc:
            raise ResultsWriteError(f"{path}: cannot start the run's journal ({_why(exc)})") from exc
        return cls(path, header, {})

    @classmethod
    def resume(cls, out: str | Path, identity: dict, verifies) -> Journal | None:
        """The latest cut run of results file `out` made with this identity (IDENTITY keys), its rows that
        `verifies(row)`; None when there is none. A line torn by a kill is cut off."""
        found = []
        for path in sorted(journal_dir(out).glob("*.jsonl")):
            lines = path.read_bytes().split(b"\n")
            try:
                header = json.loads(lines[0])
            except ValueError:
                continue
            if header.get("format") == JOURNAL_FORMAT and all(header.get(k) == identity[k] for k in IDENTITY):
                found.append((path.stat().st_mtime, path, header, lines))
        if not found:
            return None
        _, path, header, lines = max(found, key=lambda f: (f[0], f[1].name))
        if lines[-1]:  # the last write did not finish: appending after it would corrupt the next line
            with open(path, "r+b") as fh:
                fh.truncate(sum(len(line) + 1 for line in lines[:-1]))
        rows = {}
        for line in lines[1:-1]:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and verifies(row) and row.get("run_id") == header["run_id"]:
                rows[row["problem_id"]] = row
        return cls(path, header, rows)

    def append(self, row: dict) -> dict:
        """The row, once it is on disk in the journal."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            try:
                _write_all(fd, (json.dumps(row, sort_keys=True) + "\n").encode())
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise ResultsWriteError(f"{self.path}: writing the row of {row.get('problem_id')} failed "
                                    f"({_why(exc)}); the {len(self.rows)} rows judged before it are kept "
                                    f"there: free the space and rerun with --resume") from exc
        self.rows[row["problem_id"]] = row
        return row

    def remove(self) -> None:
        """Delete the journal once its rows are in the results file."""
        self.path.unlink(missing_ok=True)
        try:
            self.path.parent.rmdir()
        except OSError:
            pass  # another run's journal is still there


def journal_runs(out: str | Path, submission: str, hardware: str) -> list[int]:
    """Run indices of the unmerged journals of `submission` on `hardware` beside results file `out` (runs in
    progress or cut), so that a run started beside them takes the next index."""
    runs = []
    for path in sorted(journal_dir(out).glob("*.jsonl")):
        try:
            with open(path, "rb") as fh:
                header = json.loads(fh.readline())
        except (OSError, ValueError):
            continue
        if header.get("submission") == submission and header.get("hardware") == hardware:
            runs.append(int(header.get("run", 0)))
    return runs


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
