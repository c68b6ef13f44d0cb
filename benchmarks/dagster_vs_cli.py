"""The same fleet through `hotshape build` and through Dagster (`hotshape run-pipeline`) in one run: wall and
CPU seconds of each, their ratio, on a sqlite and on a PostgreSQL Dagster instance; the two releases compared
byte for byte.

    .venv/bin/python benchmarks/fleet.py generate --out /tmp/fleet --profiles 1303
    .venv/bin/python benchmarks/dagster_vs_cli.py --root /tmp/fleet --profiles 80 --first 41 \
        --storage sqlite postgres --rounds 2 --results benchmarks/results/dagster_vs_cli.txt
    .venv/bin/python benchmarks/dagster_vs_cli.py --root /tmp/fleet --profiles 1303 --storage sqlite postgres

Both paths start from nothing: a fresh trace store, and for Dagster a fresh instance (its run history) too;
`--instance existing` creates each instance's storage, empty, before the clock starts (what every run-pipeline
after a checkout's first finds in ./.dagster_home), and `--instance fresh existing` measures both in each round.
With --profiles below the fleet's size, profiles first..first+N-1 are copied under --work with a fleet.yaml of
their own (`benchmarks/fleet.py`'s subfleet: run-pipeline makes a partition of every trace file under its
trace root); with every profile of the fleet, the fleet's root and its fleet_N.yaml are used as they are. In
each round the CLI runs first, then Dagster, once per storage. PostgreSQL is Debian's server, started in a
temporary directory (as tests/pipelines/conftest.py starts it), one new database per Dagster run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fleet import REPO, json_mb, subfleet, timed, write_fleet

HOTSHAPE = [sys.executable, "-m", "pipelines.cli"]
POSTGRES_STORAGE = """
storage:
  postgres:
    postgres_url: {url}
"""


class Postgres:
    """A throw-away PostgreSQL server on a free port (run as `postgres` when this runs as root)."""

    def __init__(self):
        initdb = shutil.which("initdb") or next(iter(sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))), None)
        if initdb is None:
            raise SystemExit("PostgreSQL server binaries not found (apt-get install postgresql)")
        self.bin = Path(initdb).resolve().parent
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.dir = Path(tempfile.mkdtemp(prefix="hotshape-bench-pg-"))
        self.as_user = []
        if os.geteuid() == 0:
            import pwd

            pg = pwd.getpwnam("postgres")
            os.chown(self.dir, pg.pw_uid, pg.pw_gid)
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.count = 0

    def _run(self, *args: str) -> None:
        subprocess.run([*self.as_user, *args], check=True, capture_output=True, timeout=120)

    def __enter__(self) -> Postgres:
        self._run(str(self.bin / "initdb"), "-D", str(self.dir / "data"), "-A", "trust", "-U", "dagster", "--no-sync",
                  "-E", "UTF8")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-o",
                  f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1", "-l", str(self.dir / "log"), "-w",
                  "start")
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def new_database(self) -> str:
        """The URL of a new empty database."""
        import psycopg2

        self.count += 1
        name = f"bench_{self.count}"
        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user="dagster", dbname="postgres")
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {name}")
        conn.close()
        return f"postgresql+psycopg2://dagster@127.0.0.1:{self.port}/{name}"


def dagster_home(path: Path, postgres_url: str | None) -> Path:
    """A Dagster home holding the project's instance configuration, with Postgres storage when given a URL."""
    path.mkdir(parents=True)
    config = (REPO / ".dagster_home" / "dagster.yaml").read_text()
    if postgres_url:
        config += POSTGRES_STORAGE.format(url=postgres_url)
    (path / "dagster.yaml").write_text(config)
    return path


def linked_root(root: Path, out: Path) -> Path:
    """A trace root holding only the fleet's deployment folders (profiles and capture sidecars), hard-linked:
    run-pipeline makes a partition of every trace file under its root, and the fleet's sizes.json is none."""
    shutil.rmtree(out, ignore_errors=True)
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        shutil.copytree(folder, out / folder.name, copy_function=os.link)
    return out


def release_files(release: Path) -> dict[str, bytes]:
    """Every file of a release by its relative path."""
    return {p.relative_to(release).as_posix(): p.read_bytes() for p in sorted(release.rglob("*")) if p.is_file()}


def initialise(home: Path) -> None:
    """Create the instance's storage (tables, sqlite files) as a first command would, leaving it empty of runs."""
    code = "import sys, dagster; dagster.DagsterInstance.from_config(sys.argv[1]).dispose()"
    subprocess.run([sys.executable, "-c", code, str(home)], check=True, capture_output=True, cwd=REPO)


