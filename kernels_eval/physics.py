"""The physics check: no measured time may be below the problem's roofline.

The roofline time is the least a problem can take on its hardware (its bytes at peak bandwidth, its FLOPs at peak
compute; catalogue/roofline.py). A time under it (roofline fraction above 1) is not a fast kernel but a wrong
measurement or a forged one: seen on H200, a candidate that edited the profiler's records was judged at 1.53 and one
that precomputed the timed outputs at 3.4. Such a time is refused, naming both numbers, never scored: the evaluator
refuses it when it writes the row (`refusal` in runner.result_row), and `score` / `leaderboard` refuse a row from
elsewhere whose time is under the release's own roofline (scoring.problem_scores, results_verify). The honest
Triton reference's highest fraction over the 440-problem catalogue on H200 is 0.90
(benchmarks/results/triton_reference/scoreboard_H200.csv). Standard library only (the GPU machine runs it).
"""

from __future__ import annotations

import math

REFUSED = "timing refused"


def refusal(t_measured_s: float | None, t_roofline_s: float | None) -> str | None:
    """Why a measured time cannot stand against the problem's roofline time, or None when it can (or either is
    unknown)."""
    if t_measured_s is None or t_roofline_s is None:
        return None
    t, roof = float(t_measured_s), float(t_roofline_s)
    if not (math.isfinite(t) and t > 0):
        return f"{REFUSED}: measured time {t!r} s is not a positive number"
    if math.isfinite(roof) and roof > 0 and t < roof:
        return (f"{REFUSED}: measured {t * 1e6:.3f} µs is below the problem's roofline of {roof * 1e6:.3f} µs "
                f"(roofline fraction {roof / t:.3f} > 1): faster than the hardware allows, so the measurement is "
                "wrong or forged")
    return None


def below_roofline(t_measured_s, t_roofline_s) -> bool:
    """Whether a time is under its roofline (both known and positive)."""
    try:
        t, roof = float(t_measured_s), float(t_roofline_s)
    except (TypeError, ValueError):
        return False
    return math.isfinite(t) and math.isfinite(roof) and 0 < t < roof
