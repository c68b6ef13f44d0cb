"""The CLI verbs, end to end, and the rule that release never imports torch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pipelines.cli import main


def test_import_export_via_cli(atrex_dir, tmp_path, capsys):
    assert main(["import-atrex", str(atrex_dir), "--out", str(tmp_path / "r"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["problems"], out["operators"]) == (440, 30)
    assert abs(out["weights_sum"] - 1) < 1e-12 and out["leak_check"]["ok"]
    assert main(["export-atrex", str(tmp_path / "r"), "--out", str(tmp_path / "x"), "--weights", "v1"]) == 0
    assert (tmp_path / "x" / "data" / "rms_norm" / "shapes.json").exists()


def test_cli_errors_are_one_line_and_name_the_problem(atrex_dir, tmp_path, capsys):
    assert main(["import-atrex", str(tmp_path), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "operator_importance.json" in err and "Traceback" not in err
    (tmp_path / "r2").mkdir()
    (tmp_path / "r2" / "x").write_text("keep me")
    assert main(["import-atrex", str(atrex_dir), "--out", str(tmp_path / "r2")]) == 2
    assert "already exists" in capsys.readouterr().err


def test_cli_rejects_missing_arguments():
    with pytest.raises(SystemExit):
        main(["build", "--traces", "x"])


def test_release_never_imports_torch(atrex_dir, tmp_path):
    code = (
        "import sys\n"
        "import release.commands, flow.build, flow.commands, release.card, release.sealing\n"
        "from release.atrex import import_atrex, export_atrex\n"
        f"import_atrex({str(atrex_dir)!r}, {str(tmp_path / 'r')!r})\n"
        f"export_atrex({str(tmp_path / 'r')!r}, {str(tmp_path / 'x')!r})\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith(('torch.', 'triton', 'dagster'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
