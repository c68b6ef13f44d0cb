"""The `search` proposer: explores the tunable space a Triton file declares — triton.Config tile sizes,
num_warps and num_stages, BLOCK_* launch constexprs, upper-case integer tile constants — by rewriting those
literals in place (found with ast, so formatting and everything else stay as written), one neighbour at a time
from the accepted file, ordered by the accepted file's regime: memory-bound → larger tiles and deeper
pipelines first; latency-bound → more programs (smaller tiles), fewer warps; latency-bound with several kernels
a call (a split launch and its reduction, say) → fewer launches first: fewer programs or splits and larger
tiles, which can fold a split into one kernel; compute-bound → more warps and stages. After a dropout it
starts again from the accepted file with wider steps and pairs of moves."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from catalogue import registry
from kernels_eval.agent.optimize import Candidate, LoopState, sha256_text

# tile sizes, and the work of one program or split (KEYS_PER_SPLIT: larger means fewer programs, as a tile)
TILE_NAME = re.compile(r"^(BLOCK|TILE|VEC|CHUNK|SPLIT|GROUP_SIZE)(_[A-Z0-9]+)*$|_(BLOCK|TILE|COLS|ROWS|ELEMENTS|SIZE)$"
                       r"|_PER_(SPLIT|PROGRAM|BLOCK|CTA)$")
PROGRAMS_NAME = re.compile(r"PROGRAMS|SPLITS|WAVES")
LIMITS = {"num_warps": (1, 32), "num_stages": (1, 8), "tile": (1, 1 << 16), "programs": (1, 1 << 16)}
LATENCY_S = 10e-6  # a kernel shorter than this (weighted, per kernel of a call) is launch and tail, not work
# latency-bound calls of which at least this share of the weight runs two or more kernels pay a launch (and the
# GPU's gap between kernels) per kernel: fewer launches come before more parallelism
LAUNCH_SHARE = 0.5


@dataclass(frozen=True)
class Site:
    """One integer literal the proposer may change: where it is in the source and what it sets."""

    line: int  # 1-based
    col: int
    end_col: int
    value: int
    kind: str  # num_warps, num_stages, tile, programs
    name: str


def _int(node) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _kind(name: str) -> str | None:
    if name in ("num_warps", "num_stages"):
        return name
    if PROGRAMS_NAME.search(name) and name.isupper():
        return "programs"
    if TILE_NAME.search(name):
        return "tile"
    return None


def tunable_sites(source: str) -> list[Site]:
    """Every integer literal bound to a tunable name: keyword arguments (triton.Config(..., num_warps=4),
    kernel[grid](..., BLOCK_M=64)), Config dict entries ({"BLOCK_N": 128}) and NAME = int assignments."""
    tree = ast.parse(source)
    found: list[tuple[str, ast.AST]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg:
            found.append((node.arg, node.value))
        elif isinstance(node, ast.Dict):
            found += [(k.value, v) for k, v in zip(node.keys, node.values)
                      if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += [(t.id, node.value) for t in targets if isinstance(t, ast.Name)]
    sites = []
    for name, value in found:
        kind, v = _kind(name), _int(value)
        if kind is None or v is None or v <= 0 or value.lineno != value.end_lineno:
            continue
        sites.append(Site(value.lineno, value.col_offset, value.end_col_offset, v, kind, name))
    return sorted(set(sites), key=lambda s: (s.line, s.col))


def rewrite(source: str, changes: list[tuple[Site, int]]) -> str:
    """`source` with each site's literal replaced by its new value (columns are UTF-8 byte offsets, as ast's)."""
    lines = source.splitlines(keepends=True)
    for site, new in sorted(changes, key=lambda c: (c[0].line, -c[0].col)):
        raw = lines[site.line - 1].encode()
        lines[site.line - 1] = (raw[:site.col] + str(new).encode() + raw[site.end_col:]).decode()
    return "".join(lines)


def regime(state: LoopState) -> str:
    """memory, compute, latency or launch for the accepted file: the time-weighted Nsight Compute bound where
    the feedback has one, else latency for short kernels (launch when most calls run several), else the work
    model's arithmetic intensity."""
    votes: dict[str, float] = {}
    for f in state.accepted_feedback:
        for k in f.profile:
            votes[k.bound] = votes.get(k.bound, 0.0) + k.time_us * (f.weight or 1.0)
    if votes:
        return max(votes, key=votes.get)
    # per kernel of the call: a split launch and its merge at 7 us each are two short kernels, not one long one
    timed = [(f.weight or 0.0, f.t_measured_s / max(1, len(f.kernels))) for f in state.accepted_feedback
             if f.t_measured_s]
    if timed and sum(w for w, _ in timed) > 0:
        t = sum(w * s for w, s in timed) / sum(w for w, _ in timed)
        if t < LATENCY_S:
            return "launch" if _multi_kernel_share(state) >= LAUNCH_SHARE else "latency"
    return "memory" if _intensity(state) < 30.0 else "compute"


