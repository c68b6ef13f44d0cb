"""A pytest plugin that records each test's CPU seconds (this process and its reaped children) and wall seconds.

CPU seconds hardly move with the load of a shared machine, which wall seconds do (8x on a 2-core machine that
runs 16 processes), so the quick subset's split (tests/conftest.py SLOW_FILES, SLOW_TESTS) is made by them:

    PYTHONPATH=$PWD:$PWD/benchmarks .venv/bin/python -m pytest -p cpu_seconds_plugin -m "not slow" tests/
    # then: sort -t$'\\t' -k2 -rn cpu_seconds.tsv | head

Rows are appended to $HOTSHAPE_TEST_SECONDS (default cpu_seconds.tsv): node id, CPU s, wall s.
"""

from __future__ import annotations

import os
import resource
import time

import pytest


def _cpu_s() -> float:
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cpu, wall = _cpu_s(), time.perf_counter()
    yield
    with open(os.environ.get("HOTSHAPE_TEST_SECONDS", "cpu_seconds.tsv"), "a", encoding="utf-8") as out:
        out.write(f"{item.nodeid}\t{_cpu_s() - cpu:.3f}\t{time.perf_counter() - wall:.3f}\n")
