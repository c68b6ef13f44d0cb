"""The candidate sandbox, with the real bwrap: what the command line binds, what a process inside can see and
do, the limits over the worker's children, and hostile submissions run through `hotshape eval`, checked from
outside (release byte-identical, nothing written outside the scratch directory, no process left, the evaluator
alive)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernels_eval.harness import sandbox
from kernels_eval.harness.limits import ProcessTree, default_memory_bytes

ADVERSARIAL = Path(__file__).resolve().parents[1] / "adversarial"
REPO = Path(__file__).resolve().parents[2]
MARKER = "hotshape-escape-marker"
KEY = "00" * 32
CLI = ("import sys, argparse\nfrom kernels_eval import eval_commands\n"
       "p = argparse.ArgumentParser(); s = p.add_subparsers(dest='c', required=True)\n"
       "eval_commands.register(s); a = p.parse_args(sys.argv[1:]); sys.exit(a.func(a))\n")

needs_bwrap = pytest.mark.skipif(sandbox.check_bwrap() is not None, reason="bubblewrap cannot run here")


def _bound(argv: list[str]) -> dict[str, str]:
    """{destination: flag} of every bind in a bwrap command line."""
    out = {}
    for i, a in enumerate(argv):
        if a in ("--ro-bind", "--bind", "--dev-bind"):
            out[argv[i + 2]] = a
    return out


def _survivors() -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and MARKER.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            pass
    return found


def test_command_binds_only_what_the_worker_needs(tmp_path):
    environ = {"PATH": "/root/.cargo/bin:/usr/bin", "HOTSHAPE_RELEASE_KEY": KEY, "AWS_SECRET_ACCESS_KEY": "x",
               "GITHUB_TOKEN": "x", "DB_PASSWORD": "x", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "2",
               "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "0", "HOME": "/root"}
    files = [ADVERSARIAL / "honest" / "rms_norm.py"]
    for device in ("cpu", "cuda"):
        argv, env = sandbox.bwrap_command("bwrap", ["python"], device=device, scratch=tmp_path, files=files,
                                          environ=environ)
        bound = _bound(argv)
        assert bound[str(tmp_path)] == "--bind" and bound[str(files[0])] == "--ro-bind"
        assert [d for d, flag in bound.items() if flag == "--bind"] == [str(tmp_path)]  # the one writable place
        assert bound[f"{sandbox.PACKAGE_ROOT}/kernels_eval"] == "--ro-bind"
        assert bound[f"{sandbox.PACKAGE_ROOT}/catalogue"] == "--ro-bind"  # the registry the worker imports
        assert str(REPO) not in bound and "/" not in bound and os.path.expanduser("~") not in bound
        # nothing of the host's /tmp or /dev/shm but the scratch dir, the candidate, and the interpreter and
        # package trees (a checkout cloned under /tmp has its .venv there)
        needed = {str(tmp_path), str(files[0])}
        trees = (sys.prefix, sys.base_prefix, str(sandbox.package_dir()))
        assert not any(d.startswith(("/tmp", "/dev/shm")) and d not in needed
                       and not any(d == t or d.startswith(t + "/") or t.startswith(d + "/") for t in trees)
                       for d, flag in bound.items() if not d.startswith(sandbox.PACKAGE_ROOT))
        for flag in ("--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net",
                     "--die-with-parent", "--new-session", "--clearenv"):
            assert flag in argv
        assert argv[argv.index("--uid") + 1] == "65534" and argv[argv.index("--tmpfs") + 1] == "/tmp"
        assert not any(k.startswith("HOTSHAPE_") or k in ("AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "DB_PASSWORD")
                       for k in env)
        assert env["HOME"] == "/tmp" and env["PYTHONPATH"] == sandbox.PACKAGE_ROOT
        assert "/root/.cargo/bin" not in env["PATH"] and env["OMP_NUM_THREADS"] == "2"
        assert env["TRITON_CACHE_DIR"] == str(tmp_path / "triton-cache")  # no persistent cache: the scratch's
        assert (env.get("TRITON_INTERPRET") == "1") == (device == "cpu")
        setenv = {argv[i + 1]: argv[i + 2] for i, a in enumerate(argv) if a == "--setenv"}
        assert setenv == env  # bwrap gets the same environment it sets (its own /proc/1/environ is visible)


PROBE = r"""
import json, os, socket, sys
r = {"uid": os.getuid(), "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
     "root_home": sorted(os.listdir("/root")) if os.path.isdir("/root") else None,
     "repo": os.path.exists(sys.argv[1] + "/out") or os.path.exists(sys.argv[1] + "/.git"),
     "hotshape_env": [k for k in os.environ if k.startswith("HOTSHAPE")],
     "pid1_environ": open("/proc/1/environ", "rb").read().decode(errors="replace")}