def _multi_kernel_share(state: LoopState) -> float:
    """The share of the timed problems' weight whose calls run two or more distinct kernels."""
    counted = [(f.weight or 0.0, len(f.kernels)) for f in state.accepted_feedback if f.kernels]
    total = sum(w for w, _ in counted)
    return sum(w for w, n in counted if n >= 2) / total if total > 0 else 0.0


def _intensity(state: LoopState) -> float:
    """FLOPs per byte of the operator's heaviest problem (by weight) the feedback names, from the work model."""
    try:
        smoke = registry.spec(state.operator).smoke[0]
        w = registry.work(state.operator, dict(smoke.init), dict(smoke.inputs))
        return w["flops"] / max(1, w["bytes_read"] + w["bytes_written"])
    except (KeyError, ValueError, IndexError):
        return 0.0


# For each regime, the preferred direction of each kind (+1: double, -1: halve), first choice first.
PREFERENCES = {
    "memory": [("tile", +1), ("num_stages", +1), ("num_warps", +1), ("tile", -1), ("num_warps", -1),
               ("programs", -1), ("num_stages", -1), ("programs", +1)],
    "latency": [("tile", -1), ("programs", +1), ("num_warps", -1), ("num_stages", -1), ("tile", +1),
                ("num_warps", +1), ("programs", -1), ("num_stages", +1)],
    "launch": [("programs", -1), ("tile", +1), ("num_warps", -1), ("num_stages", -1), ("tile", -1),
               ("programs", +1), ("num_warps", +1), ("num_stages", +1)],
    "compute": [("num_warps", +1), ("num_stages", +1), ("tile", +1), ("num_warps", -1), ("tile", -1),
                ("num_stages", -1), ("programs", +1), ("programs", -1)],
}


def _moved(site: Site, direction: int, factor: int) -> int | None:
    lo, hi = LIMITS[site.kind]
    new = site.value * factor if direction > 0 else site.value // factor
    return new if lo <= new <= hi and new != site.value else None


class SearchProposer:
    """Neighbours of the accepted file in its declared tunable space, best-guess first."""

    name = "search"

    def __init__(self) -> None:
        self.context = 0
        self.queue: list[Candidate] = []
        self.base_sha: str | None = None

    def restart(self) -> None:
        """Optimization dropout: forget this context's queue; the next one steps wider and pairs moves."""
        self.context += 1
        self.queue, self.base_sha = [], None

    def _moves(self, source: str, kind_order: list[tuple[str, int]]) -> list[Candidate]:
        sites = tunable_sites(source)
        factor = 2 if self.context == 0 else 4
        singles: list[tuple[Site, int, str]] = []
        # every other move before those of tile caps (MAX_*/MIN_* tile limits change which code path
        # runs, and a cap raised past the registers spills)
        for limits in (False, True):
            for kind, direction in kind_order:
                for site in sites:
                    cap = site.kind == "tile" and site.name.startswith(("MAX_", "MIN_"))
                    if site.kind == kind and cap == limits:
                        new = _moved(site, direction, factor)
                        if new is not None:
                            singles.append((site, new, f"{site.name} {site.value} -> {new} (line {site.line})"))
        out = [Candidate(source=rewrite(source, [(s, n)]), note=note) for s, n, note in singles]
        if self.context > 0:  # pairs of the first few moves on different sites
            head = singles[:6]
            for a in range(len(head)):
                for b in range(a + 1, len(head)):
                    if head[a][0] != head[b][0]:
                        out.append(Candidate(source=rewrite(source, [head[a][:2], head[b][:2]]),
                                             note=f"{head[a][2]}; {head[b][2]}"))
        return out

    def propose(self, state: LoopState) -> Candidate | None:
        """The next untried neighbour of the accepted file (None when its neighbourhood is spent)."""
        sha = sha256_text(state.accepted_source)
        if sha != self.base_sha:  # a new accepted file (or a restart): its neighbourhood, in the regime's order
            mode = regime(state)
            self.queue = [c for c in self._moves(state.accepted_source, PREFERENCES[mode])]
            for c in self.queue:
                c.note = f"[{mode}-bound] {c.note}"
            self.base_sha = sha
        while self.queue:
            cand = self.queue.pop(0)
            if sha256_text(cand.source) not in state.tried:
                return cand
        return None
