"""The candidate's sandbox: the bubblewrap command line a worker runs under, one code path for CPU and CUDA.

Inside, the worker sees read-only: /usr, /etc, the interpreter and its packages, the `kernels_eval` package
and the torch-free `catalogue` package it imports (both mounted at PACKAGE_ROOT, not the checkout they came
from, which may hold releases), and the submission's
operator files at their own paths; a private /tmp; a new /proc (its own pid namespace: the evaluator's
processes do not exist there); a minimal /dev (plus the GPU nodes on cuda); and, writable, the run's scratch
directory (exchange directories, and the Triton cache where the run keeps none) and, where it keeps one, the
candidate file's persistent Triton cache at TRITON_CACHE_MOUNT (harness/triton_cache.py). It runs as uid
65534 in new user, pid, ipc, uts, net and cgroup namespaces, with an allow-listed environment. bwrap is itself
started with that environment: the sandbox's pid 1 is bwrap, and its /proc/1/environ would otherwise hold the
evaluator's.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

PACKAGE_ROOT = "/hotshape"  # kernels_eval and catalogue are mounted here inside the sandbox; it is on PYTHONPATH
# Where a file's persistent Triton cache is bound: one path for every worker of every run, since Triton's cache
# records each compiled kernel's files by absolute path (the "__grp__" file of its key) and ignores a group whose
# paths are gone. Bound under each worker's own scratch directory instead, no worker found another's kernels:
# seen on H200, every warm run compiled each unified_attention configuration again, ~11 s a shape against
# 0.3 s (benchmarks/results/kernel_span_H200/tune_gap/).
TRITON_CACHE_MOUNT = "/triton-cache"
UID = 65534  # nobody
TMP_BYTES = 2 << 30  # size of the private /tmp (a tmpfs is RAM; a candidate must not fill it unbounded)
TOP_LEVEL = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # symlinks into /usr or real dirs
EXACT_ENV = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH",
                       "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "PYTORCH_CUDA_ALLOC_CONF",
                       "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONFAULTHANDLER", "PYTHONHASHSEED"})
# With a persistent per-file cache, Triton keeps the file's autotuning results there too: a later run of the same
# file loads its configurations instead of benchmarking them again (and times the same ones).
AUTOTUNE_CACHE_ENV = "TRITON_CACHE_AUTOTUNING"
CACHE_MANAGER_ENV = "TRITON_CACHE_MANAGER"
READ_ONLY_AUTOTUNING = "kernels_eval.harness.autotune_cache:KeptAutotuningOnly"  # autotune_cache.MANAGER


def autotuning_env(keep_autotuning: bool) -> dict[str, str]:
    """What a worker with a persistent Triton cache runs with: Triton caches its autotuning there and reuses
    it; with keep_autotuning=False it reuses what was kept and keeps nothing (harness/autotune_cache.py)."""
    env = {AUTOTUNE_CACHE_ENV: "1"}
    if not keep_autotuning:
        env[CACHE_MANAGER_ENV] = READ_ONLY_AUTOTUNING
    return env
PREFIX_ENV = ("LC_", "TRITON_", "OMP_", "MKL_", "OPENBLAS_", "CUDA_", "CUBLAS_", "CUDNN_", "NCCL_")
SECRET_ENV = re.compile(r"^(HOTSHAPE_|AWS_|GOOGLE_|AZURE_)|KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE",
                        re.IGNORECASE)
GPU_NODES = ("/dev/nvidia*", "/dev/nvidia-caps", "/dev/kfd", "/dev/dri")
GPU_NODE = re.compile(r"^/dev/nvidia(\d+)$")  # one GPU's node; nvidiactl, nvidia-uvm and the rest serve them all


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create namespaces here."""


# Files under /etc that hold secrets (password hashes, host keys, sudo rules, credentials of services).
HIDDEN_IN_ETC = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers", "/etc/sudoers.d",
                 "/etc/ssh", "/etc/ssl/private", "/etc/security/opasswd", "/etc/postgresql-common/root.crt",
                 "/etc/krb5.keytab", "/etc/libvirt", "/etc/docker")


def find_bwrap() -> str | None:
    """Path of the bwrap executable: $HOTSHAPE_BWRAP, else bwrap on PATH; None where neither exists."""
    path = os.environ.get("HOTSHAPE_BWRAP") or shutil.which("bwrap")
    return path if path and os.access(path, os.X_OK) else None


