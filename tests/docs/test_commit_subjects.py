"""Commit subjects say what changed in at most 72 characters (AGENTS.md "Commits"), from the rule's start on."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# The last commit before the rule: the subjects before it stay as history wrote them.
RULE_STARTS_AFTER = "a931f1e3e819ec1c6e7ef0a340a6c80f99f9eceb"
LIMIT = 72
# Subjects that landed on main past the limit: history is not rewritten, so each is named here once (full hash).
LANDED_LONG = frozenset({"ca34ea34595c5d3c499e393a942b1db1af32c5ef",  # 73 characters
                         "12c05a91c06375dd646a4cdfa0d152efe57e457b",  # 73 characters
                         "bd5b09f16b7f66640d148725070dcc4f494d0290"})  # 73 characters


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)


def long_subjects(log: str) -> list[str]:
    """`hash subject` lines of `git log --format='%H %s'` output whose subject runs past LIMIT characters (those of
    LANDED_LONG aside)."""
    return [line for line in log.splitlines() if line and len(line.split(" ", 1)[-1]) > LIMIT
            and line.split(" ", 1)[0] not in LANDED_LONG]


def test_commit_subjects_since_the_rule_fit_in_72_characters():
    if shutil.which("git") is None or _git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip("not a git checkout: no history to check")
    if _git("merge-base", "--is-ancestor", RULE_STARTS_AFTER, "HEAD").returncode != 0:
        pytest.skip(f"{RULE_STARTS_AFTER[:7]} is not in this checkout's history (a shallow clone)")
    log = _git("log", "--format=%H %s", f"{RULE_STARTS_AFTER}..HEAD")
    assert log.returncode == 0, log.stderr
    # a long subject on your branch: shorten it (git rebase -i, reword) before it lands; history is not rewritten
    assert long_subjects(log.stdout) == []


def test_a_long_subject_is_caught():
    ok = "a" * LIMIT
    assert long_subjects(f"1234567 {ok}\n89abcde {ok}b\n") == [f"89abcde {ok}b"]
    landed = next(iter(LANDED_LONG))
    assert long_subjects(f"{landed} {ok}b\n") == []
