"""The Hopper-aware attention variants (examples/submissions/triton_hopper_attention) agree with the reference in
Triton's interpreter: varlen sequences (one empty), a head of 72 padded to 128 by the descriptor's bound, and 128."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO

CHECK = """
import importlib.util, json, sys
from kernels_eval.harness.interpreter import patch_interpreter
patch_interpreter()
from kernels_eval.operators import attention_forward as ref
spec = importlib.util.spec_from_file_location("hopper", sys.argv[1])
hopper = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hopper)
errors = []
for lens, heads, dim in (([20, 0, 9], 1, 72), ([16], 2, 128)):
    inputs = ref.make_inputs(seq_lens=lens, num_heads=heads, head_dim=dim)
    got, want = hopper.Model()(**inputs), ref.Model()(**inputs)
    errors.append(float((got.float() - want.float()).abs().max()))
print(json.dumps(errors))
"""


def test_tma_attention_forward_matches_the_reference_in_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO)}
    path = REPO / "examples" / "submissions" / "triton_hopper_attention" / "attention_forward.py"
    done = subprocess.run([sys.executable, "-c", CHECK, str(path)], capture_output=True, text=True, env=env,
                          timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    errors = [float(x) for x in done.stdout.strip().splitlines()[-1].strip("[]").split(",")]
    assert len(errors) == 2 and max(errors) < 2e-2  # attention_forward's tolerance (catalogue/operators)
