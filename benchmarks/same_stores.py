"""Whether two trace stores hold the same bytes: every file of both, by sha256 (a reader's rewrite must not
change what it stores).

    git worktree add --detach /tmp/before <commit before the change>
    (cd /tmp/before && PYTHONPATH=. python -m pipelines.cli ingest examples/traces --out /tmp/store-before --jobs 1)
    PYTHONPATH=. python -m pipelines.cli ingest examples/traces --out /tmp/store-after --jobs 1
    python benchmarks/same_stores.py /tmp/store-before /tmp/store-after
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path


def digests(store: Path) -> dict[str, str]:
    """sha256 of every file under `store`, by its path relative to it (temporary files left out)."""
    return {p.relative_to(store).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(store.rglob("*")) if p.is_file() and not p.name.startswith(".")}


def main() -> int:
    before, after = (digests(Path(a)) for a in sys.argv[1:3])
    differ = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    print(f"{len(before)} files before, {len(after)} after, {len(differ)} differ")
    for name in differ[:20]:
        print(f"  {name}: {before.get(name, 'missing')[:12]} -> {after.get(name, 'missing')[:12]}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