def can_write(path):
    try:
        open(path, "w").write("x")
        return True
    except OSError:
        return False
r["write_usr"] = can_write("/usr/hotshape-probe")
r["write_scratch"] = can_write(sys.argv[2] + "/probe")
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[3])), timeout=1).close()
    r["connected"] = True
except OSError:
    r["connected"] = False
try:
    r["shadow"] = len(open("/etc/shadow", "rb").read())
except OSError:
    r["shadow"] = None
import kernels_eval
r["kernels_eval"] = kernels_eval.__file__
from kernels_eval.registry import load_reference  # what the worker imports: it reaches catalogue
r["catalogue"] = sys.modules["catalogue"].__file__
print(json.dumps(r))
"""


@needs_bwrap
def test_inside_the_sandbox(tmp_path):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.settimeout(0.1)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    argv, env = sandbox.bwrap_command(sandbox.find_bwrap(), [sys.executable, "-c", PROBE, str(REPO), str(scratch),
                                                             str(port)], device="cpu", scratch=scratch,
                                      environ={**os.environ, "HOTSHAPE_RELEASE_KEY": KEY})
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    r = json.loads(run.stdout)
    assert r["uid"] == 65534 and r["pids"] == [1, 2]  # bwrap's init and the probe: nothing of the host
    assert r["root_home"] in (None, [".pyenv"], []) and not r["repo"]
    assert r["hotshape_env"] == [] and "HOTSHAPE" not in r["pid1_environ"]
    assert not r["write_usr"] and r["write_scratch"] and (scratch / "probe").read_text() == "x"
    assert not r["connected"]
    assert not r["shadow"]  # root-only files under /etc (the sandbox's uid maps to the evaluator's) are hidden
    with pytest.raises(TimeoutError):
        listener.accept()
    assert r["kernels_eval"].startswith(sandbox.PACKAGE_ROOT) and r["catalogue"].startswith(sandbox.PACKAGE_ROOT)


def test_process_tree_counts_children():
    child = subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(64 << 20); time.sleep(30)"])
    try:
        tree = ProcessTree(os.getpid())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            procs, rss, _ = tree.usage()
            if procs >= 2 and rss > 64 << 20:
                break
            time.sleep(0.1)
        assert child.pid in tree.scan() and rss > 64 << 20
    finally:
        child.kill()
        child.wait()
    total = int(next(line for line in open("/proc/meminfo") if line.startswith("MemTotal:")).split()[1]) * 1024
    assert default_memory_bytes() <= min(total // 2, max(total - (4 << 30), 1 << 30))


@pytest.fixture(scope="module")
def release(atrex_dir, tmp_path_factory):
    """A release built from the published data, in a directory the hostile files write into when unsandboxed."""
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    out = tmp_path_factory.mktemp("hotshape-sandbox-test") / "release"
    run = subprocess.run([str(REPO / ".venv" / "bin" / "hotshape"), "import-atrex", str(atrex_dir), "--out",
                          str(out)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return out


def _snapshot(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def _eval(case: str, release: Path, out: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CLI, "eval", str(ADVERSARIAL / case), "--release", str(release),
                           "--device", "cpu", "--ops", "rms_norm", "--timeout-s", "60", "--out", str(out), "--json",
                           *extra, *(() if "--triton-cache" in extra else ("--no-triton-cache",))],
                          capture_output=True, text=True, timeout=600, env=env or os.environ)  # no cache in $HOME


@needs_bwrap
@pytest.mark.parametrize("case", ["write_release", "kill_parent", "setsid_grandchild", "new_session_child",
                                  "read_key"])
def test_hostile_eval_is_contained(case, release, tmp_path):
    before = _snapshot(release.parent)
    tmp_before = set(os.listdir("/tmp"))
    out = tmp_path / "results" / "results.parquet"
    out.parent.mkdir()
    run = _eval(case, release, out, env={**os.environ, "HOTSHAPE_RELEASE_KEY": KEY})
    assert run.returncode == 0, run.stderr[-2000:]  # the evaluator was not killed
    (p,) = {r["operator"]: r for r in json.loads(run.stdout)["problems"]}.values()
    assert (p["stage"], p["correct"], p["native"]) == ("done", True, True), p["error"]
    assert _survivors() == []
    if case in ("setsid_grandchild", "new_session_child"):
        time.sleep(4.5)  # their children would write now
        assert _survivors() == []
    assert _snapshot(release.parent) == before
    assert not [n for n in os.listdir(out.parent) if n.startswith("FORGED")]
    assert not [n for n in set(os.listdir("/tmp")) - tmp_before if n.startswith("hotshape-escape")]


@needs_bwrap
def test_a_log_swapped_for_a_symlink_leaks_nothing(release, tmp_path):
    secret = Path("/tmp/hotshape-sandbox-log-secret")  # the host path the hostile file links its log to
    token = os.urandom(16).hex()
    secret.write_text(token)
    try:
        run = _eval("log_symlink", release, tmp_path / "r.parquet")
    finally:
        secret.unlink()
    assert run.returncode in (0, 1), run.stderr[-2000:]
    (p,) = json.loads(run.stdout)["problems"][:1]
    assert p["stage"] == "compile" and "exited with status 3" in p["error"], p["error"]
    assert token not in run.stdout and token not in run.stderr


@needs_bwrap
def test_the_network_is_unreachable(release, tmp_path):
    try:
        listener = socket.create_server(("127.0.0.1", 48217))  # the port the hostile file tries first
    except OSError:
        pytest.skip("port 48217 is taken")
    listener.settimeout(0.1)
    with listener:
        run = _eval("network", release, tmp_path / "r.parquet")
        assert run.returncode == 0, run.stderr[-2000:]
        (p,) = json.loads(run.stdout)["problems"][:1]
        assert p["stage"] == "done" and p["correct"], p["error"]
        with pytest.raises(TimeoutError):
            listener.accept()


def test_eval_stops_without_bwrap(release, tmp_path):
    env = {**os.environ, "HOTSHAPE_BWRAP": str(tmp_path / "no-bwrap"), "PATH": "/nonexistent"}
    run = _eval("honest", release, tmp_path / "r.parquet", env=env)
    assert run.returncode == 2 and "bubblewrap" in run.stderr and "--no-sandbox" in run.stderr
    assert not (tmp_path / "r.parquet").exists()


@needs_bwrap
def test_memory_of_children_is_counted_without_a_cgroup(tmp_path):
    """The fallback when no cgroup can be made: the tree's summed RSS, polled, names the limit."""
    from catalogue import registry
    from kernels_eval.harness.process import WorkerDied, WorkerProcess

    spec = registry.spec("rms_norm")
    smoke = spec.smoke[0]
    file = ADVERSARIAL / "child_memory" / "rms_norm.py"
    exchange = tmp_path / "x"
    exchange.mkdir()
    worker = WorkerProcess(device="cpu", log_path=tmp_path / "w.log", memory_bytes=2 << 30, start_timeout_s=120,
                           scratch=tmp_path, files=(file,), use_cgroup=False)
    try:
        assert worker.sandboxed and worker.cgroup is None
        reply = worker.request({"cmd": "init", "operator": "rms_norm", "file": str(file), "device": "cpu",
                                "init_kwargs": dict(smoke.init), "outputs": list(spec.outputs),
                                "exchange": str(exchange)}, 120)
        assert reply["ok"], reply
        with pytest.raises(WorkerDied, match=r"GiB of host memory over \d+ processes \(limit 2.0 GiB\)"):
            worker.request({"cmd": "call", "input_kwargs": dict(smoke.inputs), "seed": 1, "digest_key": 1}, 120)
    finally:
        worker.close()


@needs_bwrap
def test_the_sandbox_dies_with_the_evaluator(tmp_path):
    script = ("import sys, time\nfrom pathlib import Path\nfrom kernels_eval.harness.process import WorkerProcess\n"
              "w = WorkerProcess(device='cpu', log_path=Path(sys.argv[1]) / 'w.log', memory_bytes=4 << 30, "
              "start_timeout_s=120, scratch=Path(sys.argv[1]))\n"
              "print(' '.join(map(str, sorted(w.tree.scan()))), flush=True)\ntime.sleep(120)\n")
    parent = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in parent.stdout.readline().split()]
    assert len(pids) >= 3, pids  # bwrap, its init in the namespace, the worker
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
        time.sleep(0.1)
    alive = [p for p in pids if Path(f"/proc/{p}/stat").exists()
             and Path(f"/proc/{p}/stat").read_text().split(") ")[1][0] != "Z"]
    assert alive == []
    for stale in Path("/sys/fs/cgroup").glob(f"*/**/hotshape-{parent.pid}-*"):  # the killed parent's cgroups
        try:
            stale.rmdir()
        except OSError:
            pass
