"""Every operator is complete where it lives (AGENTS.md "Adding an operator"): its folder catalogue/operators/<op>/
holds a torch-free work model with its declared traits (__init__.py), its taxonomy rules (taxonomy.yaml, each
ranked) and, where it has one, its shape extraction (shapes.py `extract`); a benchmarkable one has a torch
reference and its float64 oracle; and every folder is a listed operator."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

from catalogue import registry
from catalogue.vocabulary import OPERATOR_TRAITS
from catalogue.operators import MODELLED_OPERATORS, OPERATORS, load_shapes, load_work

REPO = Path(__file__).resolve().parents[2]
WORK_MODEL = ("INIT_KEYS", "INPUT_KEYS", "OUTPUTS", "INPLACE", "TOLERANCE", "SMOKE", "flops", "bytes_read",
              "bytes_written")


def missing_parts(name: str, root: Path = REPO) -> list[str]:
    """What operator `name` lacks of the places an operator lives (empty when it is complete)."""
    w = load_work(name)
    here = f"catalogue/operators/{name}"
    missing = [f"{here}/__init__.py {attr}" for attr in WORK_MODEL if not hasattr(w, attr)]
    if not hasattr(w, "path") and not hasattr(w, "PATH"):
        missing.append(f"{here}/__init__.py path or PATH")
    try:
        registry.traits(name)
    except ValueError as exc:
        missing.append(str(exc))
    rules = root / here / "taxonomy.yaml"
    doc = yaml.safe_load(rules.read_text(encoding="utf-8")) if rules.is_file() else None
    ranked = [r for section in ("op_rules", "kernel_rules") for r in ((doc or {}).get(section) or [])
              if isinstance(r, dict) and isinstance(r.get("rank"), int)]
    if not ranked:
        missing.append(f"{here}/taxonomy.yaml: a ranked op or kernel rule")
    shapes = load_shapes(name)
    if shapes is not None and not callable(getattr(shapes, "extract", None)):
        missing.append(f"{here}/shapes.py extract")
    if name in OPERATORS:
        if not (root / "kernels_eval" / "operators" / f"{name}.py").is_file():
            missing.append(f"kernels_eval/operators/{name}.py")
        oracles = "".join(p.read_text(encoding="utf-8") for p in (root / "tests" / "kernels_eval").glob("ke_oracles*.py"))
        if not re.search(rf"\b{name}\b", oracles):
            missing.append(f"tests/kernels_eval/ke_oracles*.py: {name}")
    return missing


def test_every_folder_is_a_listed_operator():
    folders = {p.name for p in (REPO / "catalogue" / "operators").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(OPERATORS + MODELLED_OPERATORS)


@pytest.mark.parametrize("name", sorted(OPERATORS + MODELLED_OPERATORS))
def test_every_operator_is_complete(name):
    assert missing_parts(name) == []


def test_traits_are_read_from_the_work_models():
    # the serving-phase rules read these sets; each name here is declared in its own work model, not in ingest
    assert registry.operators_with("attention") == {"attention_forward", "unified_attention", "paged_attention_decode",
                                                    "mla_decode_attention"}
    assert registry.operators_with("not_serving") == {"group_norm"}
    assert registry.operators_with("paged_kv") == {"unified_attention", "paged_attention_decode"}
    assert registry.operators_with("kv_cache_write") == {"reshape_and_cache"}
    assert registry.operators_with("moe_from_grouped_mm") == {"fused_moe"}
    assert registry.operators_with("sampling") == {"topk_filter"}
    assert registry.operators_with("hosts_gemm_kernels") == {"convolution"}
    assert registry.operators_with("dense_gemm") == {"gemm"}
    assert registry.operators_with("qkv_rotary") == {"fused_qkv_rope"}
    assert set(OPERATOR_TRAITS) == {"attention", "not_serving", "paged_kv", "kv_cache_write", "moe_from_grouped_mm",
                                    "dense_gemm", "hosts_gemm_kernels", "sampling", "qkv_rotary"}
    # decode kernels say decode whatever the shape; the varlen ones read theirs
    assert registry.phase_of_shape("paged_attention_decode", {}) == "decode"
    assert registry.phase_of_shape("unified_attention", {"num_seqs": 4, "num_tokens": 4}) == "decode"
    assert registry.phase_of_shape("unified_attention", {"num_seqs": 4, "num_tokens": 9}) is None
    assert registry.phase_of_shape("attention_forward", {"seq_lens": [7], "is_causal": True}) == "prefill"
    assert registry.phase_of_shape("attention_forward", {"seq_lens": [7]}) is None  # bidirectional: no phase
    assert registry.phase_of_shape("rms_norm", {"seq_lens": [7]}) is None


def test_an_incomplete_operator_is_caught(tmp_path, monkeypatch):
    (tmp_path / "catalogue" / "operators" / "rms_norm").mkdir(parents=True)
    (tmp_path / "catalogue" / "operators" / "rms_norm" / "taxonomy.yaml").write_text("op_rules:\n  - {op: rms}\n")
    (tmp_path / "tests" / "kernels_eval").mkdir(parents=True)
    (tmp_path / "tests" / "kernels_eval" / "ke_oracles.py").write_text("# no oracle here\n")
    assert missing_parts("rms_norm", tmp_path) == ["catalogue/operators/rms_norm/taxonomy.yaml: a ranked op or kernel rule",
                                                   "kernels_eval/operators/rms_norm.py",
                                                   "tests/kernels_eval/ke_oracles*.py: rms_norm"]
    w = load_work("group_norm")
    monkeypatch.setattr(w, "TRAITS", frozenset({"attention"}))
    monkeypatch.setattr(load_shapes("group_norm"), "extract", None)
    registry.traits.cache_clear()
    try:
        assert missing_parts("group_norm", tmp_path) == [
            "catalogue/operators/group_norm/__init__.py: an attention operator defines phase_of_shape(shape)",
            "catalogue/operators/group_norm/taxonomy.yaml: a ranked op or kernel rule",
            "catalogue/operators/group_norm/shapes.py extract"]
    finally:
        registry.traits.cache_clear()


# The agent's knowledge base matches the word "gemm" in kernel text, not the operator; the library baseline's table
# holds one entry per operator (its torch library path), as kernels_eval/operators/ holds one reference each.
NAMES_ALLOWED = {"kernels_eval/agent/knowledge.py", "kernels_eval/library/paths.py"}


def operator_names_in_code(root: Path = REPO) -> list[str]:
    """`file:line name` for each string literal that is an operator's name in the packages' code (outside the
    operators' own folders and references): code reads a declared trait instead."""
    names = set(OPERATORS + MODELLED_OPERATORS)
    found = []
    for package in ("ingest", "weighting", "release", "flow", "kernels_eval", "pipelines"):
        for path in sorted((root / package).rglob("*.py")):
            where = path.relative_to(root).as_posix()
            if where.startswith("kernels_eval/operators/") or where in NAMES_ALLOWED:
                continue
            found += [f"{where}:{node.lineno} {node.value}" for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                      if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names]
    return found


def test_code_reads_traits_not_operator_names(tmp_path):
    assert operator_names_in_code() == []
    (tmp_path / "ingest").mkdir()
    (tmp_path / "ingest" / "phases.py").write_text('def f(op):\n    return op == "fused_moe"\n')
    assert operator_names_in_code(tmp_path) == ["ingest/phases.py:2 fused_moe"]
