"""Do two checkouts write the same bytes? Each builds the example release (and the trace store it ingests
into), and every file's sha256 is compared.

    python benchmarks/same_bytes.py OLD_CHECKOUT NEW_CHECKOUT [--traces examples/traces --fleet examples/fleet.yaml]
        [--ingest tests/fixtures/traces]

`--ingest DIR` also compares the store `hotshape ingest` writes from every trace file under DIR.

A refactor that should change nothing must print `same bytes: N files` and exit 0. Each checkout runs with
its own code first on sys.path (PYTHONPATH), the same interpreter, and HOTSHAPE_RELEASE_KEY unset.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def digests(root: Path) -> dict[str, str]:
    """sha256 of every file under `root`, by its path below it (symlinks followed)."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def build(checkout: Path, out: Path, traces: Path, fleet: Path, ingest: list[Path] = ()) -> dict[str, str]:
    """The release of `hotshape build` and the trace store it ingested into, made by `checkout`'s code."""
    env = {k: v for k, v in os.environ.items() if k != "HOTSHAPE_RELEASE_KEY"}
    env["PYTHONPATH"] = str(checkout)
    cli = [sys.executable, "-m", "pipelines.cli"]
    subprocess.run(cli + ["build", "--traces", str(traces), "--fleet", str(fleet), "--out", str(out / "release"),
                          "--store", str(out / "store")], env=env, check=True, cwd=checkout,
                   stdout=subprocess.DEVNULL)
    for i, folder in enumerate(ingest):
        files = sorted(str(p) for p in folder.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz")))
        # exit 1 means some trace was quarantined: its reason is in the store, compared like the rest
        done = subprocess.run(cli + ["ingest", *files, "--out", str(out / f"ingest-{i}")], env=env, cwd=checkout,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if done.returncode not in (0, 1):
            raise SystemExit(f"{checkout}: hotshape ingest of {folder} exited {done.returncode}")
    return digests(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--traces", type=Path, default=REPO / "examples" / "traces")
    parser.add_argument("--fleet", type=Path, default=REPO / "examples" / "fleet.yaml")
    parser.add_argument("--ingest", type=Path, action="append", default=[], help="also ingest every trace here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ingest = [p.resolve() for p in args.ingest]
        old = build(args.old.resolve(), Path(tmp) / "old", args.traces.resolve(), args.fleet.resolve(), ingest)
        new = build(args.new.resolve(), Path(tmp) / "new", args.traces.resolve(), args.fleet.resolve(), ingest)
    differ = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    for name in differ:
        print(f"differs: {name} ({'only old' if name not in new else 'only new' if name not in old else 'bytes'})")
    if differ:
        return 1
    print(f"same bytes: {len(old)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
