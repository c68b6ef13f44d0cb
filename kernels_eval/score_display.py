"""How a score reads on a terminal: the headline figures, the rates, and the per-operator table."""

from __future__ import annotations

NOT_MEASURED = "not measured"


def fmt(x: float | None, digits: int = 4) -> str:
    """A figure, or 'n/a' where there is none."""
    return "n/a" if x is None else f"{x:.{digits}f}"


def interval_text(interval: dict | None, timed: bool = True) -> str:
    """'[lo, hi] xN' of an S_agg interval (score_interval.py), 'one timing' without one, 'nothing timed' for a
    score of a run that timed nothing (a CPU run)."""
    if not timed:
        return "nothing timed"
    if not interval:
        return "one timing"
    return f"[{interval['lo']:.4f}, {interval['hi']:.4f}] x{interval['repeats']}"


def operator_table(s: dict) -> list[str]:
    """The per-operator table of one score: W_op, S_op, contribution W_op·S_op, problems done/failed of those
    evaluated, the median roofline fraction of the timed problems; heaviest operator first."""
    ops = sorted(s["operators"].items(), key=lambda kv: (-kv[1]["W_op"], kv[0]))
    name = max([len(op) for op, _ in ops] + [len("operator")])
    spread = s.get("S_op_interval") or {}
    lines = [f"  {'operator':<{name}}  {'W_op':>7}  {'S_op':>12}  {'W_op·S_op':>9}  {'done':>5}  {'failed':>6}  "
             f"{'not run':>7}  {'median roofline frac':>20}" + (f"  {'S_op interval':>16}" if spread else "")]
    for op, r in ops:
        s_op = NOT_MEASURED if r["S_op"] is None else f"{r['S_op']:.4f}"
        lines.append(f"  {op:<{name}}  {r['W_op']:>7.4f}  {s_op:>12}  {fmt(r['contribution']):>9}  {r['done']:>5}  "
                     f"{r['failed']:>6}  {r['problems'] - r['evaluated']:>7}  {fmt(r['median_roofline_fraction']):>20}"
                     + (f"  [{fmt(spread[op][0])}, {fmt(spread[op][1])}]" if spread.get(op) and None not in spread[op]
                        else ("  " + f"{'n/a':>16}" if spread else "")))
    return lines


def score_lines(s: dict) -> list[str]:
    """Everything `hotshape score` prints for one (submission, hardware)."""
    agg = NOT_MEASURED if s["S_agg"] is None else f"{s['S_agg']:.4f}"
    lines = [f"{s['submission']} on {s['hardware']} (weights {s['weights_version']}, "
             f"{s['evaluated']}/{s['problems']} problems evaluated"
             f"{'' if s['performance_measured'] else ', performance not measured'})",
             f"  S_agg {agg} (interval {interval_text(s.get('S_agg_interval'), s['S_agg'] is not None)})   per-problem weighted {fmt(s['S_problem_weighted'])}   "
             + "  ".join(f"S_agg[{p}] {fmt(v)}" for p, v in s["S_agg_phase"].items()),
             "  rates (unweighted / weighted): " + ", ".join(
                 f"{k} {fmt(v['unweighted'])} / {fmt(v['weighted'])}" for k, v in s["rates"].items())]
    for kind, b in s["bound"].items():
        lines.append(f"  {kind}-bound: {b['problems']} problems, weight {fmt(b['weight'])}, "
                     f"weighted S {fmt(b['s_weighted'])}")
    return lines + operator_table(s)
