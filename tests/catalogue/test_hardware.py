"""Hardware table and roofline arithmetic."""

from __future__ import annotations

import subprocess
import sys

import pytest

from catalogue.hardware import load_hardware
from catalogue.roofline import problem_roofline

NAMES = {"H200", "H100", "H20", "B200", "MI300X", "XPU-A", "A100-80GB", "A100-40GB", "V100", "L4", "L40S", "MI250X",
         "MI325X", "MI350X", "MI355X"}


def test_table_has_every_accelerator_with_sources():
    table = load_hardware()
    assert set(table) == NAMES
    for hw in table.values():
        assert hw.sources and hw.hbm_tbps > 0 and (hw.peak_tflops["bf16_tensor"] or hw.peak_tflops["fp16_tensor"]) > 0
    h200 = table["H200"]
    assert h200.peak_flops("fp8_tensor") == pytest.approx(2 * h200.peak_flops("bf16_tensor"), rel=1e-3)
    assert h200.measured_flops("bf16_tensor") == pytest.approx(744e12)
    assert h200.measured_bandwidth() == pytest.approx(4.19e12)
    assert table["H20"].measured_flops("bf16_tensor") is None
    with pytest.raises(ValueError, match="XPU-A has no tf32_tensor"):
        table["XPU-A"].peak_flops("tf32_tensor")


def test_catalogue_hardware_matches_atrex_configs(atrex_dir):
    import yaml

    table = load_hardware()
    path_map = {"bf16_tc": "bf16_tensor", "fp16_tc": "fp16_tensor", "fp8_e4m3_tc": "fp8_tensor",
                "fp32_strict": "fp32_vector"}
    for name in ("H20", "XPU-A"):
        cfg = yaml.safe_load((atrex_dir / "configs" / "hardware" / f"{name}.yaml").read_text())
        assert table[name].bandwidth() == pytest.approx(cfg["b_peak"]["hbm"])
        for theirs, ours in path_map.items():
            assert table[name].peak_flops(ours) == pytest.approx(cfg["p_peak"][theirs])


def test_roofline_hand_computed():
    h200 = load_hardware()["H200"]
    # RMSNorm 8192 x 4096 bf16: bytes 2*2*8192*4096 + 2*4096 = 134,225,920 at 4.8e12 B/s.
    r = problem_roofline("rms_norm", {"eps": 1e-6}, {"token_count": 8192, "hidden_size": 4096}, h200)
    assert r["bound"] == "memory" and r["t_roofline_s"] == pytest.approx(134_225_920 / 4.8e12)
    assert r["t_roofline_measured_s"] == pytest.approx(134_225_920 / 4.19e12)
    # GEMM 8192 x 28672 x 4096: 2*8192*28672*4096 FLOPs at 989.4e12 (datasheet) / 679e12 (measured).
    kw = {"m": 8192, "n": 28672, "k": 4096, "dtype": "bf16", "scaling": "none"}
    r = problem_roofline("gemm", {"scaling": "none"}, kw, "H200")
    flops = 2 * 8192 * 28672 * 4096
    assert r["bound"] == "compute" and r["t_roofline_s"] == pytest.approx(flops / 989.4e12)
    assert r["t_roofline_measured_s"] == pytest.approx(flops / 744e12)
    assert problem_roofline("gemm", {"scaling": "none"}, kw, "H20")["t_roofline_measured_s"] is None


def test_fp16_measured_ceiling_is_recorded():
    h200 = load_hardware()["H200"]
    assert h200.measured_flops("fp16_tensor") == pytest.approx(728e12)


