"""Sealed runs: each run's row count and a digest of its rows, signed with the host's results key, in the results
file's Parquet metadata; so a deleted or added row (or a whole run removed) is detected, not only an edited one.

Every row of a run is signed on its own as it is judged (results_key.py), which catches an edited row but not a
missing one: deleting a failing run's rows moved a score with no key. At the merge (results_store.merge_rows) the
evaluator writes, per run in the file (submission, hardware, run_id, run), a seal: the count of its rows and the
sha256 of their sorted signatures, HMAC-signed; and per key a file seal over its runs' seals, so a run removed with
its seal is missed too. Rows written by a sealing evaluator carry `run_sealed = true` in their signed content, so
stripping the metadata cannot pass them off as rows of an older, unsealed file. Standard library and pyarrow only
(the evaluator's GPU machine); docs/results.md says what `score` does with each outcome.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

SEALS_KEY = b"hotshape.run_seals"
FORMAT = "hotshape-run-seals/1"
RUN_KEY = ("submission", "hardware", "run_id", "run")


def run_ident(row: dict) -> tuple:
    """The run a row belongs to."""
    return tuple(row.get(c) for c in RUN_KEY)


def rows_digest(rows: list[dict]) -> str:
    """sha256 over the sorted signatures of a run's rows (each signature covers its row's whole content)."""
    h = hashlib.sha256()
    for signature in sorted(str(r.get("signature") or "") for r in rows):
        h.update(signature.encode() + b"\n")
    return h.hexdigest()


def _mac(secret: bytes, content: dict) -> str:
    data = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    return hmac.new(secret, b"hotshape-run-seal\0" + data, hashlib.sha256).hexdigest()


def make_seal(ident: tuple, rows: list[dict], key) -> dict:
    """The signed seal of run `ident` holding `rows`."""
    content = {**dict(zip(RUN_KEY, ident)), "rows": len(rows), "digest": rows_digest(rows), "key_id": key.key_id}
    return {**content, "signature": _mac(key.secret, content)}


def seal_verifies(seal: dict, key) -> bool:
    """Whether a seal was signed with `key` over its own content."""
    content = {k: v for k, v in seal.items() if k != "signature"}
    signature = seal.get("signature")
    return (seal.get("key_id") == key.key_id and isinstance(signature, str)
            and hmac.compare_digest(signature, _mac(key.secret, content)))


def _file_seal(seals: list[dict], key) -> str:
    return _mac(key.secret, {"runs": sorted(s["signature"] for s in seals if s.get("key_id") == key.key_id)})


def read_seals(path: str | Path) -> dict:
    """The seal document of a results file ({"runs": [...], "files": {key_id: mac}}); empty where it has none."""
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    raw = meta.get(SEALS_KEY)
    if raw is None:
        return {"format": FORMAT, "runs": [], "files": {}}
    try:
        doc = json.loads(raw)
    except ValueError:
        return {"format": FORMAT, "runs": [], "files": {}, "unreadable": True}
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list) or not isinstance(doc.get("files"), dict):
        return {"format": FORMAT, "runs": [], "files": {}, "unreadable": True}
    doc["runs"] = [s for s in doc["runs"] if isinstance(s, dict)]
    return doc


def sealed_document(old: dict, rows: list[dict], runs: set[tuple], key) -> dict:
    """`old` (a file's seal document) with the runs `runs` sealed anew over their rows among `rows` (the file's
    whole content after a merge), and `key`'s file seal made over its runs' seals."""
    by_run: dict[tuple, list[dict]] = {}
    for r in rows:
        ident = run_ident(r)
        if ident in runs:
            by_run.setdefault(ident, []).append(r)
    kept = [s for s in old.get("runs", []) if run_ident(s) not in runs]
    seals = kept + [make_seal(ident, by_run[ident], key) for ident in sorted(by_run, key=str)]
    files = {k: v for k, v in (old.get("files") or {}).items() if k != key.key_id}
    files[key.key_id] = _file_seal(seals, key)
    return {"format": FORMAT, "runs": seals, "files": files}


def with_seals(table, doc: dict):
    """`table` with the seal document in its schema metadata."""
    meta = dict(table.schema.metadata or {})
    meta[SEALS_KEY] = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return table.replace_schema_metadata(meta)


def broken_runs(rows: list[dict], doc: dict, key) -> dict[tuple, str]:
    """Runs of `rows` (the file's rows whose own signatures verify with `key`, each once) whose seal is missing,
    forged or disagrees with the rows there, each with the reason; runs with no seal and no sealed row (written
    before sealing) pass."""
    by_run: dict[tuple, list[dict]] = {}
    for r in rows:
        by_run.setdefault(run_ident(r), []).append(r)
    mine = [s for s in doc.get("runs", []) if s.get("key_id") == key.key_id]
    seals = {run_ident(s): s for s in mine}
    file_ok = (not mine and key.key_id not in (doc.get("files") or {})) or hmac.compare_digest(
        str((doc.get("files") or {}).get(key.key_id, "")), _file_seal(mine, key))
    broken = {}
    for ident, run_rows in by_run.items():
        seal = seals.get(ident)
        name = f"run {ident[2]} (run {ident[3]} of {ident[0]} on {ident[1]})"
        if seal is None:
            if any(r.get("run_sealed") for r in run_rows):
                broken[ident] = f"{name}: its rows are sealed but the file holds no seal of it"
            continue
        if not seal_verifies(seal, key):
            broken[ident] = f"{name}: its seal does not verify"
        elif seal.get("rows") != len(run_rows) or seal.get("digest") != rows_digest(run_rows):
            broken[ident] = (f"{name}: {len(run_rows)} rows where its seal signed {seal.get('rows')} "
                             "(rows deleted, added or replaced)")
        elif not file_ok:
            broken[ident] = f"{name}: the file's seal over its runs does not verify (a run removed with its seal)"
    for ident, seal in seals.items():
        if ident not in by_run and seal_verifies(seal, key):
            broken[ident] = (f"run {ident[2]} (run {ident[3]} of {ident[0]} on {ident[1]}): sealed with "
                             f"{seal.get('rows')} rows, none in the file (a run deleted)")
    if not file_ok and not broken:
        broken[("", "", "", -1)] = "the file's seal over its runs does not verify (a run removed with its seal)"
    return broken
