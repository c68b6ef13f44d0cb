"""Fixtures shared by every test package: where the public traces and reference data live (in the checkout)."""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Public traces of other projects (tests/fixtures/traces/SOURCES.md: provenance, licenses, what was cut).
PUBLIC_TRACES = REPO / "tests" / "fixtures" / "traces"
# The published Atrex-Bench data files (examples/atrex-bench/SOURCES.md, Apache-2.0).
ATREX = REPO / "examples" / "atrex-bench"
EXAMPLES = REPO / "examples"


def load_script(path: Path, name: str | None = None):
    """A script that is not a package module (benchmarks/*.py) imported from its path."""
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def results_key_dir(tmp_path_factory, monkeypatch) -> Path:
    """A results key of the test session's own (HOTSHAPE_KEY_DIR), never the host's ~/.config/hotshape."""
    path = tmp_path_factory.getbasetemp() / "results-key"
    monkeypatch.setenv("HOTSHAPE_KEY_DIR", str(path))
    return path


@functools.lru_cache(maxsize=1)
def _cgroup_here() -> bool:
    from kernels_eval.harness.limits import cgroup_available

    return cgroup_available()


@pytest.fixture(autouse=True)
def memory_accounting_here(monkeypatch) -> str:
    """The evaluator's memory accounting on this machine: a cgroup where one can be made (what `hotshape eval`
    requires), else the opt-out (HOTSHAPE_MEMORY_CGROUP=optional: RSS plus held memfd/shm), so the evaluator's
    tests run on a CI runner that cannot delegate cgroups; tests of the refusal itself set it back."""
    if _cgroup_here():
        return "cgroup"
    monkeypatch.setenv("HOTSHAPE_MEMORY_CGROUP", "optional")
    return "process"


@pytest.fixture(scope="session")
def public_traces() -> Path:
    """The public trace fixtures (tests/fixtures/traces)."""
    return PUBLIC_TRACES


@pytest.fixture(scope="session")
def atrex_dir() -> Path:
    """The published Atrex-Bench data (examples/atrex-bench)."""
    return ATREX


@pytest.fixture(scope="session")
def examples_dir() -> Path:
    """The project's own example traces and fleet.yaml."""
    return EXAMPLES


# The inner loop is `pytest -m "not slow"` (README, "Which tests to run when"). A file whose tests are all slow (it
# drives Dagster runs, the evaluator's worker processes, a Dask cluster, a browser, or ingests whole traces) is
# named in SLOW_FILES; slow tests of an otherwise quick file are named by function in SLOW_TESTS (one place, so
# that files others are changing need no edit). The split follows the CPU seconds of each test on the 2-core
# machine (benchmarks/results/test_split.txt: the numbers and how they were taken).
SLOW_FILES = frozenset({
    "tests/ingest/test_cluster.py",
    "tests/ingest/test_fast_paths.py",
    "tests/ingest/test_public_fixtures.py",
    "tests/ingest/test_store.py",
    "tests/kernels_eval/test_agent_feedback.py",
    "tests/kernels_eval/test_agent_optimize.py",
    "tests/kernels_eval/test_agent_workspace.py",
    "tests/kernels_eval/test_cli_finish.py",
    "tests/kernels_eval/test_eval_devices.py",
    "tests/kernels_eval/test_eval_gpu_streams.py",
    "tests/kernels_eval/test_eval_lanes.py",
    "tests/kernels_eval/test_harness_adversarial.py",
    "tests/kernels_eval/test_kernel_variants.py",
    "tests/kernels_eval/test_results_integrity.py",
    "tests/kernels_eval/test_run_references.py",
    "tests/kernels_eval/test_sandbox.py",
    "tests/kernels_eval/test_triton_cache.py",
    "tests/kernels_eval/test_triton_reference.py",
    "tests/kernels_eval/test_triton_reference_sm90.py",
    "tests/pipelines/test_assets.py",
    "tests/pipelines/test_automation.py",
    "tests/pipelines/test_batch_ingest.py",
    "tests/pipelines/test_checks.py",
    "tests/pipelines/test_commands.py",
    "tests/pipelines/test_definitions.py",
    "tests/pipelines/test_gpu_pool.py",
    "tests/pipelines/test_parquet_metadata.py",
    "tests/pipelines/test_postgres.py",
    "tests/pipelines/test_result_checks.py",
    "tests/release/test_build.py",
    "tests/release/test_concurrency.py",
    "tests/release/test_integrity.py",
    "tests/weighting/test_drift_report.py",
})


SLOW_TESTS = {
    "tests/ingest/test_kineto.py": {"test_op_chain_matches_brute_force",
                                    "test_names_are_decoded_only_where_rows_need_them"},
    "tests/ingest/test_kineto_events.py": {"test_memory_grows_with_what_is_kept_not_with_the_json"},
    "tests/ingest/test_unannotated_phases.py": {"test_unannotated_split_within_3_points"},
    "tests/kernels_eval/test_autotune_protocol.py": {
        "test_a_pinned_configuration_runs_and_the_call_reports_what_its_autotuner_would_consider"},
    "tests/kernels_eval/test_flashinfer_export.py": {"test_definitions_and_workloads_follow_the_schema"},
    "tests/kernels_eval/test_attention_variants.py": {
        "test_tma_attention_forward_matches_the_reference_in_the_interpreter"},
    "tests/kernels_eval/test_library_baseline.py": {  # each runs `hotshape` on a release (the rest are unit tests)
        "test_baseline_rows_are_marked_and_never_native", "test_score_shows_the_library_beside_the_submission",
        "test_leaderboard_keeps_the_library_off_the_ranking", "test_library_line_from_timed_rows",
        "test_child_processes_judge_alike_and_a_stalled_child_costs_one_problem_each"},
    "tests/kernels_eval/test_harness_io.py": {  # each runs a sandboxed evaluation (the rest are unit tests)
        "test_a_swapped_exchange_directory_deletes_no_host_file", "test_a_fifo_log_ends_in_a_row_not_a_hang",
        "test_a_sparse_log_costs_the_evaluator_no_memory", "test_forged_observation_records_cost_bounded_cpu",
        "test_hostile_error_text_keeps_the_results_and_the_terminal_clean",
        "test_no_cgroup_is_refused_unless_opted_out"},
}


def stale_slow_names(root: Path = REPO) -> list[str]:
    """SLOW_FILES entries that are no file and SLOW_TESTS functions their file does not define: a rename would
    otherwise move slow tests into the quick subset unseen."""
    stale = [name for name in sorted(SLOW_FILES) if not (root / name).is_file()]
    for name, functions in sorted(SLOW_TESTS.items()):
        path = root / name
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        stale += [f"{name}::{f}" for f in sorted(functions)
                  if not re.search(rf"^\s*def {f}\(", text, re.MULTILINE)]
    return stale


def pytest_collection_modifyitems(config, items):
    """Mark the tests SLOW_FILES and SLOW_TESTS name slow (tests/docs/test_slow_split.py fails on a stale name)."""
    for item in items:
        where = item.path.resolve().relative_to(REPO).as_posix()
        if where in SLOW_FILES or getattr(item, "originalname", item.name) in SLOW_TESTS.get(where, ()):
            item.add_marker(pytest.mark.slow)
