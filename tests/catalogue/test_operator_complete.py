"""Every operator is complete where it lives (AGENTS.md "Adding an operator"): a torch-free work model with its
declared traits, a taxonomy entry, and for a benchmarkable one a torch reference and its float64 oracle."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from catalogue import registry
from catalogue.vocabulary import OPERATOR_TRAITS
from catalogue.work import MODELLED_OPERATORS, OPERATORS, load_work

REPO = Path(__file__).resolve().parents[2]
WORK_MODEL = ("INIT_KEYS", "INPUT_KEYS", "OUTPUTS", "INPLACE", "TOLERANCE", "SMOKE", "flops", "bytes_read",
              "bytes_written")


def missing_parts(name: str, root: Path = REPO) -> list[str]:
    """What operator `name` lacks of the places an operator lives (empty when it is complete)."""
    w = load_work(name)
    missing = [f"catalogue/work/{name}.py {attr}" for attr in WORK_MODEL if not hasattr(w, attr)]
    if not hasattr(w, "path") and not hasattr(w, "PATH"):
        missing.append(f"catalogue/work/{name}.py path or PATH")
    try:
        registry.traits(name)
    except ValueError as exc:
        missing.append(str(exc))
    taxonomy = yaml.safe_load((root / "ingest" / "taxonomy.yaml").read_text(encoding="utf-8"))
    if name not in taxonomy["operators"]:
        missing.append(f"ingest/taxonomy.yaml operators: {name}")
    if name in OPERATORS:
        if not (root / "kernels_eval" / "operators" / f"{name}.py").is_file():
            missing.append(f"kernels_eval/operators/{name}.py")
        oracles = "".join(p.read_text(encoding="utf-8") for p in (root / "tests" / "kernels_eval").glob("ke_oracles*.py"))
        if not re.search(rf"\b{name}\b", oracles):
            missing.append(f"tests/kernels_eval/ke_oracles*.py: {name}")
    return missing


@pytest.mark.parametrize("name", sorted(OPERATORS + MODELLED_OPERATORS))
def test_every_operator_is_complete(name):
    assert missing_parts(name) == []


def test_traits_are_read_from_the_work_models():
    # the serving-phase rules read these sets; each name here is declared in its own work model, not in ingest
    assert registry.operators_with("attention") == {"attention_forward", "unified_attention", "paged_attention_decode",
                                                    "mla_decode_attention"}
    assert registry.operators_with("not_serving") == {"group_norm"}
    assert set(OPERATOR_TRAITS) == {"attention", "not_serving"}
    # decode kernels say decode whatever the shape; the varlen ones read theirs
    assert registry.phase_of_shape("paged_attention_decode", {}) == "decode"
    assert registry.phase_of_shape("unified_attention", {"num_seqs": 4, "num_tokens": 4}) == "decode"
    assert registry.phase_of_shape("unified_attention", {"num_seqs": 4, "num_tokens": 9}) is None
    assert registry.phase_of_shape("attention_forward", {"seq_lens": [7], "is_causal": True}) == "prefill"
    assert registry.phase_of_shape("attention_forward", {"seq_lens": [7]}) is None  # bidirectional: no phase
    assert registry.phase_of_shape("rms_norm", {"seq_lens": [7]}) is None


def test_an_incomplete_operator_is_caught(tmp_path, monkeypatch):
    (tmp_path / "ingest").mkdir()
    (tmp_path / "ingest" / "taxonomy.yaml").write_text("operators: [rms_norm]\n")
    (tmp_path / "tests" / "kernels_eval").mkdir(parents=True)
    (tmp_path / "tests" / "kernels_eval" / "ke_oracles.py").write_text("# no oracle here\n")
    assert missing_parts("rms_norm", tmp_path) == ["kernels_eval/operators/rms_norm.py",
                                                   "tests/kernels_eval/ke_oracles*.py: rms_norm"]
    w = load_work("group_norm")
    monkeypatch.setattr(w, "TRAITS", frozenset({"attention"}))
    registry.traits.cache_clear()
    try:
        assert missing_parts("group_norm", tmp_path) == [
            "catalogue/work/group_norm.py: an attention operator defines phase_of_shape(shape)",
            "ingest/taxonomy.yaml operators: group_norm"]
    finally:
        registry.traits.cache_clear()
