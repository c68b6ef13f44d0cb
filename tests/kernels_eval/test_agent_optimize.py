"""The optimize loop on CPU: the search proposer runs end to end (records every candidate, accepts nothing and
says why), the llm proposer's loop runs against a replayed endpoint on 127.0.0.1 (token counts recorded,
feedback and knowledge in its prompts), and optimization dropout restarts the proposer after K stale
iterations. Acceptance itself (GPU timings) is a pure decision tested on rows."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kernels_eval.agent import optimize as opt
from kernels_eval.agent.proposers.search import SearchProposer, rewrite, tunable_sites
from tests.conftest import REPO
from tests.docs.test_docs import _tables, documented

from .llm_replay import ReplayServer, recorded_responses

REFERENCE = Path(__file__).resolve().parents[2] / "examples" / "submissions" / "triton_reference"


@pytest.fixture(scope="module")
def release(atrex_dir, tmp_path_factory):
    from kernels_eval.harness.release_view import read_release_view
    from release.atrex import import_atrex

    out = tmp_path_factory.mktemp("optimize") / "release"
    import_atrex(atrex_dir, out)
    return read_release_view(out)


def _config():
    from kernels_eval.harness.runner import EvalConfig

    return EvalConfig(device="cpu", call_timeout_s=30.0)


def test_search_runs_end_to_end_on_cpu_records_accepts_nothing_and_drops_out(release, tmp_path):
    restarts = []

    class Counting(SearchProposer):
        def restart(self):
            restarts.append(self.context)
            super().restart()

    summary = opt.optimize("rms_norm", release, REFERENCE / "rms_norm.py", Counting(), _config(),
                           tmp_path / "out", budget=2, dropout_after=1)
    assert summary["iterations"] == 2 and summary["accepted"] == [] and summary["note"] == opt.CPU_REASON
    it = pq.read_table(tmp_path / "out" / "iterations.parquet").to_pylist()
    assert [r["iteration"] for r in it] == [0, 1, 2] and not any(r["accepted"] for r in it)
    assert all(r["reason"] == opt.CPU_REASON and r["correct"] == r["problems"] == 56 for r in it)
    assert len({r["file_sha256"] for r in it}) == 3 and all(" -> " in r["note"] for r in it[1:])
    assert json.loads(it[1]["feedback_json"])[0]["stage"] == "done"
    assert pq.read_table(tmp_path / "out" / "problems.parquet").num_rows == 3 * 56
    for name in ("iterations.parquet", "problems.parquet"):  # every column described, as docs/tables.md lists it
        rows = documented(pq.read_schema(tmp_path / "out" / name))
        assert all(text for *_, text in rows) and rows in _tables((REPO / "docs" / "tables.md").read_text()), name
    assert (tmp_path / "out" / "rms_norm.py").read_text() == (REFERENCE / "rms_norm.py").read_text()
    # K = 1: every iteration without improvement restarts the proposer's context, the trail stays whole
    assert summary["dropouts"] == 2 and restarts == [0, 1]
    assert [r["dropout"] for r in it] == [False, True, True] and [r["context"] for r in it] == [0, 0, 1]
    # the restarted context steps wider from the accepted file (x4 where the first stepped x2)
    assert "TARGET_ELEMENTS 4096 -> 8192" in it[1]["note"] and "TARGET_ELEMENTS 4096 -> 16384" in it[2]["note"]


def test_acceptance_needs_correct_native_and_faster():
    def j(t, ok=True):
        rows = [{"problem_id": "a", "stage": "done" if ok else "adoption", "correct": True, "native": ok,
                 "error": None if ok else "PyTorch compute", "t_measured_s": t}]
        return opt.Judgement(rows=rows, feedback=[], weighted_time_s=opt.weighted_time(rows, {"a": 1.0}),
                             s_op=None, eval_s=0.0)

    assert opt.decide(j(9e-6), 10e-6, "cuda", 0.01)[0]
    assert not opt.decide(j(9.95e-6), 10e-6, "cuda", 0.01)[0]
    assert not opt.decide(j(5e-6, ok=False), 10e-6, "cuda", 0.01)[0]
    assert opt.decide(j(None), None, "cpu", 0.01) == (False, opt.CPU_REASON)
    rows = [{"problem_id": "a", "t_measured_s": 1.0}, {"problem_id": "b", "t_measured_s": 3.0}]
    assert opt.weighted_time(rows, {"a": 0.75, "b": 0.25}) == pytest.approx(1.5)


def test_acceptance_weighs_the_fleets_time_and_the_median_problem():
    """Three problems, the first holding the weight; S_op is the median problem's roofline fraction."""
    weights = {"a": 0.98, "b": 0.01, "c": 0.01}

    def j(times, fractions):
        rows = [{"problem_id": p, "stage": "done", "correct": True, "native": True, "error": None,
                 "t_measured_s": t, "roofline_fraction": f} for p, t, f in zip("abc", times, fractions)]
        return opt.Judgement(rows=rows, feedback=[], weighted_time_s=opt.weighted_time(rows, weights),
                             s_op=opt.s_op(rows), eval_s=0.0)

    base = j([2e-6, 10e-6, 20e-6], [0.05, 0.30, 0.40])
    weighted_only = j([1.6e-6, 10e-6, 20e-6], [0.0625, 0.30, 0.40])   # weight's problem 20% faster, median same
    median_only = j([2e-6, 8e-6, 20e-6], [0.05, 0.375, 0.40])       # median problem faster, weighted time same
    trade = j([1.6e-6, 20e-6, 40e-6], [0.0625, 0.15, 0.20])          # weighted faster, the median halved
    for cand, expected in ((weighted_only, True), (median_only, True), (trade, False)):
        ok, reason = opt.decide(cand, base.weighted_time_s, "cuda", 0.02, base.s_op)
        assert ok is expected, reason
        assert "S_op" in reason
    # without S_op (no roofline in the release view) the weighted time alone decides
    assert opt.decide(weighted_only, base.weighted_time_s, "cuda", 0.02, None)[0]
    assert not opt.decide(median_only, base.weighted_time_s, "cuda", 0.02, None)[0]