def check_bwrap(bwrap: str | None = None) -> str | None:
    """None when bwrap exists and can make the sandbox's namespaces here, else a one-line reason."""
    bwrap = bwrap or find_bwrap()
    if bwrap is None or not os.access(bwrap, os.X_OK):
        return ("bubblewrap (bwrap) is not installed: install it (Debian/Ubuntu: apt-get install bubblewrap), "
                "point HOTSHAPE_BWRAP at it, or pass --no-sandbox")
    run = subprocess.run([bwrap, "--unshare-user", "--unshare-pid", "--unshare-net", "--ro-bind", "/", "/",
                          "--", "/bin/true"], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    if run.returncode != 0:
        return f"{bwrap} cannot create namespaces here ({run.stderr.strip()[:200]}); pass --no-sandbox to run unsandboxed"
    return None


def package_dir() -> Path:
    """The kernels_eval package directory the worker's modules come from."""
    return Path(__file__).resolve().parents[1]


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _shown(entry: str, prefixes: Iterable[str]) -> bool:
    """Whether a directory may be bound: inside the interpreter, or a package directory (site-packages,
    dist-packages, a driver's lib) outside the checkout, $HOME and the temp directories, and never above them
    or the cwd (that would show the release, the results or the keys)."""
    if _under(entry, prefixes):
        return True
    hidden = [str(package_dir().parent), os.path.expanduser("~"), "/tmp", "/var/tmp", "/dev/shm", "/run"]
    return not (_under(entry, hidden) or any(_under(h, [entry]) for h in [*hidden, os.getcwd()]))


def _interpreter_trees() -> list[str]:
    """Directories of the interpreter and its packages."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    packages = [e for e in map(os.path.abspath, filter(None, sys.path))
                if os.path.basename(e) in ("site-packages", "dist-packages")]  # not the script's or cwd's dir
    trees = set(prefixes) | {e for e in packages if _shown(e, prefixes)}
    return sorted(trees | {os.path.realpath(t) for t in trees})


def _minimal(paths: Iterable[str]) -> list[str]:
    """Existing paths with those inside another one dropped (one bind covers them)."""
    kept: list[str] = []
    for p in sorted({os.path.normpath(p) for p in paths if p and os.path.exists(p)}):
        if not _under(p, kept):
            kept.append(p)
    return kept


def visible_devices(index: int, environ: Mapping[str, str] | None = None) -> str:
    """CUDA_VISIBLE_DEVICES of a worker shown the evaluator's CUDA device `index`: that entry of the
    evaluator's own CUDA_VISIBLE_DEVICES where it has one, else the index."""
    environ = os.environ if environ is None else environ
    own = [v.strip() for v in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if own:
        if index >= len(own):
            raise ValueError(f"CUDA device {index}: CUDA_VISIBLE_DEVICES={environ['CUDA_VISIBLE_DEVICES']} "
                             f"shows {len(own)}")
        return own[index]
    return str(index)


def gpu_nodes(visible_device: int | None = None, environ: Mapping[str, str] | None = None,
              nodes: Iterable[str] | None = None) -> list[str]:
    """The device nodes a CUDA worker gets: all of them, or for one `visible_device` the shared nodes and that
    GPU's /dev/nvidiaN, the index-th by minor number (CUDA numbers the GPUs present in bus order, and a
    container shows some of them). Where the evaluator itself was shown a subset (CUDA_VISIBLE_DEVICES), or
    the index has no node, every node is kept: CUDA_VISIBLE_DEVICES alone then picks the GPU."""
    environ = os.environ if environ is None else environ
    found = sorted({n for pattern in GPU_NODES for n in glob.glob(pattern)}) if nodes is None else sorted(nodes)
    gpus = sorted((n for n in found if GPU_NODE.match(n)), key=lambda n: int(GPU_NODE.match(n).group(1)))
    if visible_device is None or environ.get("CUDA_VISIBLE_DEVICES") or visible_device >= len(gpus):
        return found
    return [n for n in found if not GPU_NODE.match(n) or n == gpus[visible_device]]


def sandbox_env(device: str, triton_cache: Path, environ: Mapping[str, str] | None = None,
                visible: Iterable[str] = ()) -> dict[str, str]:
    """The worker's environment: allow-listed variables of `environ` (never HOTSHAPE_* or credentials) plus
    HOME, TMPDIR, PYTHONPATH and TRITON_CACHE_DIR of the sandbox; PATH keeps only directories it can see."""
    environ = os.environ if environ is None else environ
    env = {k: v for k, v in environ.items()
           if (k in EXACT_ENV or k.startswith(PREFIX_ENV)) and not SECRET_ENV.search(k)}
    visible = list(visible)
    path = [d for d in env.get("PATH", "").split(":") if d and _under(d, visible)]
    env["PATH"] = ":".join(dict.fromkeys([os.path.join(sys.prefix, "bin"), *path, "/usr/local/bin", "/usr/bin",
                                          "/bin"]))
    env.update(HOME="/tmp", TMPDIR="/tmp", PYTHONPATH=PACKAGE_ROOT, TRITON_CACHE_DIR=str(triton_cache))
    env.pop("TRITON_INTERPRET", None)
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    return env


def bwrap_command(bwrap: str, command: list[str], *, device: str, scratch: Path, files: Iterable[Path] = (),
                  file_cache: Path | None = None,
                  environ: Mapping[str, str] | None = None,
                  visible_device: int | None = None,
                  keep_autotuning: bool = True) -> tuple[list[str], dict[str, str]]:
    """(argv, env) that run `command` in the sandbox; start it with exactly that env (see the module doc).
    `visible_device`: the evaluator's CUDA index of the one GPU the sandbox shows (its node, and
    CUDA_VISIBLE_DEVICES); `file_cache`: a host directory bound read-write at TRITON_CACHE_MOUNT, the worker's
    TRITON_CACHE_DIR (else that is a directory of the scratch one)."""
    environ = os.environ if environ is None else environ
    nodes = gpu_nodes(visible_device, environ) if device == "cuda" else []
    if device == "cuda" and visible_device is not None:
        environ = {**environ, "CUDA_VISIBLE_DEVICES": visible_devices(visible_device, environ)}
    scratch = Path(os.path.abspath(scratch))
    # a lane's scratch directory holds the next units' directories: a worker there could have swapped one for a
    # symlink to a host directory, which bwrap would bind read-write (harness/safe_io.py has the parent's side)
    if scratch.is_symlink() or (scratch.exists() and not scratch.is_dir()):
        raise SandboxUnavailable(f"{scratch}: the worker's scratch directory is not a directory of the evaluator's "
                                 "(a symlink or a file left by another worker); refused")
    if file_cache is None:
        triton_cache = scratch / "triton-cache"
        triton_cache.mkdir(parents=True, exist_ok=True)
    else:
        triton_cache = Path(TRITON_CACHE_MOUNT)
        scratch.mkdir(parents=True, exist_ok=True)
    args = [bwrap, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net",
            "--unshare-cgroup-try", "--disable-userns", "--uid", str(UID), "--gid", str(UID), "--hostname",
            "sandbox", "--die-with-parent", "--new-session",
            "--size", str(TMP_BYTES), "--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev"]
    for node in nodes:
        args += ["--dev-bind", node, node]
    for top in TOP_LEVEL:
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
    trees = ["/usr", "/etc", *(t for t in TOP_LEVEL if not os.path.islink(t)), *_interpreter_trees()]
    if device == "cuda":
        # driver libraries outside /usr (a container's /usr/local/nvidia is inside it) and the GPU's sysfs
        trees += [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":")
                  if d.startswith("/") and _shown(d, [sys.prefix, sys.base_prefix])]
        trees += ["/sys", "/usr/local/nvidia", *glob.glob("/usr/local/cuda*")]
    else:
        trees.append("/sys/devices/system/cpu")  # torch's cpuinfo reads the CPU topology
    visible = _minimal(trees)
    for tree in visible:
        args += ["--ro-bind", tree, tree]
    # the sandbox's uid maps to the evaluator's, so files only root may read would be readable through /etc
    for secret in sorted(p for p in HIDDEN_IN_ETC if os.path.exists(p)):
        args += ["--tmpfs", secret] if os.path.isdir(secret) else ["--ro-bind", "/dev/null", secret]
    args += ["--ro-bind", str(package_dir()), f"{PACKAGE_ROOT}/kernels_eval",
             "--ro-bind", str(package_dir().with_name("catalogue")), f"{PACKAGE_ROOT}/catalogue",
             "--bind", str(scratch), str(scratch)]
    if file_cache is not None:  # the candidate file's own persistent cache (harness/triton_cache.py)
        args += ["--bind", str(file_cache), str(triton_cache)]
    for f in sorted({os.path.abspath(f) for f in files}):
        args += ["--ro-bind", f, f]  # at its own path: the worker imports it by the path the parent sends
    env = sandbox_env(device, triton_cache, environ, visible)
    if file_cache is not None:
        env.update(autotuning_env(keep_autotuning))
    args += ["--chdir", "/tmp", "--clearenv"]
    for k, v in sorted(env.items()):
        args += ["--setenv", k, v]
    return [*args, "--", *command], env
