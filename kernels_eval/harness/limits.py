"""Memory and process-count limits over a worker's whole process tree: a cgroup where the evaluator may make
one (v2, else v1 memory + pids), otherwise (only with `eval --no-memory-cgroup`) the tree found through /proc,
its summed RSS and the memfd / tmpfs files its processes hold open. A file the tree wrote to a tmpfs and closed
(the scratch directory, the sandbox's private /tmp, capped at sandbox.TMP_BYTES) is counted by a cgroup only.

The parent reads the usage every 0.1 s while it waits for the worker, so a reading is kept to a few small
file reads: the cgroup's counters, or one listing of /proc plus the stat of pids not seen before.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
TASKS_PER_PROCESS = 32  # the cgroup's hard ceiling counts threads: torch starts one per core
RESCAN_EVERY = 10  # readings between full /proc scans (a reused pid could otherwise hide a member)
_names = itertools.count()


def default_memory_bytes() -> int:
    """The default host-memory limit of one sandbox: half the machine, and at most all of it but 4 GiB."""
    with open("/proc/meminfo") as fh:
        total = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("MemTotal:"))
    return max(1 << 30, min(total // 2, total - (4 << 30)))


def _read(path: Path) -> str:
    with open(path) as fh:
        return fh.read()


def _field(text: str, key: str) -> int:
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0


class Cgroup:
    """A fresh cgroup holding the sandbox, with its memory and task limits set."""

    def __init__(self, dirs: dict[str, Path], version: int, memory_bytes: int) -> None:
        self.dirs, self.version, self.memory_bytes = dirs, version, memory_bytes

    @classmethod
    def create(cls, memory_bytes: int, max_processes: int) -> Cgroup | None:
        """A new cgroup under the evaluator's own, or None where none can be made (read-only, no controllers)."""
        tasks = max_processes * TASKS_PER_PROCESS
        name = f"hotshape-{os.getpid()}-{next(_names)}"
        try:
            own = {parts[1]: parts[2].strip() for parts in
                   (line.split(":", 2) for line in _read(Path("/proc/self/cgroup")).splitlines())}
        except OSError:
            return None
        made: dict[str, Path] = {}
        try:
            if (CGROUP_ROOT / "cgroup.controllers").is_file() and "" in own:
                d = CGROUP_ROOT / own[""].lstrip("/") / name
                _remove_stale(d.parent)
                d.mkdir()
                made["unified"] = d
                (d / "memory.max").write_text(str(memory_bytes))
                (d / "pids.max").write_text(str(tasks))
                if (d / "memory.swap.max").exists():
                    (d / "memory.swap.max").write_text("0")
                return cls(made, 2, memory_bytes)
            for controller in ("memory", "pids"):
                d = CGROUP_ROOT / controller / own.get(controller, "/").lstrip("/") / name
                _remove_stale(d.parent)
                d.mkdir()
                made[controller] = d
            (made["memory"] / "memory.limit_in_bytes").write_text(str(memory_bytes))
            try:  # swap accounting is optional in v1
                (made["memory"] / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
            except OSError:
                pass
            (made["pids"] / "pids.max").write_text(str(tasks))
            return cls(made, 1, memory_bytes)
        except (OSError, KeyError):
            cls(made, 0, memory_bytes).remove()
            return None

    def procs_files(self) -> list[str]:
        """The files a process writes its pid into to join every controller."""
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` started from inside the cgroup (a shell joins it, then execs: nothing forks before)."""
        script = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
        return ["/bin/sh", "-c", script, "sh", *self.procs_files(), "--", *argv]

    def usage(self) -> tuple[int, int, bool]:
        """(processes, memory bytes, whether the kernel killed a process for the memory limit) now."""
        if self.version == 2:
            d = self.dirs["unified"]
            procs = _read(d / "cgroup.procs").split()
            return len(procs), int(_read(d / "memory.current")), _field(_read(d / "memory.events"), "oom_kill") > 0
        mem = self.dirs["memory"]
        procs = _read(self.dirs["pids"] / "cgroup.procs").split()
        oom = _field(_read(mem / "memory.oom_control"), "oom_kill") > 0
        return len(procs), int(_read(mem / "memory.max_usage_in_bytes")), oom

    def remove(self) -> None:
        """Delete the cgroup (once its processes are gone)."""
        for d in self.dirs.values():
            try:
                d.rmdir()
            except OSError:
                pass


def _remove_stale(parent: Path) -> None:
    """Remove the empty cgroups an evaluator that was killed left behind (named after its pid)."""
    try:
        names = [p.name for p in parent.iterdir() if p.name.startswith("hotshape-")]
    except OSError:
        return
    for name in names:
        pid = name.split("-")[1]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            try:
                (parent / name).rmdir()
            except OSError:
                pass


def parent_pid(pid: int) -> int | None:
    """The parent pid of a process from /proc, None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    return int(stat[stat.rindex(b")") + 2:].split(None, 2)[1])  # comm may hold spaces and parentheses


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError):
        return 0


def cgroup_available() -> bool:
    """Whether this evaluator can make a worker's cgroup here (what `eval` requires for its memory limit unless
    --no-memory-cgroup: only the kernel's count sees memfd and tmpfs pages no process maps)."""
    probe = Cgroup.create(1 << 30, 1)
    if probe is None:
        return False
    probe.remove()
    return True


class CgroupRequired(RuntimeError):
    """No cgroup can be made here for a worker's memory limit, and the run did not opt out."""


# HOTSHAPE_MEMORY_CGROUP=optional: the opt-out of `eval --no-memory-cgroup` for a whole host (a CI runner, a
# container that cannot delegate cgroups); read by the evaluator only (sandbox.SECRET_ENV keeps it from workers)
MEMORY_CGROUP_ENV = "HOTSHAPE_MEMORY_CGROUP"
NO_CGROUP = ("no cgroup can be made here for the workers' memory limit, and without one memory held in memfd or "
             "shared-memory files is only partly counted: run where the evaluator may create cgroups (v2 with the "
             "memory controller delegated, or v1 memory and pids), or pass --no-memory-cgroup (for a whole host, "
             f"{MEMORY_CGROUP_ENV}=optional) to count the workers' RSS and the memfd/shm files they hold (rows say "
             "memory_accounting = process)")


def memory_accounting(require_cgroup: bool = True) -> str:
    """How a run's workers count host memory: "cgroup" where one can be made, else "process" when the run opted
    out (require_cgroup False, or MEMORY_CGROUP_ENV=optional); CgroupRequired naming the way out otherwise."""
    if cgroup_available():
        return "cgroup"
    if require_cgroup and os.environ.get(MEMORY_CGROUP_ENV) != "optional":
        raise CgroupRequired(NO_CGROUP)
    return "process"


# Files whose pages are shared memory a process can hold without mapping them, so no RSS shows them: a memfd, a file
# of /dev/shm, a SysV segment (the sandbox's private /tmp is capped at sandbox.TMP_BYTES). Seen: 2 GiB held in a
# memfd passed a 1 GiB limit.
SHARED_MEMORY_LINKS = ("/memfd:", "/dev/shm/", "/SYSV")


def _held_shared_memory(pid: int, seen: set) -> int:
    """Bytes of the memfd / tmpfs files process `pid` holds open, each file counted once over the tree (`seen`:
    (device, inode) pairs counted already)."""
    total = 0
    fd_dir = f"/proc/{pid}/fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return 0
    for name in names:
        try:
            target = os.readlink(f"{fd_dir}/{name}")
            if not target.startswith(SHARED_MEMORY_LINKS):
                continue
            info = os.stat(f"{fd_dir}/{name}")
        except OSError:
            continue
        ident = (info.st_dev, info.st_ino)
        if ident not in seen:
            seen.add(ident)
            total += info.st_blocks * 512
    return total


class ProcessTree:
    """The processes descended from `root`, found through ppid links in /proc, their summed RSS and the shared
    memory files (memfd, tmpfs) they hold open."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.members = {root}
        self.others: set[int] = set()
        self.readings = 0

    def scan(self) -> set[int]:
        """Pids of the tree now. A pid keeps its side once seen: a process cannot leave a pid namespace, nor
        join another's tree; every RESCAN_EVERY readings everything is looked at again."""
        self.readings += 1
        if self.readings % RESCAN_EVERY == 0:
            self.members, self.others = {self.root}, set()
        alive = {int(n) for n in os.listdir("/proc") if n.isdigit()}
        self.members &= alive
        self.others &= alive
        parents = {pid: parent_pid(pid) for pid in alive - self.members - self.others}
        for pid in parents:
            chain = []
            while pid in parents and pid not in chain:
                chain.append(pid)
                pid = parents[pid]
            side = self.members if pid in self.members else self.others
            side.update(chain)
        return set(self.members) if self.root in alive else set()

    def usage(self) -> tuple[int, int, bool]:
        """(processes, summed RSS plus held memfd/tmpfs bytes, False: no kernel limit here) of the tree now."""
        pids = self.scan()
        seen: set = set()
        return len(pids), sum(_rss_bytes(p) + _held_shared_memory(p, seen) for p in pids), False
