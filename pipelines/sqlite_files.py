"""A sqlite Dagster instance's files held open while `hotshape run-pipeline` writes to them.

Dagster's sqlite storages open a new connection for every event they store (one to the run's own file, one to the
cross-run index) and close it afterwards. The files are in WAL mode, and SQLite checkpoints the WAL into the
database and deletes it whenever the last connection to a file closes: every event then pays two checkpoints and a
new WAL, each with its fsync (18-34 ms per connection measured on the project's machine, ~60 ms per event).

While `held(directory)` is open, every sqlite file under `directory` that Dagster connects to gets:
- one more connection of ours, idle and outside any transaction, so that Dagster's connections are never the
  last and the WAL lives on between them (SQLite: "when the last connection to a database closes, that
  connection does a checkpoint and then deletes the WAL"); Dagster's webserver and daemon read and write beside it
  as before;
- `PRAGMA synchronous=NORMAL` on each of Dagster's connections (SQLAlchemy's "connect" event, the pattern its
  sqlite dialect documents for pragmas): in WAL mode a commit is then not synced on its own, only at checkpoints;
  the database cannot be corrupted by a crash, and what a power loss can cost is the last commits of a run,
  which the next run-pipeline repeats (a partition with no materialisation is ingested again).

On leaving, our connections close and the last one checkpoints the WAL into each database, as Dagster's would.
A Postgres instance is untouched (no sqlite file is connected to).
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path


class _Held:
    """Our idle connection per database file, opened on Dagster's first connection to it."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.lock = threading.Lock()
        self.connections: dict[str, sqlite3.Connection] = {}
        self.in_wal: set[str] = set()

    def on_connect(self, dbapi_connection, connection_record) -> None:
        if not isinstance(dbapi_connection, sqlite3.Connection):
            return
        rows = dbapi_connection.execute("PRAGMA database_list").fetchall()
        path = next((file for _, name, file in rows if name == "main"), "")
        if not path or not Path(path).is_relative_to(self.directory):
            return
        dbapi_connection.execute("PRAGMA synchronous=NORMAL")
        with self.lock:
            if path in self.in_wal:
                return
            held = self.connections.get(path)
            if held is None:
                held = self.connections[path] = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                                                                timeout=30)
            # our connection shares the WAL once it has read the file in WAL mode (Dagster switches a new file
            # to WAL on its first connection, after this one opened; the pragma answers from the last read)
            held.execute("SELECT count(*) FROM sqlite_master").fetchall()
            if held.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
                self.in_wal.add(path)

    def close(self) -> None:
        with self.lock:
            for connection in self.connections.values():
                connection.close()
            self.connections.clear()


@contextmanager
def held(directory):
    """While open, sqlite files under `directory` stay open between Dagster's connections, which commit with
    synchronous=NORMAL (the module's docstring says why)."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    state = _Held(Path(directory).resolve())
    event.listen(Engine, "connect", state.on_connect)
    try:
        yield state
    finally:
        event.remove(Engine, "connect", state.on_connect)
        state.close()
