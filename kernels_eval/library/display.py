"""How the library line reads: beside a score on a terminal and in the score report, and as its own line (never a
rank) on the leaderboard. The figures come from kernels_eval/library/line.py."""

from __future__ import annotations

from kernels_eval.score_display import NOT_MEASURED, fmt

TOWARD = "toward roofline"  # the column of f = (S_sub - S_lib) / (1 - S_lib)


def _us(t: float | None) -> str:
    return "n/a" if t is None else f"{t * 1e6:.1f}"


def _s(x: float | None, measured: bool = True) -> str:
    return (NOT_MEASURED if not measured else "n/a") if x is None else f"{x:.4f}"


def _signed(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.3f}"


def library_cell(library: dict, op: str) -> str:
    """The library's S_op of `op` in a matrix cell: the figure, 'not measured' (untimed run) or 'no path'."""
    if library["S_op"].get(op) is not None:
        return f"{library['S_op'][op]:.4f}"
    return NOT_MEASURED if library["path"].get(op) and not library["measured"] else "no path"


def library_summary(library: dict) -> str:
    """One line: the library's S_agg, over which share of the weight, on which hardware."""
    agg = _s(library["S_agg"], library["measured"])
    return (f"library on {library['hardware']}: S_agg {agg} over {library['coverage_weight']:.4f} of the weight "
            f"(operators with a library path; a baseline, never ranked)")


def library_lines(library: dict) -> list[str]:
    """The library line alone (results holding only baseline rows): its S_agg and each operator's S_op and path."""
    lines = [library_summary(library)]
    ops = sorted(library["W_op"], key=lambda op: (-library["W_op"][op], op))
    width = max([len(op) for op in ops] + [len("operator")])
    lines.append(f"  {'operator':<{width}}  {'W_op':>7}  {'S_op lib':>12}  library path")
    for op in ops:
        path = library["path"].get(op) or f"none: {library['why_none'].get(op) or 'no library path'}"
        lines.append(f"  {op:<{width}}  {library['W_op'][op]:>7.4f}  {_s(library['S_op'][op], library['measured']):>12}"
                     f"  {path}")
    return lines


def versus_lines(vs: dict, measured: bool, per_problem: bool = False) -> list[str]:
    """A submission's operators (and with `per_problem` its problems) beside the library and the roofline."""
    lines = [f"  vs library: S_agg over the operators with a library path: submission "
             f"{_s(vs['S_agg_submission_covered'], measured)}, library {_s(vs['S_agg_library'], measured)} "
             f"(coverage {vs['coverage_weight']:.4f}); {TOWARD} from the library {_signed(vs['toward_roofline'])} "
             "(0 = the library, 1 = the roofline, < 0 slower than the library)"]
    ops = sorted(vs["operators"].items(), key=lambda kv: (-kv[1]["W_op"], kv[0]))
    width = max([len(op) for op, _ in ops] + [len("operator")])
    lines.append(f"  {'operator':<{width}}  {'W_op':>7}  {'S_op':>12}  {'S_op lib':>12}  {TOWARD:>15}  library path")
    for op, r in ops:
        path = r["path"] or f"none: {r['why_none'] or 'no library path'}"
        lines.append(f"  {op:<{width}}  {r['W_op']:>7.4f}  {_s(r['S_op_submission'], measured):>12}  "
                     f"{_s(r['S_op_library'], measured):>12}  {_signed(r['toward_roofline']):>15}  {path}")
    if per_problem:
        lines.append(f"  {'problem':<18} {'operator':<{width}}  {'weight':>8}  {'T_roof µs':>10}  {'T_lib µs':>10}  "
                     f"{'T_sub µs':>10}  {'S_lib':>7}  {'S_i':>7}  {TOWARD:>15}")
        for p in vs["problems"]:
            lines.append(f"  {p['problem_id'][:18]:<18} {p['operator']:<{width}}  {p['weight']:>8.5f}  "
                         f"{_us(p['t_roofline_s']):>10}  {_us(p['t_library_s']):>10}  {_us(p['t_submission_s']):>10}  "
                         f"{fmt(p['S_library']):>7}  {fmt(p['S_submission']):>7}  {_signed(p['toward_roofline']):>15}")
    return lines


def versus_section(vs: dict, measured: bool) -> dict:
    """The score report's section (kernels_eval/templates/library.html `versus`): per operator and per problem,
    roofline, library and submission side by side."""
    ops = sorted(vs["operators"].items(), key=lambda kv: (-kv[1]["W_op"], kv[0]))
    return {
        "coverage": f"{vs['coverage_weight']:.4f}", "submission": _s(vs["S_agg_submission_covered"], measured),
        "library": _s(vs["S_agg_library"], measured), "toward": _signed(vs["toward_roofline"]),
        "operator_header": ["operator", "W_op", "S_op", "S_op library", TOWARD, "library path"],
        "operators": [[op, f"{r['W_op']:.4f}", _s(r["S_op_submission"], measured), _s(r["S_op_library"], measured),
                       _signed(r["toward_roofline"]), r["path"] or f"none: {r['why_none'] or 'no library path'}"]
                      for op, r in ops],
        "problem_header": ["problem", "operator", "weight", "T_roofline µs", "T_library µs", "T_submission µs",
                           "S_library", "S_i", TOWARD],
        "problems": [[p["problem_id"], p["operator"], f"{p['weight']:.5f}", _us(p["t_roofline_s"]),
                      _us(p["t_library_s"]), _us(p["t_submission_s"]), fmt(p["S_library"]), fmt(p["S_submission"]),
                      _signed(p["toward_roofline"])] for p in vs["problems"]],
    }


def library_section(library: dict) -> dict:
    """The library line as its own section (kernels_eval/templates/library.html `library`), for results holding
    baseline rows."""
    ops = sorted(library["W_op"], key=lambda op: (-library["W_op"][op], op))
    return {"summary": library_summary(library), "header": ["operator", "W_op", "S_op library", "library path"],
            "rows": [[op, f"{library['W_op'][op]:.4f}", _s(library["S_op"][op], library["measured"]),
                      library["path"].get(op) or f"none: {library['why_none'].get(op) or 'no library path'}"]
                     for op in ops]}
