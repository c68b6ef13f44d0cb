"""The harness itself as a target: what a worker leaves in its writable directory (a symlinked exchange directory, a
FIFO or a 3 GiB sparse log), forged observation records, hostile text, memory a process's RSS does not show, and a
time under the roofline, each contained. Real sandboxed workers and `hotshape` processes on CPU; the bounds stated
in docs/threat-model.md ("Harness I/O") are the ones asserted here."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

from kernels_eval.harness import limits, safe_io  # noqa: E402
from kernels_eval.harness.observe import MAX_RECORDS, parse_records  # noqa: E402
from kernels_eval.harness.runner import EvalConfig, Problem, evaluate, result_row  # noqa: E402
from kernels_eval.harness.sanitize import clean, row as clean_row, terminal  # noqa: E402
from kernels_eval.harness.verdict import Verdict  # noqa: E402
from kernels_eval.results_schema import read_results, results_table  # noqa: E402
from tests.conftest import REPO  # noqa: E402

ADVERSARIAL = REPO / "tests" / "adversarial"
HOTSHAPE = str(Path(sys.executable).with_name("hotshape"))
CONFIG = dict(device="cpu", call_timeout_s=30.0)
# Bounds of the evaluator process itself (its workers and the replay are other processes, under their own limits),
# stated in docs/threat-model.md. Its peak memory is VmHWM of /proc/self/status, the high-water mark of the address
# space made at its exec; not RUSAGE_SELF's ru_maxrss, into which Linux folds the peak of the process that forked it
# (a pytest process that once held 3.2 GB made an evaluator of 290 MB read as 3.2 GB in a full-suite run). Measured
# on a 2-core machine (`_measured` below, one evaluation of rms_norm's smoke shapes each): sparse_log 289 MiB of
# VmHWM and 2.3 s of CPU at load 6 (ru_maxrss 1,290 MiB when launched by a process that held 1.25 GiB),
# forged_observations 295 MB and 2.4 s at load 14 (before: a 3 GiB sparse log took 3.4 GB; read_tail reading the
# whole file, 6.3 GiB of VmHWM; 100,000 forged observation lines 199 s of CPU). The bounds leave room for a slower
# machine, and none for the old behaviour.
RSS_BOUND_BYTES = 1 << 30
CPU_BOUND_S = 30.0


@pytest.fixture(scope="module")
def release(atrex_dir, tmp_path_factory):
    from kernels_eval.harness.release_view import read_release_view
    from release.atrex import import_atrex

    out = tmp_path_factory.mktemp("eval") / "release"
    import_atrex(atrex_dir, out)
    return read_release_view(out)


def _only(rows: list[dict]) -> dict:
    """The one verdict of a CPU run of one operator (it stands for each of its problems)."""
    assert len({(r["stage"], r["error"]) for r in rows}) == 1
    return rows[0]


# ---- files in the worker's directory ------------------------------------------------------------------------------

def test_a_swapped_exchange_directory_deletes_no_host_file(release):
    victim_dir = Path("/tmp/hotshape-exchange-victim")  # the case's symlink target (tests/adversarial/exchange_symlink)
    victim_dir.mkdir(exist_ok=True)
    victim = victim_dir / "results.key"
    victim.write_text("0123456789abcdef" * 4 + "\n")
    before = victim.read_bytes()
    try:
        rows = evaluate(ADVERSARIAL / "exchange_symlink", release, config=EvalConfig(**CONFIG), ops=["rms_norm"])
        row = _only(rows)
        assert row["stage"] == "compile" and "exchange directory" in row["error"] and "replaced" in row["error"]
        assert victim.read_bytes() == before  # neither removed nor its size quoted
        assert re.search(rf"\b{len(before)}\b", row["error"]) is None  # (a random dir name may hold the digits)
    finally:
        victim.unlink(missing_ok=True)
        victim_dir.rmdir()


def test_a_fifo_log_ends_in_a_row_not_a_hang(release, tmp_path):
    out = tmp_path / "r.parquet"
    began = time.monotonic()
    run = subprocess.run([HOTSHAPE, "eval", str(ADVERSARIAL / "log_fifo"), "--release", str(release.path), "--device",
                          "cpu", "--ops", "rms_norm", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 1, run.stderr  # judged: nothing passed
    (row, *_) = read_results(out).to_pylist()
    assert row["stage"] == "compile" and "FIFO" in row["error"], row["error"]
    assert time.monotonic() - began < 600


def test_open_log_never_follows_what_a_worker_left(tmp_path):
    target = tmp_path / "host-file"
    target.write_text("host")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "op.log").symlink_to(target)
    fd = safe_io.open_log(scratch / "op.log")
    os.write(fd, b"worker output\n")
    os.close(fd)
    assert target.read_text() == "host" and not (scratch / "op.log").is_symlink()
    (scratch / "op.log").unlink()
    os.mkfifo(scratch / "op.log")
    fd = safe_io.open_log(scratch / "op.log")  # no reader: a blocking open would wait forever
    os.close(fd)
    assert (scratch / "op.log").is_file()
    os.unlink(scratch / "op.log")
    os.mkfifo(scratch / "op.log")
    with pytest.raises(safe_io.UnsafeEntry, match="FIFO"):
        safe_io.read_tail(scratch / "op.log")


def test_a_log_is_read_by_its_tail_only(tmp_path):
    log = tmp_path / "w.log"
    with open(log, "wb") as fh:
        fh.truncate(3 << 30)  # sparse: no memory, no disk
        fh.seek(0, 2)
        fh.write(b"the end")
    assert safe_io.read_tail(log, 600).endswith(b"the end")
    assert len(safe_io.read_tail(log, 600)) == 600
    kept = tmp_path / "kept.log"
    safe_io.copy_tail(log, kept, 1 << 10)
    text = kept.read_bytes()
    assert text.startswith(b"[hotshape: the first ") and text.endswith(b"the end") and len(text) < 2 << 10


def test_an_exchange_directory_is_judged_by_the_one_the_parent_made(tmp_path):
    exchange = safe_io.ExchangeDir.create(tmp_path, "x-op-")
    (Path(exchange.path) / "out.raw").write_bytes(b"1234")
    fd, name = exchange.open(os.path.join(exchange.path, "out.raw"))
    os.close(fd)
    host = tmp_path / "host"
    host.mkdir()
    (host / "key").write_text("secret")
    for outside in (str(host / "key"), os.path.join(exchange.path, "..", "host", "key")):
        with pytest.raises(safe_io.UnsafeEntry, match="outside"):
            exchange.entry(outside)
    os.rename(exchange.path, exchange.path + ".old")
    os.symlink(host, exchange.path)
    with pytest.raises(safe_io.UnsafeEntry, match="replaced"):
        exchange.open(os.path.join(exchange.path, "key"))
    exchange.unlink("key")  # through the held fd: the original directory has no such entry
    assert (host / "key").read_text() == "secret"
    exchange.remove()
    assert (host / "key").exists()


def _measured(case: str, release, tmp_path: Path, parent_peak_bytes: int = 0) -> dict:
    """Peak RSS (VmHWM) and CPU seconds of an evaluator process (itself, not its workers) judging `case`'s rms_norm;
    with `parent_peak_bytes`, the process first holds that much and then execs the evaluator, as a test process
    that peaked earlier forks one (`ru_maxrss` is what such a process reports under RUSAGE_SELF)."""
    script = textwrap.dedent(f"""
        import json, resource, sys
        from kernels_eval.harness.release_view import read_release_view
        from kernels_eval.harness.runner import EvalConfig, evaluate
        rows = evaluate({str(ADVERSARIAL / case)!r}, read_release_view({str(release.path)!r}),
                        config=EvalConfig(device="cpu", call_timeout_s=120.0), ops=["rms_norm"])
        use = resource.getrusage(resource.RUSAGE_SELF)
        with open("/proc/self/status") as status:
            (hwm_kib,) = [int(line.split()[1]) for line in status if line.startswith("VmHWM:")]
        print(json.dumps({{"rss": hwm_kib * 1024, "ru_maxrss": use.ru_maxrss * 1024,
                          "cpu_s": use.ru_utime + use.ru_stime, "stage": rows[0]["stage"], "error": rows[0]["error"],
                          "fallbacks": rows[0]["fallbacks"]}}))
    """)
    peak = (f"import os, sys\nheld = b'x' * {parent_peak_bytes}\n"  # written whole: resident
            f"os.execv(sys.executable, [sys.executable, '-c', {script!r}])\n")
    run = subprocess.run([sys.executable, "-c", peak if parent_peak_bytes else script], capture_output=True,
                         text=True, timeout=900,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_a_sparse_log_costs_the_evaluator_no_memory(release, tmp_path):
    # run from a process that first held more than the bound, as a pytest process that ran a large test before
    # does: its peak reaches the evaluator's ru_maxrss (the check that it did), never its VmHWM
    got = _measured("sparse_log", release, tmp_path, parent_peak_bytes=RSS_BOUND_BYTES + (256 << 20))
    assert got["stage"] == "compile" and "exited with status 3" in got["error"]
    assert got["ru_maxrss"] > RSS_BOUND_BYTES, got
    assert got["rss"] < RSS_BOUND_BYTES, got


def test_forged_observation_records_cost_bounded_cpu(release, tmp_path):
    got = _measured("forged_observations", release, tmp_path)
    assert got["stage"] == "compile" and "records forged" in got["error"], got["error"]
    assert got["cpu_s"] < CPU_BOUND_S, got
    assert len(got["fallbacks"]) <= MAX_RECORDS


def test_observation_records_are_capped_and_found_with_sets():
    lines = [f"host\tforged {i}" for i in range(100_000)] + ["op\tmm"] * 5 + ["\x1b[2Kjunk"] * 3
    records = parse_records(lines)
    assert len(records["host"]) == MAX_RECORDS and records["host"].dropped == 100_000 - MAX_RECORDS
    assert records["op"] == {"mm": 5}
    assert records["tamper"] == ["unreadable observation record '\\x1b[2Kjunk'"]


# ---- candidate text ---------------------------------------------------------------------------------------------

HOSTILE = "bad \ud800 surrogate\x1b[2K\r\x1b[32mrms_norm  4/4 done\x1b[0m\u202e" + "x" * 10_000


def test_hostile_text_is_made_inert_and_encodable():
    text = clean(HOSTILE)
    text.encode("utf-8")  # a lone surrogate would raise here
    assert "\x1b" not in text and "\r" not in text and "\u202e" not in text
    assert "\\ud800" in text and "\\x1b[2K" in text and "characters cut" in text and len(text) < 2100
    assert "\n" not in terminal("a\nb\x1b")
    row = clean_row({"error": HOSTILE, "fallbacks": [HOSTILE] * 100, "operator": "rms_norm"})
    assert len(row["fallbacks"]) == 65 and row["fallbacks"][-1] == "… and 36 more"
    assert "\x1b" not in json.dumps(row, ensure_ascii=False)


def test_hostile_error_text_keeps_the_results_and_the_terminal_clean(release, tmp_path):
    out = tmp_path / "r.parquet"
    run = subprocess.run([HOTSHAPE, "eval", str(ADVERSARIAL / "hostile_text"), "--release", str(release.path),
                          "--device", "cpu", "--ops", "rms_norm", "--out", str(out), "--progress"],
                         capture_output=True, timeout=600)
    assert run.returncode == 1, run.stderr.decode(errors="replace")  # judged, nothing passed: not exit 2
    for stream in (run.stdout, run.stderr):
        assert b"\x1b" not in stream and b"\r" not in stream and "\u202e".encode() not in stream
    rows = read_results(out).to_pylist()
    assert rows and all(r["stage"] == "compile" and "\\ud800" in r["error"] and "\\x1b" in r["error"] for r in rows)
    assert all(len(r["error"]) < 2100 for r in rows)
    scored = subprocess.run([HOTSHAPE, "score", str(out), "--release", str(release.path)], capture_output=True,
                            timeout=300)
    assert scored.returncode == 0 and b"\x1b" not in scored.stdout, scored.stderr


def test_a_row_of_any_content_is_written():
    row = result_row({"submission": "s\ud800", "release": "r", "run_id": "x", "run": 0, "hardware": "cpu",
                      "device": "cpu", "evaluated_at": "2026-12-04T00:00:00+00:00"},
                     Problem({"problem_id": "p1", "operator": "rms_norm", "init_kwargs": "{}", "input_kwargs": "{}"}),
                     Verdict(error=HOSTILE, fallbacks=[HOSTILE]), None, None, "cpu")
    table = results_table([row])
    assert table.num_rows == 1 and "\\ud800" in table.column("submission")[0].as_py()


# ---- the physics check -----------------------------------------------------------------------------------------

def test_a_time_below_the_roofline_is_refused_with_both_numbers():
    p = Problem({"problem_id": "p1", "operator": "rms_norm", "init_kwargs": "{}", "input_kwargs": "{}"})
    done = Verdict(stage="done", compiled=True, correct=True, native=True, t_measured_s=41e-6, t_p10_s=40e-6,
                   t_p90_s=43e-6, t_event_s=45e-6, n_timed=100)
    row = result_row({}, p, done, None, 63e-6, "cuda")
    assert row["stage"] == "performance" and row["t_measured_s"] is None and row["roofline_fraction"] is None
    assert row["t_p10_s"] is None and row["t_event_s"] is None
    assert "41.000 µs" in row["error"] and "63.000 µs" in row["error"] and "1.537 > 1" in row["error"]
    fine = result_row({}, p, done, None, 20e-6, "cuda")
    assert fine["stage"] == "done" and fine["t_measured_s"] == 41e-6
    assert fine["roofline_fraction"] == pytest.approx(20 / 41)


# ---- memory a process's RSS does not show ------------------------------------------------------------------------

def test_memfd_held_by_a_process_is_counted_without_a_cgroup(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import os, sys, time
        fd = os.memfd_create("held")
        chunk = b"x" * (16 << 20)
        for _ in range(32):
            os.write(fd, chunk)  # 512 MiB, written, never mapped: in no RSS
        print("ready", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        _, memory, _ = limits.ProcessTree(child.pid).usage()
        assert memory >= 512 << 20
    finally:
        child.kill()
        child.wait()


def test_no_cgroup_is_refused_unless_opted_out(release, monkeypatch, tmp_path):
    monkeypatch.delenv("HOTSHAPE_MEMORY_CGROUP", raising=False)
    monkeypatch.setattr(limits, "CGROUP_ROOT", tmp_path / "no-cgroups")  # a host where none can be made
    assert not limits.cgroup_available()
    with pytest.raises(limits.CgroupRequired, match="--no-memory-cgroup"):
        evaluate(ADVERSARIAL / "honest", release, config=EvalConfig(**CONFIG), ops=["rms_norm"])
    rows = evaluate(ADVERSARIAL / "memfd_memory", release, ops=["rms_norm"],
                    config=EvalConfig(**CONFIG, memory_gb=1.5, memory_cgroup=False))
    row = _only(rows)
    assert row["memory_accounting"] == "process"
    assert row["stage"] == "compile" and "host memory" in row["error"] and "limit 1.5 GiB" in row["error"]
