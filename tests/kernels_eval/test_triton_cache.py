"""The persistent Triton cache: one directory per operator file's sha256, bound at TRITON_CACHE_DIR in that file's
sandbox only, found again by a later `hotshape eval` of the same file (real bwrap, real files)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from kernels_eval.harness import sandbox, triton_cache

from .test_sandbox import ADVERSARIAL, _bound, _eval, needs_bwrap, release  # noqa: F401  (release: a fixture)

# appended to the honest rms_norm: each run of the file leaves one line in the cache it is shown
PROBE = ("\nimport os as _os\n\nwith open(_os.path.join(_os.environ['TRITON_CACHE_DIR'], 'runs.txt'), 'a') as _f:\n"
         "    _f.write('run\\n')\n")


def test_the_cache_is_keyed_by_the_file_and_triton_version(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("x = 1\n")
    b.write_text("x = 2\n")
    da = triton_cache.file_cache_dir(tmp_path / "root", a)
    assert da == tmp_path / "root" / f"triton-{triton_cache.triton_version()}" / hashlib.sha256(b"x = 1\n").hexdigest()
    assert da.is_dir() and triton_cache.file_cache_dir(tmp_path / "root", b) != da


def test_only_the_files_own_cache_is_bound_writable(tmp_path):
    scratch, cache = tmp_path / "scratch", tmp_path / "root" / "triton-x" / ("0" * 64)
    cache.mkdir(parents=True)
    argv, env = sandbox.bwrap_command("bwrap", ["python"], device="cpu", scratch=scratch, file_cache=cache)
    writable = [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == "--bind"]
    assert writable == [(str(scratch), str(scratch)), (str(cache), env["TRITON_CACHE_DIR"])]
    assert env["TRITON_CACHE_DIR"] == sandbox.TRITON_CACHE_MOUNT  # the same path in every worker
    assert str(tmp_path / "root") not in _bound(argv) and str(cache.parent) not in _bound(argv)
    # the file's autotuning results are kept in its cache; a cold run (no persistent cache) keeps none
    assert env["TRITON_CACHE_AUTOTUNING"] == "1" and "--setenv" in argv
    _, cold = sandbox.bwrap_command("bwrap", ["python"], device="cpu", scratch=scratch, environ={})
    assert "TRITON_CACHE_AUTOTUNING" not in cold
    _, checks = sandbox.bwrap_command("bwrap", ["python"], device="cpu", scratch=scratch, file_cache=cache,
                                      environ={}, keep_autotuning=False)  # a lanes run's checks: none kept
    assert checks["TRITON_CACHE_AUTOTUNING"] == "1" and checks["TRITON_CACHE_DIR"] == env["TRITON_CACHE_DIR"]
    pytest.importorskip("triton")
    from kernels_eval.harness import autotune_cache

    assert checks["TRITON_CACHE_MANAGER"] == autotune_cache.MANAGER and "TRITON_CACHE_MANAGER" not in env


def test_lanes_workers_read_kept_autotuning_and_keep_none(tmp_path):
    """The manager a lanes run's checks use, as Triton loads it from the environment: it reads the picks a
    quiet timing phase kept and stores compiled kernels, but stores no autotuning of its own."""
    script = ("import json, sys\n"
              "from triton import knobs\n"
              "from triton.runtime.cache import FileCacheManager, _base32, get_cache_manager\n"
              "cls, key = knobs.cache.manager_class, 'ab' * 32\n"
              "FileCacheManager(_base32(key)).put(json.dumps({'configs_timings': []}), 'kernel.autotune.json',"
              " binary=False)\n"
              "m = get_cache_manager(key)\n"
              "kept = m.get_file('kernel.autotune.json')\n"
              "m.put('{}', 'other.autotune.json', binary=False)\n"
              "m.put(b'binary', 'kernel.cubin')\n"
              "print(json.dumps([cls.__name__, kept is not None, m.get_file('other.autotune.json'),"
              " m.get_file('kernel.cubin') is not None]))\n")
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "cache"), **sandbox.autotuning_env(False)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["KeptAutotuningOnly", True, None, True]
    assert sandbox.autotuning_env(True) == {"TRITON_CACHE_AUTOTUNING": "1"}


def test_prune_drops_a_cache_over_its_limit(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "big").write_bytes(b"x" * 100)
    assert not triton_cache.prune(tmp_path / "c", max_bytes=100) and (tmp_path / "c").is_dir()
    assert triton_cache.prune(tmp_path / "c", max_bytes=99) and not (tmp_path / "c").exists()


# Triton's own cache manager in the sandbox: the first worker stores a kernel's files and their group (which
# records each file by absolute path), the second looks the group up, as Triton's compile() does before compiling
GROUP_PROBE = r"""
import json, sys
from triton.runtime.cache import get_cache_manager

manager = get_cache_manager("0f" * 32)
if sys.argv[1] == "put":
    paths = {name: manager.put(b"binary", name) for name in ("kernel.cubin", "kernel.json")}
    manager.put_group("kernel.json", paths)
print(json.dumps(sorted(manager.get_group("kernel.json") or {})))
"""


@needs_bwrap
def test_kernels_one_worker_compiled_are_found_by_the_next(tmp_path):
    # each worker has its own scratch directory; a group found with files missing makes Triton compile again
    cache = tmp_path / "cache"
    cache.mkdir()
    found = []
    for n, step in enumerate(("put", "get")):
        argv, env = sandbox.bwrap_command(sandbox.find_bwrap(), [sys.executable, "-c", GROUP_PROBE, step],
                                          device="cpu", scratch=tmp_path / f"worker{n}", file_cache=cache)
        run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr[-2000:]
        found.append(json.loads(run.stdout.strip().splitlines()[-1]))
    assert found == [["kernel.cubin", "kernel.json"]] * 2


@needs_bwrap
def test_a_second_eval_of_the_same_file_finds_its_cache(release, tmp_path):  # noqa: F811
    root, subs = tmp_path / "cache", []
    for n, extra in enumerate(("", "# another file\n")):
        sub = tmp_path / f"sub{n}"
        sub.mkdir()
        (sub / "rms_norm.py").write_text((ADVERSARIAL / "honest" / "rms_norm.py").read_text() + PROBE + extra)
        subs.append(sub)

    def cache_of(sub):
        sha = hashlib.sha256((sub / "rms_norm.py").read_bytes()).hexdigest()
        return root / f"triton-{triton_cache.triton_version()}" / sha

    for n, (sub, flags) in enumerate([(subs[0], ()), (subs[0], ()), (subs[1], ()), (subs[1], ("--no-triton-cache",))]):
        run = _eval(str(sub), release, tmp_path / f"r{n}.parquet", "--triton-cache", str(root), *flags)
        assert run.returncode == 0, run.stderr[-2000:]
        (p,) = {r["operator"]: r for r in json.loads(run.stdout)["problems"]}.values()
        assert (p["stage"], p["correct"], p["native"]) == ("done", True, True), p["error"]
    assert (cache_of(subs[0]) / "runs.txt").read_text() == "run\nrun\n"  # the second run saw the first's
    assert (cache_of(subs[1]) / "runs.txt").read_text() == "run\n"  # another file, another cache; cold run: none
    assert sorted(os.listdir(cache_of(subs[0]).parent)) == sorted(cache_of(s).name for s in subs)