@pytest.mark.parametrize("text,message", [
    ("H200: [1, 2]\n", "must be a mapping"),
    ("H200: {hbm_tbps: 4.8}\n", "lacks 'peak_tflops'"),
    ("X: {peak_tflops: {bf16_tensor: 1}, hbm_tbps: 1, sources: [s]}\n", "must name exactly the paths"),
    ("X: {peak_tflops: {bf16_tensor: -1, fp16_tensor: 1, fp8_tensor: 1, tf32_tensor: 1, fp32_vector: 1},"
     " hbm_tbps: 1, sources: [s]}\n", "bf16_tensor must be a positive number"),
    ("X: {peak_tflops: {bf16_tensor: 1, fp16_tensor: 1, fp8_tensor: 1, tf32_tensor: 1, fp32_vector: 1},"
     " hbm_tbps: 1}\n", "cites no sources"),
    ("X: [unclosed\n", "not valid YAML"),
])
def test_bad_tables_name_file_and_problem(tmp_path, text, message):
    path = tmp_path / "hw.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as info:
        load_hardware(path)
    assert str(path) in str(info.value)


ENTRY = ("{name}: {{peak_tflops: {{bf16_tensor: {v}, fp16_tensor: 1, fp8_tensor: 1, tf32_tensor: 1, fp32_vector: 1}},"
         " hbm_tbps: 1, sources: [s]}}\n")


def test_a_table_is_read_again_once_its_file_changes(tmp_path):
    """A rewritten file is read anew (even with an old modification time), and what the caller changes in its dict
    is not what the next caller gets."""
    import os

    path = tmp_path / "hw.yaml"
    path.write_text(ENTRY.format(name="X", v=1))
    first = load_hardware(path)
    first.pop("X")
    assert load_hardware(path)["X"].peak_tflops["bf16_tensor"] == 1
    path.write_text(ENTRY.format(name="X", v=2))
    os.utime(path, ns=(1, 1))  # even with an old time: the size or the time differs
    assert load_hardware(path)["X"].peak_tflops["bf16_tensor"] == 2
    path.write_text(ENTRY.format(name="Y", v=3))
    assert set(load_hardware(path)) == {"Y"} and set(load_hardware()) == NAMES


def test_missing_table_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.yaml"):
        load_hardware(tmp_path / "nope.yaml")


def test_light_modules_do_not_import_torch():
    code = ("import sys\n"
            "import catalogue.hardware, catalogue.roofline, catalogue.registry, catalogue.vocabulary\n"
            "from catalogue.operators import OPERATORS, load_work\n"
            "[load_work(n) for n in OPERATORS]\n"
            "from catalogue.registry import operator_names, split_kwargs, is_benchmarkable, work\n"
            "from catalogue.roofline import problem_roofline\n"
            "problem_roofline('fused_moe', {}, {'token_count': 4, 'hidden_size': 8, 'intermediate_size': 4,"
            " 'num_experts': 4, 'top_k': 2}, 'H200')\n"
            "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
            "print(','.join(bad))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"torch imported: {out.stdout.strip()}"


def test_unknown_accelerator_is_named():
    with pytest.raises(KeyError, match="TPU-Z"):
        problem_roofline("rms_norm", {"eps": 1e-6}, {"token_count": 1, "hidden_size": 8}, "TPU-Z")


def test_fleet_accelerators_beside_llm_parts_are_sourced_datasheet_figures():
    """Every entry names its datasheet; paths a chip lacks are null, not guessed (V100: fp16 only; no FP8
    before Hopper / CDNA3; no TF32 matrix path on CDNA2 or CDNA4)."""
    table = load_hardware()
    for name, hw in table.items():
        assert hw.sources and any("datasheet" in s or "atrex-bench" in s for s in hw.sources), name
        assert hw.bandwidth() > 0
    assert table["V100"].peak_tflops == {"bf16_tensor": None, "fp16_tensor": 125, "fp8_tensor": None, "tf32_tensor": None,
                                         "fp32_vector": 15.7}
    assert table["A100-80GB"].peak_flops("bf16_tensor") == pytest.approx(312e12)
    assert table["A100-80GB"].bandwidth() > table["A100-40GB"].bandwidth()
    for name in ("A100-80GB", "A100-40GB", "V100", "MI250X"):
        assert table[name].peak_tflops["fp8_tensor"] is None, name
    for name in ("MI250X", "MI350X", "MI355X"):
        assert table[name].peak_tflops["tf32_tensor"] is None, name
    assert table["MI355X"].peak_flops("fp8_tensor") == pytest.approx(2 * table["MI355X"].peak_flops("bf16_tensor"))
