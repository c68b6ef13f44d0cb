"""The guarded functions (harness/guarded.py) are held as objects and every one resolves: a function renamed or
removed in torch, Triton or the harness fails here, where it used to be skipped silently by a name lookup."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from kernels_eval.harness import guarded, profiler_guard  # noqa: E402


def test_every_guarded_function_resolves_to_a_callable_held_by_its_owner():
    entries = guarded.entries()
    assert len(entries) >= 50
    labels = [label for label, _, _ in entries]
    assert len(labels) == len(set(labels))
    for label, owner, attr in entries:
        assert label.rsplit(".", 1)[-1] == attr, label
        assert callable(getattr(owner, attr)), label


def test_the_profiler_entry_points_torch_has_are_guarded_in_each_holder():
    present = set(profiler_guard._originals())
    assert present  # torch's autograd module has the entry points the guard wraps
    names = set(guarded.names())
    for name in present:
        assert f"torch._C._autograd.{name}" in names


def test_a_replaced_function_is_named_and_a_restored_one_is_not(monkeypatch):
    before = guarded.take()
    assert guarded.replaced(before) == []
    monkeypatch.setattr(torch.Tensor, "clone", lambda self: self)
    monkeypatch.setattr(torch.cuda.Event, "elapsed_time", lambda self, other: 1.0)
    assert guarded.replaced(before) == ["torch.Tensor.clone", "torch.cuda.Event.elapsed_time"]
    monkeypatch.undo()
    assert guarded.replaced(before) == []