def test_search_rewrites_only_the_declared_literals():
    src = (REFERENCE / "mla_decode_attention.py").read_text()
    sites = tunable_sites(src)
    assert {"num_warps", "num_stages", "BLOCK_N", "KEYS_PER_SPLIT"} <= {s.name for s in sites}
    assert {s.name: s.kind for s in sites}["KEYS_PER_SPLIT"] == "tile"
    assert "LENS_CHUNK" not in {s.name for s in sites}  # a loop chunk of the lengths, not a tile of the work
    site = next(s for s in sites if s.name == "BLOCK_N")
    new = rewrite(src, [(site, site.value * 2)])
    ast.parse(new)
    changed = [(a, b) for a, b in zip(src.splitlines(), new.splitlines()) if a != b]
    assert len(changed) == 1 and str(site.value * 2) in changed[0][1]


def test_llm_loop_runs_against_recorded_exchanges(release, tmp_path):
    from kernels_eval.agent.knowledge import KnowledgeBase
    from kernels_eval.agent.proposers.llm import LLMProposer

    problems = [{"problem_id": p["problem_id"], "init_kwargs": json.loads(p["init_kwargs"]),
                 "input_kwargs": json.loads(p["input_kwargs"]), "weight": 0.01}
                for p in release.problems if p["operator"] == "rms_norm"]
    with ReplayServer(recorded_responses()) as server:
        proposer = LLMProposer("rms_norm", problems, url=server.url, key="test-key", model="kernel-writer-1",
                               knowledge=KnowledgeBase.build(sealed={"vllm"}), sealed={"vllm"})
        summary = opt.optimize("rms_norm", release, REFERENCE / "rms_norm.py", proposer, _config(),
                               tmp_path / "out", budget=2, dropout_after=5)
    it = pq.read_table(tmp_path / "out" / "iterations.parquet").to_pylist()
    assert summary["proposer"] == "llm" and summary["iterations"] == 2 and summary["tokens_total"] == 5923 + 6795
    assert [(r["tokens_prompt"], r["tokens_completion"]) for r in it[1:]] == [(5312, 611), (6140, 655)]
    assert it[1]["correct"] == 56 and "aten::" in it[2]["reason"] + it[2]["feedback_json"]  # 2nd: a fallback
    first, second = (r["body"]["messages"] for r in server.requests)
    assert server.requests[0]["auth"] == "Bearer test-key" and server.requests[0]["path"] == "/v1/chat/completions"
    prompt = first[1]["content"]
    assert "Contract:" in prompt and "def forward(self, x: torch.Tensor" in prompt and "knowledge base" in prompt
    assert "vllm" not in json.dumps(first).lower()
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert "Feedback:" in second[-1]["content"]