def one_round(traces: Path, fleet: Path, work: Path, storages: list[str], pg: Postgres | None,
              instance: str = "fresh") -> list[dict]:
    """`hotshape build`, then `hotshape run-pipeline` on each storage, each from nothing (with `instance`
    "existing", the Dagster instance's storage is created, empty, before the clock starts); their times."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "no-submissions").mkdir()
    cli = timed([*HOTSHAPE, "build", "--traces", str(traces), "--fleet", str(fleet), "--out",
                 str(work / "cli" / "hotshape"), "--store", str(work / "cli" / "store")])
    rows = []
    for storage in storages:
        home = dagster_home(work / f"home-{storage}", pg.new_database() if storage == "postgres" else None)
        if instance == "existing":
            initialise(home)
        out = work / f"pipeline-{storage}"
        t = timed([*HOTSHAPE, "run-pipeline", "--traces", str(traces), "--fleet", str(fleet), "--out", str(out),
                   "--submissions", str(work / "no-submissions"), "--dagster-home", str(home)])
        same = release_files(work / "cli" / "hotshape") == release_files(out / "releases" / "hotshape")
        rows.append({"storage": storage, "cli": cli, "dagster": t, "identical": same, "instance": instance})
    return rows


def line(n: int, mb: float, row: dict) -> str:
    cli, dag = row["cli"], row["dagster"]
    cpu = {k: t["user_s"] + t["sys_s"] for k, t in (("cli", cli), ("dagster", dag))}
    return (f"N={n:<5} json_mb={mb:7.1f} storage={row['storage']:<8} build_wall_s={cli['wall_s']:6.1f} "
            f"instance={row['instance']:<8} dagster_wall_s={dag['wall_s']:6.1f} "
            f"ratio_wall={dag['wall_s'] / cli['wall_s']:5.2f} "
            f"build_cpu_s={cpu['cli']:6.1f} dagster_cpu_s={cpu['dagster']:6.1f} "
            f"ratio_cpu={cpu['dagster'] / cpu['cli']:5.2f} releases_identical={'yes' if row['identical'] else 'NO'}")


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, required=True, help="a fleet written by benchmarks/fleet.py generate")
    parser.add_argument("--profiles", type=int, default=80)
    parser.add_argument("--first", type=int, default=41, help="first profile of a smaller fleet (41: after the long ones)")
    parser.add_argument("--storage", nargs="+", choices=("sqlite", "postgres"), default=["sqlite", "postgres"])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--instance", nargs="+", choices=("fresh", "existing"), default=["fresh"],
                        help="the Dagster instance each run-pipeline starts on: fresh (its first command: storage "
                             "created inside the timed run) or existing (created, empty, beforehand: a later "
                             "command); with both, each round runs Dagster once per storage for each")
    parser.add_argument("--work", type=Path, default=Path("/tmp/dagster-vs-cli"))
    parser.add_argument("--results", type=Path, help="append the lines here")
    args = parser.parse_args(argv)
    total = len(json.loads((args.root / "sizes.json").read_text()))
    if args.profiles >= total:
        traces, fleet, mb = linked_root(args.root, args.work / "traces"), write_fleet(args.root, total), \
            json_mb(args.root, 0, total)
        what = f"all {total} profiles of {args.root}"
    else:
        traces, fleet = subfleet(args.root, args.work / "traces", args.first, args.profiles)
        mb, what = json_mb(args.root, args.first, args.first + args.profiles), \
            f"profiles {args.first}..{args.first + args.profiles - 1} of {args.root}"
    lines = [f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, {what}; "
             f"/proc/loadavg before: {loadavg()}",
             f"# {' '.join(Path(sys.argv[0]).name if i == 0 else a for i, a in enumerate(sys.argv))}"]
    print("\n".join(lines), flush=True)
    pg = Postgres() if "postgres" in args.storage else None
    try:
        if pg is not None:
            pg.__enter__()
        for _ in range(args.rounds):
            for instance in args.instance:
                for row in one_round(traces, fleet, args.work / "run", args.storage, pg, instance):
                    lines.append(line(args.profiles if args.profiles < total else total, mb, row))
                    print(lines[-1], flush=True)
    finally:
        if pg is not None:
            pg.__exit__()
    lines.append(f"# /proc/loadavg after: {loadavg()}")
    print(lines[-1])
    if args.results:
        args.results.parent.mkdir(parents=True, exist_ok=True)
        with args.results.open("a") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
