"""Which files under a trace root are profiles: the one rule that ingest, weighting and the
pipeline's trace sensor all apply."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from ingest.tracefile import is_url, list_profiles

TRACE_SUFFIXES = (".json.gz", ".json", ".sqlite", ".csv")
# Graph-capture traces (vLLM/SGLang `capture_traces/`) only explain the graph replays of the
# profile beside them, and execution_details.json pairs them with it: neither is a profile.
CAPTURE_DIR = "capture_traces"
SIDECAR_NAMES = ("execution_details.json",)


def is_profile(rel: str) -> bool:
    """Whether a file (path relative to the trace root) is a profile of its own."""
    path = PurePosixPath(rel)
    if CAPTURE_DIR in path.parts[:-1] or path.name in SIDECAR_NAMES:
        return False
    return path.name.endswith(TRACE_SUFFIXES)


def discover(paths: list[str]) -> list[Path | str]:
    """Trace files named directly, or the profiles found under the directories named, sorted (a link inside a
    folder to a file outside it left out); a name that is an fsspec URL (file://, s3://...) stays a URL, a
    folder's profiles are URLs too."""
    found: list[Path | str] = []
    for name in paths:
        if is_url(name):
            listed = list_profiles(name, is_profile)
            found += [name] if listed is None else listed
            continue
        path = Path(name)
        if path.is_dir():
            real = path.resolve()
            found += [
                child
                for child in sorted(path.rglob("*"))
                if child.is_file() and is_profile(child.relative_to(path).as_posix())
                and child.resolve().is_relative_to(real)  # a link out of the folder named is never read
            ]
        else:
            found.append(path)
    return found
