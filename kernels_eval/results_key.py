"""The evaluation host's results key and the HMAC-SHA256 signature of each results row.

The key lives outside any candidate's reach (never in a release, a results directory or the worker's
environment): one per evaluation host, `results.key` under `$HOTSHAPE_KEY_DIR`, else
`$XDG_CONFIG_HOME/hotshape`, else `~/.config/hotshape`; created on first use with mode 0600. A row's
signature covers every RESULTS column but `signature` itself, as canonical JSON (sorted keys, values
normalised to the column's type), so a changed time, roofline, release or key id breaks it.
Standard library only: the evaluator runs on GPU machines with neither polars nor extra packages.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import secrets
import time
from dataclasses import dataclass
from datetime import timezone
from pathlib import Path

KEY_FILE = "results.key"
KEY_BYTES = 32
SIGNATURE = "signature"
KEY_ID = "key_id"


@dataclass(frozen=True)
class HostKey:
    """The host's results key and where it lives; `key_id` is a fingerprint, safe to publish."""

    path: Path
    secret: bytes

    @property
    def key_id(self) -> str:
        return hashlib.sha256(b"hotshape-results-key-id\0" + self.secret).hexdigest()[:16]


def key_dir() -> Path:
    """The directory holding the host's results key."""
    if os.environ.get("HOTSHAPE_KEY_DIR"):
        return Path(os.environ["HOTSHAPE_KEY_DIR"])
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "hotshape"


def host_key(create: bool = True) -> HostKey:
    """The host's results key, created (mode 0600) when absent and `create`; FileNotFoundError otherwise."""
    path = key_dir() / KEY_FILE
    if create and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            # O_EXCL: two evaluators starting at once on a new host agree on one key (the loser reads it).
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_hex(KEY_BYTES) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
    for _ in range(100):  # the winner of O_EXCL may not have written its key yet
        text = path.read_text().strip()
        if len(text) == 2 * KEY_BYTES:
            break
        time.sleep(0.01)
    else:
        raise ValueError(f"{path}: not a results key (expected {2 * KEY_BYTES} hex digits)")
    return HostKey(path=path, secret=bytes.fromhex(text))


def _normal(value, type_name: str):
    if value is None:
        return None
    if type_name == "double":
        value = float(value)
        return repr(value) if not math.isfinite(value) else value  # NaN/inf are not JSON
    if type_name == "int32":
        return int(value)
    if type_name == "bool":
        return bool(value)
    if type_name.startswith("list"):
        return [str(x) for x in value]
    if type_name.startswith("timestamp"):  # the text a row was signed with before the column was typed
        from kernels_eval.results_schema import timestamp  # pyarrow's: this module stays standard library only

        return timestamp(value).astimezone(timezone.utc).isoformat(timespec="seconds")
    return str(value)


def canonical(row: dict, columns: list[tuple[str, str]]) -> bytes:
    """The signed bytes of a row: every (column, arrow type name) but the signature, as canonical JSON."""
    from kernels_eval.results_schema import SIGNED_WHEN_SET  # pyarrow's: this module stays standard library only

    content = {name: _normal(row.get(name), type_name) for name, type_name in columns if name != SIGNATURE
               and not (name in SIGNED_WHEN_SET and row.get(name) is None)}
    return json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _columns() -> list[tuple[str, str]]:
    from kernels_eval.results_schema import RESULTS  # pyarrow's: this module stays standard library only

    return [(f.name, str(f.type).split("<")[0]) for f in RESULTS]


def sign_row(row: dict, key: HostKey) -> dict:
    """The row with its key id and signature filled in."""
    row = dict(row, **{KEY_ID: key.key_id})
    row[SIGNATURE] = hmac.new(key.secret, canonical(row, _columns()), hashlib.sha256).hexdigest()
    return row


def row_verifies(row: dict, key: HostKey) -> bool:
    """Whether the row carries this host key's id and a signature matching its content."""
    signature = row.get(SIGNATURE)
    if not isinstance(signature, str) or row.get(KEY_ID) != key.key_id:
        return False
    expected = hmac.new(key.secret, canonical(row, _columns()), hashlib.sha256).hexdigest()
    return hmac.compare_digest(signature, expected)
