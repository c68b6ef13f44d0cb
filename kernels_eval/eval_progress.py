"""Progress of `hotshape eval` on stderr: n/N, the operator and shape just judged, done/failed so far, an ETA."""

from __future__ import annotations

import json
import sys
import time

from kernels_eval.harness.sanitize import terminal


def shape_text(kwargs: dict, chars: int = 60) -> str:
    """The problem's input kwargs as `k=v k=v`, cut to `chars`."""
    text = " ".join(f"{k}={v}" for k, v in kwargs.items())
    return text if len(text) <= chars else text[:chars - 1] + "…"


class EvalProgress:
    """A tqdm bar on a terminal, else (when asked for) one plain line per judged problem, for logs."""

    def __init__(self, problems: list[dict], stream=None, bar: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.shapes = {r["problem_id"]: json.loads(r["input_kwargs"]) for r in problems}
        total = len(problems)
        self.total, self.n, self.done, self.failed, self.before = total, 0, 0, 0, 0
        self.began = time.monotonic()
        self.bar = None
        if bar if bar is not None else self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="problem", file=self.stream, dynamic_ncols=True, leave=True)

    def resumed(self, n: int) -> None:
        """Count `n` problems judged before a cut as already through."""
        self.n += n
        self.before += n
        if self.bar is not None:
            self.bar.update(n)

    def __call__(self, row: dict) -> None:
        self.n += 1
        ok = row["stage"] == "done"
        self.done += ok
        self.failed += not ok
        shape = shape_text(self.shapes.get(row["problem_id"], {}))
        tally = f"done {self.done} failed {self.failed}"
        if self.bar is not None:
            self.bar.set_description_str(f"{terminal(row['operator'], 80)} {shape}", refresh=False)
            self.bar.set_postfix_str(tally, refresh=False)
            self.bar.update(1)
            return
        error = "" if ok else " " + terminal(row.get("error") or "", 100)
        print(f"{row['problem_id']} {self.n}/{self.total} {row['operator']} {shape} {row['stage']} "
              f"({tally}, eta {self.eta()}){error}", file=self.stream, flush=True)

    def eta(self) -> str:
        """Time left at the rate so far, as h:mm:ss ('?' before the first problem)."""
        judged = self.n - self.before  # the rate of this run only: resumed problems took no time here
        if judged == 0:
            return "?"
        left = (time.monotonic() - self.began) / judged * max(self.total - self.n, 0)
        return time.strftime("%H:%M:%S", time.gmtime(left))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
