"""Tensors between the worker and the parent as raw files: every dtype the references make or return round-trips
byte for byte, and a file that does not match its description is refused."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from kernels_eval import registry  # noqa: E402
from kernels_eval.harness import channel  # noqa: E402


def _reference_tensors() -> dict[str, list]:
    """{operator: tensors of its first smoke shape's inputs and outputs}."""
    found = {}
    for name in registry.operator_names():
        if not registry.is_benchmarkable(name):
            continue
        ref, smoke = registry.load_reference(name), registry.spec(name).smoke[0]
        inputs = ref.make_inputs(**smoke.inputs, device="cpu", generator=torch.Generator().manual_seed(0))
        out = ref.Model(**smoke.init)(**inputs)
        outs = out.values() if isinstance(out, dict) else out if isinstance(out, (tuple, list)) else [out]
        found[name] = [t for t in [*inputs.values(), *outs] if isinstance(t, torch.Tensor)]
    return found


def _bytes(t):
    return t.contiguous().reshape(-1).view(torch.uint8)


def test_every_reference_dtype_round_trips(tmp_path):
    tensors = _reference_tensors()
    seen = {t.dtype for ts in tensors.values() for t in ts}
    assert {torch.bfloat16, torch.float32, torch.float8_e4m3fn, torch.int32, torch.int64} <= seen
    for name, ts in tensors.items():
        for i, t in enumerate(ts):
            for sent in (t, t.transpose(0, -1) if t.dim() > 1 else t, t[..., :1]):
                desc = channel.export_tensor(sent, str(tmp_path), f"{name}_{i}")
                assert desc["kind"] == "raw" and desc["dtype"] == str(t.dtype).removeprefix("torch.")
                got = channel.import_tensor(desc, str(tmp_path))
                assert got.dtype == sent.dtype and got.shape == sent.shape and torch.equal(_bytes(got), _bytes(sent))
    assert os.listdir(tmp_path) == []  # every file was removed once read


@pytest.mark.parametrize("dtype", [torch.bool, torch.float16, torch.uint8, torch.int8, torch.float8_e5m2, torch.float64])
def test_other_dtypes_and_empty_and_scalar_tensors_round_trip(tmp_path, dtype):
    """bool (masks a candidate may return), the other float8 and the rest, also empty and 0-d."""
    for t in ((torch.randn(5, 3) * 4).to(dtype), torch.zeros(0, 7, dtype=dtype), torch.tensor(3, dtype=dtype)):
        got = channel.import_tensor(channel.export_tensor(t, str(tmp_path), "t"), str(tmp_path))
        assert got.shape == t.shape and torch.equal(_bytes(got), _bytes(t))


def _raw(tmp_path, **over) -> dict:
    desc = channel.export_tensor(torch.arange(12, dtype=torch.int32).reshape(3, 4), str(tmp_path), "t")
    return {**desc, **over}


@pytest.mark.parametrize("over, match", [
    ({"shape": [3, 5]}, "bytes, not the"),
    ({"shape": [3, 2]}, "bytes, not the"),
    ({"dtype": "int64"}, "bytes, not the"),
    ({"dtype": "Tensor"}, "unknown tensor dtype"),
    ({"dtype": "__class__"}, "unknown tensor dtype"),
    ({"dtype": 3}, "unknown tensor dtype"),
    ({"shape": [3, -4]}, "bad tensor shape"),
    ({"shape": [3.0, 4]}, "bad tensor shape"),
    ({"shape": [True, 4]}, "bad tensor shape"),
    ({"device": "meta"}, "unknown tensor device"),
    ({"path": "/etc/passwd"}, "outside the exchange"),
])
def test_a_file_that_does_not_match_its_description_is_refused(tmp_path, over, match):
    with pytest.raises(ValueError, match=match):
        channel.import_tensor(_raw(tmp_path, **over), str(tmp_path))


def test_paths_leaving_the_exchange_are_refused(tmp_path):
    inside = tmp_path / "x"
    inside.mkdir()
    desc = _raw(tmp_path)  # written one level above the exchange directory
    with pytest.raises(ValueError, match="outside the exchange"):
        channel.import_tensor(desc, str(inside))
    link = inside / "t.raw"
    link.symlink_to(desc["path"])  # a link inside pointing out resolves outside
    with pytest.raises(ValueError, match="outside the exchange"):
        channel.import_tensor({**desc, "path": str(link)}, str(inside))
    with pytest.raises(ValueError, match="outside the exchange"):
        channel.import_tensor({**desc, "path": str(inside / ".." / "t.raw")}, str(inside))
    assert os.path.exists(desc["path"])  # nothing outside the exchange was removed


def test_a_truncated_file_is_refused(tmp_path):
    desc = _raw(tmp_path)
    os.truncate(desc["path"], 40)
    with pytest.raises(ValueError, match="40 bytes, not the 48"):
        channel.import_tensor(desc, str(tmp_path))
    assert not os.path.exists(desc["path"])
