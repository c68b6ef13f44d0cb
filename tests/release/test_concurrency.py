"""Concurrent writers and readers of one release, in real processes: the lock, the symlink swap, killed runs."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from flow.build import build_release
from release.bundle import read_release
from release.integrity import IntegrityError, read_verified
from release.lock import lock_path, release_lock

REPO = Path(__file__).resolve().parents[2]
TRIALS = 3


def _cli(*args) -> list[str]:
    return [sys.executable, "-m", "pipelines.cli", *map(str, args)]


def _refresh_cmd(release: Path, examples: Path, *extra) -> list[str]:
    return _cli("refresh", release, "--traces", examples / "traces", "--fleet", examples / "fleet.yaml",
                "--json", *extra)


def _start(cmd: list[str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _build(examples: Path, out: Path) -> Path:
    build_release(examples / "traces", examples / "fleet.yaml", out, name="examples")
    return out


def _plain_copy(release: Path, to: Path) -> Path:
    """A release laid out as before versioned directories: a plain directory."""
    import shutil

    shutil.copytree(release, to)
    return to


@pytest.fixture(scope="module")
def base(examples_dir, tmp_path_factory):
    """The example build (NAME -> .NAME.d/<digest>)."""
    return _build(examples_dir, tmp_path_factory.mktemp("base") / "rel")


def _beside(release: Path) -> list[str]:
    """What a writer of the release leaves beside it (other tools' files, e.g. a trace store, aside)."""
    return sorted(p.name for p in release.parent.iterdir()
                  if p.name == release.name or p.name.startswith(f".{release.name}."))


def _assert_clean(release: Path) -> None:
    """Only the release and its one versioned directory: no temp, no old copy, no lock file."""
    assert _beside(release) == [f".{release.name}.d", release.name]
    assert [p.name for p in (release.parent / f".{release.name}.d").iterdir()] == [release.resolve().name]
    read_verified(release)


def test_two_refreshes_that_wait_both_land_as_v2_and_v3(base, examples_dir, tmp_path):
    for trial in range(TRIALS):
        rel = tmp_path / f"t{trial}" / "rel"
        rel.parent.mkdir()
        # The first trial starts from a plain-directory release: converted under contention.
        _plain_copy(base, rel) if trial == 0 else _build(examples_dir, rel)
        procs = [_start(_refresh_cmd(rel, examples_dir, "--wait-s", "120")) for _ in range(2)]
        outs = [p.communicate(timeout=300) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outs
        assert sorted(json.loads(o)["version"] for o, _ in outs) == [2, 3]
        assert read_release(rel).versions == [1, 2, 3]
        _assert_clean(rel)


def test_two_refreshes_that_do_not_wait_never_lose_a_version(base, examples_dir, tmp_path):
    for trial in range(TRIALS):
        rel = _build(examples_dir, tmp_path / f"t{trial}" / "rel")
        procs = [_start(_refresh_cmd(rel, examples_dir)) for _ in range(2)]
        outs = [p.communicate(timeout=300) for p in procs]
        landed = sorted(json.loads(o)["version"] for (o, _), p in zip(outs, procs) if p.returncode == 0)
        for (_, err), p in zip(outs, procs):
            if p.returncode != 0:
                # the holder named by its pid, or, when the second looked before the holder wrote it, as one
                # that has not yet said who it is: either way one line naming the lock
                assert p.returncode == 2 and "being written by " in err and ".rel.lock" in err, err
                assert err.count("\n") == 1, err
        # Either the two ran one after the other, or the second stopped: never two "v2".
        assert landed in ([2], [2, 3])
        assert read_release(rel).versions == [1, *landed]
        _assert_clean(rel)


def test_the_second_writer_names_the_holder_then_waits_for_it(base, examples_dir, tmp_path):
    rel = _plain_copy(base, tmp_path / "rel")
    with release_lock(rel):
        holder = json.loads(lock_path(rel).read_text())
        done = subprocess.run(_refresh_cmd(rel, examples_dir), cwd=REPO, capture_output=True, text=True, timeout=300)
        assert done.returncode == 2
        assert f"being written by pid {os.getpid()} on {socket.gethostname()} since {holder['since']}" in done.stderr
        waiter = _start(_refresh_cmd(rel, examples_dir, "--wait-s", "120"))
        time.sleep(1.0)
        assert waiter.poll() is None  # still waiting for the lock this process holds
    out, err = waiter.communicate(timeout=300)
    assert waiter.returncode == 0, err
    assert json.loads(out)["version"] == 2
    _assert_clean(rel)


READER = r"""
import json, sys, time
from pathlib import Path
from release.integrity import read_verified
path, stop = Path(sys.argv[1]), Path(sys.argv[2])
reads, failures, digests = 0, [], set()
deadline = time.monotonic() + 240
while not stop.exists() and time.monotonic() < deadline:
    try:
        json.loads((path / "release.json").read_bytes())
        digests.add(read_verified(path).info["digest"])
        reads += 1
    except Exception as exc:
        failures.append(f"{type(exc).__name__}: {exc}")
print(json.dumps({"reads": reads, "failures": failures[:5], "n_failures": len(failures), "digests": len(digests)}))
"""


def test_a_reader_during_refreshes_never_sees_the_release_missing_or_unverifiable(base, examples_dir, tmp_path):
    rel = _plain_copy(base, tmp_path / "rel")  # the first refresh converts it: that swap is watched too
    stop = tmp_path / "stop"
    reader = _start([sys.executable, "-c", READER, str(rel), str(stop)])
    try:
        time.sleep(0.5)
        for _ in range(3):
            done = subprocess.run(_refresh_cmd(rel, examples_dir), cwd=REPO, capture_output=True, text=True,
                                  timeout=300)
            assert done.returncode == 0, done.stderr
    finally:
        stop.write_text("")
    out, err = reader.communicate(timeout=300)
    seen = json.loads(out)
    assert seen["n_failures"] == 0, seen["failures"]
    assert seen["reads"] > 10 and seen["digests"] >= 2
    assert read_release(rel).versions == [1, 2, 3, 4]
    _assert_clean(rel)


STUCK_WRITER = r"""
import sys, time
from pathlib import Path
from release.bundle import read_release, write_bundle
path, flag = Path(sys.argv[1]), Path(sys.argv[2])
rel = read_release(path)
files = rel.all_files()
files["README.md"] = b"# next\n"
def check(tmp):
    flag.write_text(str(tmp))  # every file and release.json are written: the run is killed here
    time.sleep(600)
write_bundle(path, files, {k: v for k, v in rel.info.items() if k != "files"}, replace=True, check=check)
"""


def test_a_killed_write_leaves_an_unfinished_temp_that_never_verifies_and_the_next_run_removes(
        base, examples_dir, tmp_path):
    rel = _build(examples_dir, tmp_path / "rel")
    before = read_verified(rel).info["digest"]
    # Leftovers of the earlier two-rename swap too: a temp and an old full copy (it holds the sealed key).
    _plain_copy(rel, tmp_path / ".rel.tmp-99999")
    _plain_copy(rel, tmp_path / ".rel.old-99999")
    flag = tmp_path / "flag"
    writer = _start([sys.executable, "-c", STUCK_WRITER, str(rel), str(flag)])
    deadline = time.monotonic() + 120
    while not flag.exists():
        assert writer.poll() is None and time.monotonic() < deadline, writer.stderr.read() if writer.poll() else ""
        time.sleep(0.05)
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=60)
    temp = Path(flag.read_text())
    assert temp.is_dir() and (temp / "release.json").is_file()
    with pytest.raises(IntegrityError, match="unfinished"):
        read_verified(temp)
    assert read_verified(rel).info["digest"] == before  # readers still get the version before
    assert lock_path(rel).exists()  # the killed holder's lock file stays; the kernel dropped its lock
    done = subprocess.run(_refresh_cmd(rel, examples_dir), cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert not temp.exists()
    _assert_clean(rel)
    assert read_release(rel).versions == [1, 2]


def test_refreshes_killed_at_any_moment_leave_a_verifiable_release_and_no_leftovers_after_the_next(
        base, examples_dir, tmp_path):
    rel = _build(examples_dir, tmp_path / "rel")
    for delay_s in (0.6, 1.0, 1.4, 1.8):
        proc = _start(_refresh_cmd(rel, examples_dir))
        timer = threading.Timer(delay_s, lambda p=proc: p.poll() is None and p.send_signal(signal.SIGKILL))
        timer.start()
        proc.communicate(timeout=300)
        timer.cancel()
        read_verified(rel)  # whatever the moment of the kill: the old version or the new one
    versions = read_release(rel).versions
    done = subprocess.run(_refresh_cmd(rel, examples_dir), cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert read_release(rel).versions == versions + [versions[-1] + 1]
    _assert_clean(rel)
