"""A fleet of N profiles made from real traces, and build/refresh measured on it with /usr/bin/time -v.

    .venv/bin/python benchmarks/fleet.py generate --out /tmp/fleet --profiles 1313
    .venv/bin/python benchmarks/fleet.py run --root /tmp/fleet --sizes 20 80 320 1303 --refresh 10 \
        --results benchmarks/results/fleet_build.txt
    .venv/bin/python benchmarks/fleet.py dagster --root /tmp/fleet --profiles 40 [--code OLD_CHECKOUT]

`generate` spreads profiles over 20 deployments, one family of real traces each (examples/traces and
tests/fixtures/traces/tracelens/inference; families with graph replays keep their capture_traces/
beside the profiles, byte for byte; the records in benchmarks/results/ up to 2026-12-04 were made with
those capture traces uncut, 5.9 MB against 0.2 MB now: tests/fixtures/traces/SOURCES.md). Every profile is its source with each GPU activity's duration
scaled by a seeded factor in [0.9, 1.1], so every file's bytes differ. Profiles 0, 20 and 40 are long
multi-step profiles: 4, 3 and 2 back-to-back copies of benchmarks/data/llama3-8b-stack.json.gz
(82.6 MB of JSON each), time and ids shifted per copy. fleet_N.yaml claims profiles 0..N-1 (explicit
file names), so that every fleet holds the same longest profile. Generated data goes under --out,
never into the repository.

`run` builds a release from a fresh trace store for each N, then refreshes the largest after the next
`--refresh` profiles, each under /usr/bin/time -v, and writes wall time, CPU time, peak RSS (the
largest single process of the tree, as wait4 reports it) and MB of JSON per second per core.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import orjson
import yaml

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "traces"
TRACELENS = REPO / "tests" / "fixtures" / "traces" / "tracelens" / "inference"
STACK = REPO / "benchmarks" / "data" / "llama3-8b-stack.json.gz"
DEPLOYMENTS = 20
ACCELERATORS = ("H200", "H100", "MI300X")
GPU_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}
# Fields that identify an event within a trace: shifted per copy in a multi-step profile.
ID_ARGS = ("correlation", "External id", "Ev Idx", "Record function id", "Python id", "Python parent id")
LONG = {0: 4, 20: 3, 40: 2}  # profile index → copies of the stack trace


def families() -> list[tuple[str, Path, list[str]]]:
    """(name, source directory, profile files) of each family of real traces."""
    return [
        ("llama3-8b", EXAMPLES / "llama3-8b", ["eager.json.gz", "graph.json.gz"]),
        ("llama3-8b-compiled", EXAMPLES / "llama3-8b-compiled", ["eager.json.gz"]),
        ("qwen3-30b-a3b", EXAMPLES / "qwen3-30b-a3b", ["eager.json.gz", "graph.json.gz"]),
        ("deepseek-v2-lite", EXAMPLES / "deepseek-v2-lite", ["eager.json.gz"]),
        ("sglang-decode", TRACELENS / "sglang_decode", ["sglang_Qwen3-8B_decode.json.gz"]),
        ("sglang-prefilldecode", TRACELENS / "sglang_prefilldecode", ["sglang_Qwen3-8B_prefilldecode.json.gz"]),
        ("vllm-decode-full", TRACELENS / "vllm_decode_full", ["graph_execution.json.gz"]),
        ("vllm-piecewise", TRACELENS / "vllm_prefilldecode_piecewise", ["graph_execution.json.gz"]),
    ]


def _deployment_dir(d: int) -> str:
    return f"d{d:02d}-{families()[d % len(families())][0]}"


def _load(path: Path) -> dict:
    doc = orjson.loads(gzip.decompress(path.read_bytes()))
    return {"traceEvents": doc} if isinstance(doc, list) else doc


def _perturbed(events: list, rng: random.Random) -> None:
    for e in events:
        if e.get("cat") in GPU_CATEGORIES and isinstance(e.get("dur"), (int, float)):
            e["dur"] = round(e["dur"] * rng.uniform(0.9, 1.1), 3)


def _stacked(doc: dict, copies: int) -> dict:
    """`copies` back-to-back steps of one trace: timestamps after the previous copy's end, ids unique."""
    events = doc["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    start = min(e["ts"] for e in timed)
    span = max(e["ts"] + (e.get("dur") or 0) for e in timed) - start + 1000.0
    out = [e for e in events if not isinstance(e.get("ts"), (int, float))]
    for k in range(copies):
        for e in timed:
            c = dict(e)
            c["ts"] = e["ts"] + k * span
            if k and "id" in c and c.get("ph") in ("s", "f", "t"):
                c["id"] = c["id"] + k * 10_000_000
            args = e.get("args")
            if k and args and any(a in args for a in ID_ARGS):
                c["args"] = {a: (v + k * 10_000_000 if a in ID_ARGS and isinstance(v, int) and v >= 0 else v)
                             for a, v in args.items()}
            out.append(c)
    return {**doc, "traceEvents": out}


def _make(task: tuple) -> tuple[str, int]:
    """Write profile `index`; its path relative to the root and its size in bytes of JSON."""
    root, index, source, rel = task
    rng = random.Random(index)
    doc = _load(source)
    if index in LONG:
        doc = _stacked(doc, LONG[index])
    _perturbed(doc["traceEvents"], rng)
    text = orjson.dumps(doc)
    (Path(root) / rel).write_bytes(gzip.compress(text, compresslevel=6, mtime=0))
    return rel, len(text)


def generate(out: Path, profiles: int, jobs: int) -> None:
    """The fleet under `out`: profiles, capture sidecars, fleet_N.yaml for every N asked later, sizes.json."""
    out.mkdir(parents=True, exist_ok=True)
    fams = families()
    for d in range(DEPLOYMENTS):
        folder = out / _deployment_dir(d)
        folder.mkdir(exist_ok=True)
        sidecars = fams[d % len(fams)][1] / "capture_traces"
        if sidecars.is_dir() and not (folder / "capture_traces").exists():
            shutil.copytree(sidecars, folder / "capture_traces")
    tasks = []
    for i in range(profiles):
        d = i % DEPLOYMENTS
        name, src_dir, files = fams[d % len(fams)]
        source = STACK if i in LONG else src_dir / files[(i // DEPLOYMENTS) % len(files)]
        tasks.append((str(out), i, source, f"{_deployment_dir(d)}/p{i:05d}.json.gz"))
    sizes = {}
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for rel, size in pool.map(_make, tasks, chunksize=8):
            sizes[rel] = size
    (out / "sizes.json").write_text(json.dumps(sizes, indent=1, sort_keys=True) + "\n")


def write_fleet(root: Path, n: int) -> Path:
    """fleet_N.yaml claiming profiles 0..n-1 of the generated fleet."""
    sizes = json.loads((root / "sizes.json").read_text())
    by_dep: dict[int, list[str]] = {}
    for rel in sorted(sizes):
        i = int(rel.rsplit("/p", 1)[1].split(".")[0])
        if i < n:
            by_dep.setdefault(i % DEPLOYMENTS, []).append(rel)
    deps = [{"id": f"dep-{d:02d}", "model": families()[d % len(families())][0], "framework": f"serving-stack-{d}",
             "accelerator": ACCELERATORS[d % len(ACCELERATORS)], "card_hours": 1000 + 500 * d, "traces": files}
            for d, files in sorted(by_dep.items())]
    path = root / f"fleet_{n}.yaml"
    path.write_text(yaml.safe_dump({"window": {"start": "2026-11-01", "end": "2026-11-30"}, "deployments": deps},
                                   sort_keys=False))
    return path


def json_mb(root: Path, first: int, last: int) -> float:
    """MB of JSON of profiles first..last-1."""
    sizes = json.loads((root / "sizes.json").read_text())
    return sum(s for rel, s in sizes.items() if first <= int(rel.rsplit("/p", 1)[1].split(".")[0]) < last) / 1e6


_TIME_FIELDS = {"wall_s": r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)",
                "user_s": r"User time \(seconds\): (\S+)", "sys_s": r"System time \(seconds\): (\S+)",
                "max_rss_kb": r"Maximum resident set size \(kbytes\): (\d+)"}


def timed(cmd: list[str]) -> dict:
    """Run `cmd` under /usr/bin/time -v: wall, user, sys seconds and peak RSS, or raise with its stderr."""
    proc = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    out = {}
    for key, pattern in _TIME_FIELDS.items():
        value = re.search(pattern, proc.stderr).group(1)
        if key == "wall_s":
            parts = [float(p) for p in value.split(":")]
            value = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
        out[key] = float(value)
    return out


def _line(label: str, n: int, mb: float, t: dict, cores: int) -> str:
    cpu = t["user_s"] + t["sys_s"]
    return (f"{label:<14} N={n:<5} json_mb={mb:9.1f} wall_s={t['wall_s']:7.1f} cpu_s={cpu:7.1f} "
            f"peak_rss_mb={t['max_rss_kb'] / 1024:7.0f} mb_per_s_per_core={mb / t['wall_s'] / cores:6.1f} "
            f"mb_per_cpu_s={mb / cpu:6.1f}")


def run(root: Path, sizes: list[int], refresh: int, work: Path, results: Path | None) -> list[str]:
    """Build at each N from a fresh store, then refresh the largest after `refresh` more profiles."""
    hotshape = [sys.executable, "-m", "pipelines.cli"]
    cores = os.cpu_count() or 1
    lines = [f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {cores} cores, "
             f"load average before {os.getloadavg()[0]:.1f}"]
    for n in sizes:
        fleet, out = write_fleet(root, n), work / f"n{n}"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        t = timed([*hotshape, "build", "--traces", str(root), "--fleet", str(fleet), "--out", str(out / "rel"),
                   "--store", str(out / "store")])
        lines.append(_line("build", n, json_mb(root, 0, n), t, cores))
        print(lines[-1], flush=True)
    if refresh:
        n = sizes[-1]
        fleet, out = write_fleet(root, n + refresh), work / f"n{n}"
        t = timed([*hotshape, "refresh", str(out / "rel"), "--traces", str(root), "--fleet", str(fleet),
                   "--store", str(out / "store")])
        lines.append(_line(f"refresh +{refresh}", n + refresh, json_mb(root, n, n + refresh), t, cores))
        print(lines[-1], flush=True)
    lines.append(f"# load average after {os.getloadavg()[0]:.1f}")
    if results:
        results.parent.mkdir(parents=True, exist_ok=True)
        with results.open("a") as f:
            f.write("\n".join(lines) + "\n")
    return lines


def subfleet(root: Path, out: Path, first: int, count: int) -> tuple[Path, Path]:
    """A trace root of copies of profiles first..first+count-1 (capture sidecars beside) and its fleet.yaml."""
    shutil.rmtree(out, ignore_errors=True)
    files = [p.relative_to(root).as_posix() for p in root.glob("*/p*.json.gz")]
    chosen = sorted(rel for rel in files if first <= int(rel.rsplit("/p", 1)[1].split(".")[0]) < first + count)
    for rel in chosen:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / rel, out / rel)  # copies: the code before the store resolved symlinks out of the root
        sidecars = (root / rel).parent / "capture_traces"
        if sidecars.is_dir() and not (out / rel).parent.joinpath("capture_traces").exists():
            shutil.copytree(sidecars, (out / rel).parent / "capture_traces")
    by_dep: dict[str, list[str]] = {}
    for rel in chosen:
        by_dep.setdefault(rel.split("/")[0], []).append(rel)
    deps = [{"id": f"dep-{d}", "model": d.split("-", 1)[1], "framework": f"serving-stack-{d}", "accelerator": "H200",
             "card_hours": 1000, "traces": files} for d, files in sorted(by_dep.items())]
    fleet = out.with_suffix(".yaml")
    fleet.write_text(yaml.safe_dump({"window": {"start": "2026-11-01", "end": "2026-11-30"}, "deployments": deps}))
    return out, fleet


def dagster_overhead(root: Path, first: int, count: int, work: Path, code: Path, label: str) -> list[str]:
    """`hotshape run-pipeline` (every asset and check, one run per trace partition) against `hotshape build`
    on the same profiles, with the code at `code`: seconds per profile, and the difference."""
    sub, fleet = subfleet(root, work / "traces", first, count)
    env = {**os.environ, "PYTHONPATH": str(code)}
    hotshape = [sys.executable, "-m", "pipelines.cli"]
    times = {}
    for name, cmd in (("build", ["build", "--traces", str(sub), "--fleet", str(fleet), "--out", str(work / "rel")]),
                      ("run-pipeline", ["run-pipeline", "--traces", str(sub), "--fleet", str(fleet), "--out",
                                        str(work / "pipeline"), "--submissions", str(work / "none"),
                                        "--dagster-home", str(work / "dagster")])):
        start = time.perf_counter()
        subprocess.run([*hotshape, *cmd], check=True, cwd=code, env=env, capture_output=True)
        times[name] = time.perf_counter() - start
    per = {k: v / count for k, v in times.items()}
    return [f"dagster {label:<8} profiles={count} build_s_per_profile={per['build']:.3f} "
            f"pipeline_s_per_profile={per['run-pipeline']:.3f} overhead_s_per_profile={per['run-pipeline'] - per['build']:.3f}"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="write a fleet of real-trace profiles")
    g.add_argument("--out", type=Path, required=True, help="where the fleet goes (outside the repository)")
    g.add_argument("--profiles", type=int, default=1313)
    g.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    r = sub.add_parser("run", help="measure build at each N and a refresh")
    r.add_argument("--root", type=Path, required=True, help="a fleet written by generate")
    r.add_argument("--sizes", type=int, nargs="+", default=[20, 80, 320, 1303])
    r.add_argument("--refresh", type=int, default=10)
    r.add_argument("--work", type=Path, default=Path("/tmp/fleet-bench"), help="releases and stores")
    r.add_argument("--results", type=Path, help="append the lines here")
    o = sub.add_parser("dagster", help="Dagster run-level overhead per profile against the CLI build")
    o.add_argument("--root", type=Path, required=True, help="a fleet written by generate")
    o.add_argument("--first", type=int, default=41, help="first profile (41: after the long ones)")
    o.add_argument("--profiles", type=int, default=40)
    o.add_argument("--code", type=Path, default=REPO, help="a checkout of hotshape to measure (default: this one)")
    o.add_argument("--label", default="now")
    o.add_argument("--work", type=Path, default=Path("/tmp/fleet-dagster"))
    o.add_argument("--results", type=Path, help="append the line here")
    args = parser.parse_args(argv)
    if args.command == "dagster":
        shutil.rmtree(args.work, ignore_errors=True)
        lines = dagster_overhead(args.root, args.first, args.profiles, args.work, args.code.resolve(), args.label)
        print(lines[0])
        if args.results:
            with args.results.open("a") as f:
                f.write(lines[0] + "\n")
    elif args.command == "generate":
        generate(args.out, args.profiles, args.jobs)
    else:
        run(args.root, args.sizes, args.refresh, args.work, args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