def test_the_loop_imports_without_polars_duckdb_msgspec_or_dagster():
    """The GPU machine has none of them: the loop, the search proposer, feedback records and the GPU script's
    imports must work without (records fall back to dataclasses)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "for m in ('polars', 'duckdb', 'msgspec', 'dagster'): sys.modules[m] = None\n"
        "import benchmarks.optimize_gpu\n"
        "from kernels_eval.agent.feedback import problem_feedback\n"
        "from kernels_eval.agent.records import as_builtins\n"
        "row = {'problem_id': 'p', 'operator': 'rms_norm', 'stage': 'correctness', 'compiled': True,\n"
        "       'correct': False, 'native': True, 'error': \"input set 1, {}: output 'out': bad\", 'device': 'cuda'}\n"
        "from kernels_eval.harness.verdict import Verdict\n"
        "d = as_builtins(problem_feedback(row, Verdict(stage='correctness', kernel_us={'k': 2.0}), weight=0.5))\n"
        "assert d['mismatch']['output'] == 'out' and d['kernels'] == [{'name': 'k', 'time_us': 2.0}], d\n"
        "print('ok')\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[2])
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]


def _timed(kernels: dict, t_s: float, weight: float = 1.0):
    from kernels_eval.agent.feedback import Adoption, KernelTime, ProblemFeedback

    return ProblemFeedback(problem_id="p0", operator="paged_attention_decode", weight=weight, stage="done",
                           compiled=True, correct=True, native=True, error=None, mismatch=None,
                           adoption=Adoption(native=True, native_fraction=1.0), t_measured_s=t_s, t_event_s=t_s,
                           kernels=[KernelTime(name=k, time_us=v) for k, v in kernels.items()])


def test_a_short_call_of_several_kernels_tries_fewer_launches_before_more_parallelism():
    from kernels_eval.agent.proposers.search import regime

    src = (REFERENCE / "paged_attention_decode.py").read_text()
    split = [_timed({"paged_decode_split_kernel": 4.1, "paged_decode_reduce_kernel": 1.9}, 7e-6, 3.0),
             _timed({"paged_decode_split_kernel": 3.0}, 4e-6, 1.0)]
    one = [_timed({"paged_decode_split_kernel": 4.1}, 5e-6)]
    launch = opt.LoopState(operator="paged_attention_decode", accepted_source=src, accepted_time_s=7e-6,
                           accepted_feedback=split)
    latency = opt.LoopState(operator="paged_attention_decode", accepted_source=src, accepted_time_s=5e-6,
                            accepted_feedback=one)
    assert regime(launch) == "launch" and regime(latency) == "latency"
    # two kernels of 7 us each in a 14 us call are short kernels; one kernel of 14 us is not
    two = [_timed({"mla_decode_kernel": 7.0, "mla_decode_merge_kernel": 7.0}, 14e-6)]
    long = [_timed({"paged_decode_split_kernel": 14.0}, 14e-6)]
    assert regime(opt.LoopState(operator="paged_attention_decode", accepted_source=src, accepted_time_s=14e-6,
                                accepted_feedback=two)) == "launch"
    assert regime(opt.LoopState(operator="paged_attention_decode", accepted_source=src, accepted_time_s=14e-6,
                                accepted_feedback=long)) in ("memory", "compute")

    def notes(state, n):
        proposer, out = SearchProposer(), []
        for _ in range(n):
            cand = proposer.propose(state)
            state.tried.add(opt.sha256_text(cand.source))
            out.append(cand.note)
        return out

    first = notes(launch, 4)
    assert all(n.startswith("[launch-bound]") for n in first)
    # fewer programs/splits, then a larger tile, before anything adds programs
    assert "TARGET_PROGRAMS 264 -> 132" in first[0] and "BLOCK_N 64 -> 128" in " ".join(first[:3])
    assert "BLOCK_N 64 -> 32" in notes(latency, 1)[0]
