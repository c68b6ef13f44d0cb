"""Keyed problem ids: HMAC-SHA256 of the canonical problem under a per-lineage secret."""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
from pathlib import Path

KEY_ENV = "HOTSHAPE_RELEASE_KEY"
KEY_FILE = "sealed/problem_id.key"  # relative to the release root
ID_PREFIX = "p"
ID_HEX = 16  # 64 bits: collisions among a few thousand problems are ~1e-13, and build checks anyway
MIN_KEY_BYTES = 16


class ProblemKeyError(ValueError):
    """The problem-id key is missing or malformed; the message says where it was looked for."""


def canonical_json(value) -> str:
    """Canonical JSON: sorted keys, no spaces, shortest float repr; NaN/Inf refused."""

    def check(v):
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"non-finite number {v!r} cannot be part of a problem")
        if isinstance(v, dict):
            for x in v.values():
                check(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                check(x)

    check(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_problem(operator: str, init_kwargs: dict | None, input_kwargs: dict | None,
                      dtypes: dict | None) -> str:
    """The canonical text of a problem: operator + kwargs + dtypes (absent kwargs are {})."""
    if not operator:
        raise ValueError("a problem needs an operator name")
    return canonical_json(
        {
            "operator": operator,
            "init_kwargs": init_kwargs or {},
            "input_kwargs": input_kwargs or {},
            "dtypes": dtypes or {},
        }
    )


def problem_id(key: bytes, canonical: str) -> str:
    """The keyed id of one canonical problem: 'p' + 16 hex digits of HMAC-SHA256."""
    if len(key) < MIN_KEY_BYTES:
        raise ProblemKeyError(f"problem-id key has {len(key)} bytes; at least {MIN_KEY_BYTES} needed")
    digest = hmac.new(key, canonical.encode("utf-8"), hashlib.sha256).hexdigest()
    return ID_PREFIX + digest[:ID_HEX]


def assign_ids(key: bytes, canonicals: list[str]) -> list[str]:
    """Ids for many canonical problems; raises on a (vanishingly unlikely) collision."""
    ids = [problem_id(key, c) for c in canonicals]
    seen: dict[str, str] = {}
    for pid, c in zip(ids, canonicals):
        if pid in seen and seen[pid] != c:
            raise ValueError(f"problem id collision on {pid}; use a longer id")
        seen[pid] = c
    return ids


def parse_key(text: str, where: str) -> bytes:
    """A key from its hex text; `where` names the file or variable it came from."""
    try:
        key = bytes.fromhex(text.strip())
    except ValueError as exc:
        raise ProblemKeyError(f"{where}: the problem-id key must be hex digits") from exc
    if len(key) < MIN_KEY_BYTES:
        raise ProblemKeyError(f"{where}: the problem-id key has {len(key)} bytes; at least {MIN_KEY_BYTES}")
    return key


def derive_key(*inputs: bytes) -> bytes:
    """A key derived from the content of the build's inputs.

    Used only when no key is supplied, so that building twice from the same inputs gives the same
    bytes; it is as secret as the inputs (the traces) are. Set HOTSHAPE_RELEASE_KEY for a key that
    does not depend on them.
    """
    h = hashlib.sha256(b"hotshape problem-id key v1\0")
    for item in inputs:
        h.update(hashlib.sha256(item).digest())
    return h.digest()


def resolve_key(explicit: bytes | str | None = None, release: str | Path | None = None,
                derive_from: tuple[bytes, ...] = ()) -> tuple[bytes, str]:
    """The key and where it came from.

    Explicit > the release's own key file (the lineage's key wins over the environment, so a
    refresh cannot silently renumber) > $HOTSHAPE_RELEASE_KEY > derived from `derive_from`.
    """
    if explicit is not None:
        key = parse_key(explicit, "key argument") if isinstance(explicit, str) else bytes(explicit)
        return key, "argument"
    path = Path(release) / KEY_FILE if release is not None else None
    if path is not None and path.exists():
        return parse_key(path.read_text(), str(path)), "release"
    env = os.environ.get(KEY_ENV)
    if env:
        return parse_key(env, f"${KEY_ENV}"), "environment"
    if path is not None:
        raise ProblemKeyError(f"{path}: no problem-id key in the release and ${KEY_ENV} is not set")
    if not derive_from:
        raise ProblemKeyError(f"no problem-id key: pass one or set ${KEY_ENV}")
    return derive_key(*derive_from), "derived"
