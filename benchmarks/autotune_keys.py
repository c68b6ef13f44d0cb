"""Which (kernel, tuning key) each problem of a release reaches in a submission's autotuned kernels, and how many
configurations the kernel's own pruning keeps there: the autotuning protocol's work on a cold run, without a GPU.

    PYTHONPATH=$PWD python benchmarks/autotune_keys.py --release out/atrex-release \\
        --submission examples/submissions/triton_reference --out benchmarks/results/autotune_protocol/keys.json

Each problem's Model runs on its release shape under torch's FakeTensorMode (shapes and dtypes, no data, no
device), with Triton's launches replaced by a recorder: an autotuned launch notes Triton's tuning key (the
autotuner's `key` arguments, then each tensor argument's dtype, written with repr() as the evaluator's worker
writes it: harness/autotune_pins.py) and runs the autotuner's own pruning; nothing is compiled or run. A problem
whose host code needs its data (a size read back) is listed with its error and no keys.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kernels_eval import registry  # noqa: E402
from kernels_eval.harness.autotune_pins import kernel_name  # noqa: E402
from kernels_eval.harness.release_view import read_release_view  # noqa: E402

REACHED: list[list] = []


def recording_run(self, *args, **kwargs):
    """Autotuner.run in place of Triton's: note (kernel, key, configurations kept, configurations) and launch nothing."""
    named = {**dict(zip(self.arg_names, args)), **kwargs}
    named = {k: v for k, v in named.items() if k in self.arg_names}
    key = [named[k] for k in self.keys if k in named] + [str(v.dtype) for v in named.values() if hasattr(v, "dtype")]
    self.nargs = dict(zip(self.arg_names, args))
    kept = self.prune_configs(kwargs) if len(self.configs) > 1 else self.configs
    REACHED.append([kernel_name(self), repr(tuple(key)), len(kept), len(self.configs)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--release", required=True)
    parser.add_argument("--submission", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    Autotuner.run = recording_run
    JITFunction.run = lambda self, *a, **k: None
    modules, rows = {}, []
    for problem in read_release_view(args.release).problems:
        op = problem["operator"]
        file = args.submission / f"{op}.py"
        if not file.is_file():
            continue
        if op not in modules:
            spec = importlib.util.spec_from_file_location(f"keys_{op}", file)
            modules[op] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(modules[op])
        REACHED.clear()
        error = None
        try:
            with FakeTensorMode(allow_non_fake_inputs=True), torch.no_grad():
                model = modules[op].Model(**json.loads(problem["init_kwargs"]))
                g = torch.Generator(device="cpu")
                g.manual_seed(0)
                model(**registry.load_reference(op).make_inputs(**json.loads(problem["input_kwargs"]), device="cpu",
                                                                generator=g))
        except Exception as exc:  # noqa: BLE001 - listed: the protocol's cost of this problem is not estimated
            error = f"{type(exc).__name__}: {str(exc)[:200]}"
        rows.append({"problem_id": problem["problem_id"], "operator": op, "tuned": list(REACHED), "error": error})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=0) + "\n")
    tuned = [(r["operator"], k, key, n) for r in rows for k, key, n, _ in r["tuned"] if n > 1]
    print(f"{len(rows)} problems, {sum(1 for r in rows if r['error'])} not run on fake tensors "
          f"({', '.join(sorted({r['operator'] for r in rows if r['error']}))}); {len(tuned)} (problem, kernel, key) "
          f"with more than one configuration kept, {len({t[:3] for t in tuned})} distinct (kernel, key), "
          f"{sum(t[3] for t in tuned)} configurations in all, {sum(n for *_, n in {t[:3]: t for t in tuned}.values())}"
          f" over distinct keys")
    print(collections.Counter(r["operator"] for r in rows if any(n > 1 for _, _, n, _ in r["tuned"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
