"""Numbers derived from a Trace: what the figures draw, the benchmarks tabulate and the CLI prints.

A sequence position is a generated token; most are image cells, some are forced layout tokens
(`geometry.layout` entry other than -1), which have no place on the grid. Window methods verify a
Jacobi window per pass; draft-tree methods (eagle2, peanut) a tree, whose accepted path and the token
drawn after it play the parts of the accepted drafts and the resampled rejection.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from specviz.trace import DraftTree, Iteration, Trace

MAP_KINDS = ("iteration", "run_length", "redraws")
# a stall: this many window passes in a row that accept nothing. Runs of one to five such passes are
# common on the embedded model (SJD and SCD-MC at W = 16: 409 runs over 24 runs of 4 prompts, 352 of
# them at most 5 long); the long ones (20 to 126 passes) are what the decoding-engine issue describes.
STALL_PASSES = 8
# depth-map value of a token drawn by the target rather than accepted from a draft: the first token
# (from the prefill) and the token drawn after each tree's accepted path, which is the next tree's root
DRAWN_DEPTH = 0


class GridState(NamedTuple):
    """What the grid shows at one iteration: per cell its state, sequence position and whether
    this iteration committed it."""

    state: np.ndarray  # (rows, cols) of str, one of palette.STATES
    position: np.ndarray  # (rows, cols) int
    now: np.ndarray  # (rows, cols) bool


def iteration_at(trace: Trace, j: int) -> Iteration:
    """The iteration j, with a clear error instead of a silent negative index."""
    if not 0 <= j < len(trace.iterations):
        raise IndexError(f"iteration {j} is out of range; the trace has {len(trace.iterations)} iterations")
    return trace.iterations[j]


def window_size(trace: Trace) -> int:
    """Drafts in the widest window the run may verify: its `window` parameter, or the widest window it
    drafted where that is wider or the trace names none (a converted or hand-made trace). The window
    views draw their offsets on this fixed axis, so stepping through the run never rescales them."""
    named = getattr(trace.parameters, "window", 0) if "window" in trace.params else 0
    return max(named, 0, *(it.window_drafts for it in trace.iterations))


def has_trees(trace: Trace) -> bool:
    """Whether the run verified draft trees (eagle2, peanut): the views that need a window do not apply."""
    return trace.kind == "tree"


# the share of the image committed before the pass Inspect opens on: the picture around it is recognisable
# and not yet finished (the first passes draw on a blank grid, the last ones on a complete image)
PICTURE_BAND = (0.25, 0.9)


def passes_in_picture(trace: Trace) -> list[int]:
    """The passes made once a quarter and before nine tenths of the image was committed (every pass where
    none was: a run of a few passes)."""
    total, done, band = len(trace.tokens), 0, []
    for j, it in enumerate(trace.iterations):
        if PICTURE_BAND[0] * total <= done <= PICTURE_BAND[1] * total:
            band.append(j)
        done += len(it.committed)
    return band or list(range(len(trace.iterations)))


def opening_iteration(trace: Trace, on: str | None = None) -> int:
    """The iteration a viewer should see first, rather than iteration 0 (an empty grid, no drafts): among the
    passes made while the picture is partly drawn (`passes_in_picture`), the one that shows the method at work.

    Tree runs: the first with the longest accepted path. Continuous runs: the first that accepted the most
    drafts, else the first that tested any. Rows runs (ZipAR, which verifies nothing): the first with the
    most rows in flight, its widest diagonal front. Window runs: the first pass that both accepted and
    rejected a draft (the rule at work); where none did, the first with the most kinds of draft fate.
    `on="stall"` (a preset about stalls): the first pass of the run's longest stall (the earliest of the
    longest), wherever it is.
    """
    if not trace.iterations:
        return 0
    its = trace.iterations
    stalled = stalls(trace) if on == "stall" else []
    if stalled:
        return max(stalled, key=lambda found: (found[1], -found[0]))[0]
    band = passes_in_picture(trace)
    if has_trees(trace):
        return max(band, key=lambda j: (its[j].draft_tree is not None, its[j].accepted, -j))
    if trace.continuous:
        return max(band, key=lambda j: (its[j].fate.count("accepted"), bool(its[j].fate), -j))
    if trace.kind == "rows":  # the most rows in flight: verified windows (PJD), else tokens drawn (ZipAR)
        return max(band, key=lambda j: (len(its[j].windows or ()), len(its[j].committed), -j))
    for j in band:
        if {"accepted", "rejected"} <= set(its[j].outcome()):
            return j
    return max(band, key=lambda j: (len(set(its[j].outcome())), -j))


def instructive_iterations(trace: Trace) -> list[int]:
    """The passes that accepted at least one draft: the ones worth stepping between, as most passes of a
    run at the default settings accept nothing and only fix one token, as AR would."""
    return [j for j, it in enumerate(trace.iterations) if it.verifies_drafts and it.accepted > 0]


def stalls(trace: Trace, minimum: int = STALL_PASSES) -> list[tuple[int, int]]:
    """(first iteration, length) of every run of at least `minimum` consecutive window or tree passes
    that accepted no draft: each fixed one token, as AR would, at the cost of a whole pass."""
    found, run_start = [], None
    passes = [it.verifies_drafts and it.accepted == 0 for it in trace.iterations]
    for index, idle in enumerate([*passes, False]):
        if idle and run_start is None:
            run_start = index
        elif not idle and run_start is not None:
            if index - run_start >= minimum:
                found.append((run_start, index - run_start))
            run_start = None
    return found


def committed_before(trace: Trace, j: int) -> int:
    """Tokens fixed before iteration j runs, i.e. where its window starts."""
    if not 0 <= j <= len(trace.iterations):
        raise IndexError(f"iteration {j} is out of range; the trace has {len(trace.iterations)} iterations")
    return sum(len(it.committed) for it in trace.iterations[:j])


def tokens_through(trace: Trace, j: int) -> list[int] | list[list[float]]:
    """Tokens fixed once iteration j has run, to decode the partial image after it (a continuous run:
    their vectors)."""
    iteration_at(trace, j)
    return (trace.vectors or trace.tokens)[: committed_before(trace, j + 1)]


def passes_through(trace: Trace, j: int) -> int:
    """The model passes a run had made once iteration j ran, as its race counted them (the prefill's
    included; a draft run alone: the draft's). Every iteration is one pass of the model that drew it."""
    iteration_at(trace, j)
    later = len(trace.iterations) - (j + 1)
    if only_the_draft_drew(trace.iterations):
        return (trace.draft_nfe or 0) - later
    return trace.nfe - later


def clock_through(trace: Trace) -> np.ndarray:
    """Seconds a run had spent once each iteration ran, from its record (the prefill and each pass's
    timed parts), scaled so that the last is the run's reported seconds (the median of its undisturbed
    repeats where it was timed again): the pace at which a recorded race is played again."""
    parts = [it.forward_ms + it.draft_ms + it.verify_ms + it.record_ms for it in trace.iterations]
    recorded = (trace.prefill_ms + np.cumsum(parts)) / 1000
    if not len(recorded) or recorded[-1] <= 0:
        return recorded
    return recorded * (trace.seconds / recorded[-1])


def trace_through(trace: Trace, j: int) -> Trace:
    """The run as it stood once iteration j ran: its first iterations, the tokens they fixed, its passes
    and seconds so far; what the race showed at that moment, for playing a recorded run again."""
    fixed = committed_before(trace, j + 1)
    passes = "draft_nfe" if draft_alone(trace) else "nfe"
    return trace.model_copy(
        update={
            "iterations": trace.iterations[: j + 1],
            "tokens": trace.tokens[:fixed],
            "vectors": None if trace.vectors is None else trace.vectors[:fixed],
            passes: passes_through(trace, j),
            "seconds": float(clock_through(trace)[j]),
            "timings": None,
        }
    )


def cell_of_position(trace: Trace) -> np.ndarray:
    """Grid cell of every sequence position (-1 for a layout slot), to place positions on the grid."""
    if trace.geometry.order is not None:
        return np.asarray(trace.geometry.order)
    is_cell = np.asarray(trace.geometry.layout) == -1
    return np.where(is_cell, np.cumsum(is_cell) - 1, -1)


def on_grid(trace: Trace, values: np.ndarray, fill: object) -> np.ndarray:
    """Per-position values laid out on the (rows, cols) grid, dropping layout slots."""
    g = trace.geometry
    cells = cell_of_position(trace)
    grid = np.full(g.rows * g.cols, fill, dtype=values.dtype)
    grid[cells[cells >= 0]] = values[cells >= 0]
    return grid.reshape(g.rows, g.cols)


def grid_state(trace: Trace, j: int) -> GridState:
    """The grid at iteration j: committed before it, its window (or its tree's outcome) by fate, then
    pending; the cells it commits are flagged (a token sampled after the window, or without drafts,
    shows as committed)."""
    it = iteration_at(trace, j)
    length = len(trace.geometry.layout)
    state = np.full(length, "pending", dtype=object)
    state[: it.start] = "committed"
    seen = it.outcome()
    window = seen[: length - it.start]  # a malformed trace may draft past the sequence
    state[it.start : it.start + len(window)] = window
    end = it.start + len(it.committed)
    state[it.start + len(window) : end] = "committed"  # sampled outside the window: no draft, no fate
    placed = it.placed_drafts()
    if placed:  # rows in flight, each with its window (PJD)
        index = trace.decided_index()
        for position, shown in placed:
            if position in index:
                state[index[position]] = shown
    now = np.zeros(length, dtype=bool)
    now[it.start : end] = True
    return GridState(
        state=on_grid(trace, state, "pending"),
        position=on_grid(trace, np.arange(length), -1),
        now=on_grid(trace, now, False),
    )


def drafted_tokens(trace: Trace, j: int) -> list[int] | None:
    """The sequence after iteration j with the drafts it verified but did not commit in place (the
    window's guesses beyond the accepted run and its resampled token), to decode into a picture of
    what the window held; None where a pass leaves no such draft (AR, a tree, a continuous pass, a
    window accepted whole)."""
    it = iteration_at(trace, j)
    end = it.start + len(it.committed)
    guesses = it.uncommitted_drafts()[: len(trace.geometry.layout) - end]
    return trace.tokens[:end] + guesses if guesses and len(trace.tokens) >= end else None


def acceptance_maps(trace: Trace) -> dict[str, np.ndarray]:
    """Per cell: the iteration that committed it, the length of that run, how often it was
    drafted (in a window, or at any node of a tree) before being fixed (NaN for cells not committed yet)."""
    length = len(trace.geometry.layout)
    iteration = np.full(length, np.nan)
    run_length = np.full(length, np.nan)
    drafted_uncommitted = np.zeros(length + 1)  # +1 where such a span starts, -1 after it ends
    for index, it in enumerate(trace.iterations):
        start, committed, window = it.start, len(it.committed), min(it.reach(), length - it.start)
        iteration[start : start + committed] = index
        run_length[start : start + committed] = committed
        if window > committed:
            drafted_uncommitted[start + committed] += 1
            drafted_uncommitted[start + window] -= 1
    redraws = np.cumsum(drafted_uncommitted[:length])
    redraws[np.isnan(iteration)] = np.nan
    return {
        "iteration": on_grid(trace, iteration, np.nan),
        "run_length": on_grid(trace, run_length, np.nan),
        "redraws": on_grid(trace, redraws, np.nan),
    }


def row_run_lengths(trace: Trace) -> np.ndarray:
    """A run of rows with windows (PJD), per cell: the tokens its row committed in the pass that committed
    it (1 to the window; the first token, drawn from the prefill, 1); NaN where nothing is committed yet."""
    values = np.full(len(trace.geometry.layout), np.nan)
    for it in trace.iterations:
        windows = getattr(it, "windows", None) or []
        at = it.start
        for window in windows:
            values[at : at + window.committed] = window.committed
            at += window.committed
        values[at : it.start + len(it.committed)] = 1  # a pass without windows: its token drawn alone
    return on_grid(trace, values, np.nan)


def has_row_windows(trace: Trace) -> bool:
    """Whether a rows run verifies a Jacobi window in each row (PJD) rather than drawing a token per row
    (ZipAR): by its `window` parameter, so a run cut short before its first window (a live race's first
    frame, drawn from the prefill) says so as well, or by a window in its records."""
    windows = any(getattr(it, "windows", None) is not None for it in trace.iterations)
    return trace.kind == "rows" and ("window" in trace.params or windows)


def changed_share(iterations: list[Iteration]) -> float | None:
    """Of the drafts window passes carried into the next window, the share whose token changed: what SCD's
    coupling lowers against SJD's independent redraws. None where no pass carried a draft (AR, trees)."""
    carried = sum(it.carried for it in iterations)
    return sum(it.changed for it in iterations) / carried if carried else None


def per_iteration(trace: Trace) -> dict[str, np.ndarray]:
    """Per-iteration counts and timings, the series of the iteration plots."""
    its = trace.iterations
    return {
        "accepted": np.array([it.accepted for it in its], dtype=int),
        "committed": np.array([len(it.committed) for it in its], dtype=int),
        "changed": np.array([it.changed for it in its], dtype=int),
        "carried": np.array([it.carried for it in its], dtype=int),
        "window": np.array([it.window_drafts for it in its], dtype=int),
        "new_drafts": np.array([it.new_drafts for it in its], dtype=int),
        "forward_ms": np.array([it.forward_ms for it in its], dtype=float),
        "verify_ms": np.array([it.verify_ms for it in its], dtype=float),
    }


def depth_map(trace: Trace) -> np.ndarray:
    """Per cell, the depth inside its draft tree at which its token was accepted (PEANUT's figure 1):
    d for the d-th node of a tree's accepted path, DRAWN_DEPTH (0) for a token the target drew (the
    first one, and the one after each accepted path: the next tree's root), NaN where nothing is
    committed yet. Layout slots have no cell. Only for a trace with trees."""
    if not has_trees(trace):
        raise ValueError(f"{trace.method} verifies no draft trees: a depth map needs a tree method's trace")
    depth = np.full(len(trace.geometry.layout), np.nan)
    for it in trace.iterations:
        depth[it.start : it.start + len(it.committed)] = DRAWN_DEPTH
        accepted = it.accepted_depths()
        depth[it.start : it.start + len(accepted)] = accepted
    return on_grid(trace, depth, np.nan)


def tree_shape_maps(trace: Trace) -> dict[str, np.ndarray]:
    """Per cell, the shape the method asked of the tree whose pass committed it ("depth", "top_k") and
    (PEANUT) the acceptance rate that chose that shape ("alpha"); NaN where no tree committed the cell
    (the first token) or nothing is committed yet. PEANUT starts each tree from the one that committed
    the cell to its left: this is the map it reads."""
    length = len(trace.geometry.layout)
    maps = {key: np.full(length, np.nan) for key in ("depth", "top_k", "alpha")}
    for it in trace.iterations:
        span = slice(it.start, it.start + len(it.committed))
        for key, value in (it.asked_shape() or {}).items():
            if value is not None:
                maps[key][span] = value
    return {key: on_grid(trace, values, np.nan) for key, values in maps.items()}


def per_tree(trace: Trace) -> dict[str, np.ndarray]:
    """Per tree pass (the iterations with a tree): its iteration, `tau` the tokens it committed (the
    accepted path and the token drawn after it, as the papers' tables count), `accepted` the path's
    length, the `depth` and `top_k` asked for, `levels` the depth the tree reached, `size` its nodes,
    `alpha` (NaN where the method records none) and the drafter's and the model's milliseconds."""
    its = [(index, it) for index, it in enumerate(trace.iterations) if it.draft_tree is not None]
    return {
        "iteration": np.array([index for index, _ in its], dtype=int),
        "tau": np.array([len(it.committed) for _, it in its], dtype=int),
        "accepted": np.array([it.accepted for _, it in its], dtype=int),
        "depth": np.array([it.tree_depth or it.reach() for _, it in its], dtype=int),
        "top_k": np.array([np.nan if it.tree_top_k is None else it.tree_top_k for _, it in its], dtype=float),
        "levels": np.array([it.reach() for _, it in its], dtype=int),
        "size": np.array([len(it.tree.tokens) for _, it in its], dtype=int),
        "alpha": np.array([np.nan if it.alpha is None else it.alpha for _, it in its], dtype=float),
        "draft_ms": np.array([it.draft_ms for _, it in its], dtype=float),
        "forward_ms": np.array([it.forward_ms for _, it in its], dtype=float),
    }


def tree_layout(parents: list[int], spine: list[int] | tuple[int, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
    """Where to draw a tree: (depth, slot) of the head (index 0) and of every node i (index i + 1),
    `parents[i]` its parent (-1: the head), parents before children; `spine` the nodes of a path down from
    the head (the accepted path and the token drawn after it).

    The head and the spine lie on one straight line, so the path reads at a glance however wide the branches
    beside it. Each depth's nodes keep their parents' order, siblings in index order (the order they were
    tested): those before the spine's node go above the line, the rest below, so edges never cross. Each node
    sits level with its parent where its column has room, else as near as the nodes before it allow, and the
    line has half a slot more room either side for its labels. Where leaves once took a slot each, with
    parents midway (a PEANUT pass's accepted path then climbed 20 leaves, its head a drag away), a depth's
    nodes now sit near their parents: a tree needs as many slots as its widest depths put either side of the
    line (PEANUT's passes on "red apple": a median of 25 slots, where they had 32 leaves)."""
    parent_row = [-1, *(parent + 1 for parent in parents)]
    depth = np.zeros(len(parent_row), dtype=int)
    for row in range(1, len(parent_row)):
        depth[row] = depth[parent_row[row]] + 1
    on_spine = {0, *(node + 1 for node in spine)}
    slot = np.zeros(len(parent_row))
    order = np.zeros(len(parent_row), dtype=int)  # a row's place in its depth's column
    for level in range(1, int(depth.max()) + 1):
        column = sorted(np.flatnonzero(depth == level), key=lambda row: (order[parent_row[row]], row))
        order[column] = range(len(column))
        ideal = [slot[parent_row[row]] for row in column]  # non-decreasing: parents keep their order
        on_line = [i for i, row in enumerate(column) if row in on_spine]
        # the nodes before the spine's go above the line; past the spine's end, those of parents above it
        split = on_line[0] if on_line else next((i for i, at in enumerate(ideal) if at >= 0), len(column))
        edge = 0.0
        for i in reversed(range(split)):  # above the line, outwards from it
            edge = slot[column[i]] = min(ideal[i], edge - 1)
        edge = -1.0
        for i in range(split, len(column)):  # the spine's node (at 0) and below it
            edge = slot[column[i]] = 0.0 if column[i] in on_spine else max(ideal[i], edge + 1)
    slot = np.where(slot < 0, slot - 0.5, np.where(slot > 0, slot + 0.5, slot))  # room for the line's labels
    return depth, slot - slot.min()


def drawn_after(iteration: Iteration) -> int | None:
    """The token the target drew after a tree's accepted path (None where the image ended with it)."""
    return iteration.committed[-1] if len(iteration.committed) > iteration.accepted else None


def tree_of(trace: Trace, j: int) -> DraftTree | None:
    """Iteration j's draft tree, with a clear error for a bad j; None where it verified none."""
    return iteration_at(trace, j).draft_tree


class Speedup(NamedTuple):
    """AR's seconds over a method's from their undisturbed repeats, paired repeat by repeat (the i-th of
    each ran back to back, so a slow spell of the machine touches both): median, lowest, highest; on the
    compute clock where both runs kept it (`clock` "compute"), else on the wall clock ("wall")."""

    median: float
    low: float
    high: float
    repeats: int
    clock: str = "wall"


def timed_speedup(trace: Trace, ar: Trace, clock: str | None = None) -> Speedup | None:
    """The latency speedup with its spread, where both runs were timed again equally often; None where
    they were not (a GPU run's own clocks, a trace from before re-timing). On the compute clock (CPU time:
    what the method's work costs, which a busy machine's other programs cannot inflate) where both runs
    kept it, unless `clock` asks for "wall"."""
    if trace.timings is None or ar.timings is None or len(trace.timings) != len(ar.timings):
        return None
    kept = trace.compute_timings is not None and ar.compute_timings is not None
    if clock == "compute" and not kept:
        return None
    if clock != "wall" and kept:
        ar_times, times, used = ar.compute_timings, trace.compute_timings, "compute"
    else:
        ar_times, times, used = ar.timings, trace.timings, "wall"
    ratios = [a / m if m > 0 else math.nan for a, m in zip(ar_times, times, strict=True)]
    return Speedup(float(np.median(ratios)), min(ratios), max(ratios), len(ratios), used)


def verdict_clock(trace: Trace, ar: Trace) -> str:
    """The clock a run's latency verdict against AR comes from (`timed_speedup`): "compute" where both were
    timed again on it, else "wall" (their repeats' or their own)."""
    spread = timed_speedup(trace, ar)
    return "compute" if spread is not None and spread.clock == "compute" else "wall"


def clock_seconds(run: Trace, clock: str) -> float:
    """A run's seconds on `clock`, so that the seconds shown beside a verdict are the ones it compared (on a
    busy machine the wall clock also counts other programs' work: bars of 1.81 s against AR's 1.66 s once
    stood beside a compute-time verdict of 1.40x faster)."""
    if clock == "compute" and run.compute_seconds is not None:
        return run.compute_seconds
    return run.seconds


def draft_acceptance(iterations: list[Iteration]) -> float | None:
    """A continuous run's accepted share of its tested drafts (CSpD's alpha); None where none was tested.
    A draft after the first rejection is discarded untested and does not count."""
    tested = [fate for it in iterations for fate in it.tested_fates()]
    return tested.count("accepted") / len(tested) if tested else None


def only_the_draft_drew(iterations: list[Iteration]) -> bool:
    """Every token of these iterations drawn by a continuous pair's draft model, none verified (ar-draft)."""
    return bool(iterations) and all(it.drawn_by_draft_alone for it in iterations)


def draft_alone(trace: Trace) -> bool:
    """A continuous pair's draft model run alone (ar-draft), the target's one pass the prefill. Its passes
    are the draft's, and against AR it measures the cost ratio c, not a speedup."""
    return bool(trace.continuous and trace.draft_nfe) and only_the_draft_drew(trace.iterations)


def summary(trace: Trace, ar: Trace | None = None) -> dict:
    """Headline numbers of a run and, given the AR run of the same prompt and seed, its speedups.

    `nfe` counts the passes of the model that drew the tokens (the draft's for a draft alone);
    `nfe_ratio` is AR's model passes over this run's (how many times fewer passes it needed); a draft
    alone also gets `cost_ratio`, its seconds over AR's (CSpD's c).
    """
    tokens = len(trace.tokens)
    passes = trace.draft_nfe if draft_alone(trace) else trace.nfe
    result: dict = {
        "method": trace.method,
        "tokens": tokens,
        "nfe": passes,
        "seconds": trace.seconds,
        "step_compression": tokens / passes if passes else float("nan"),
    }
    if ar is not None:
        result["latency_speedup"] = ar.seconds / trace.seconds if trace.seconds else float("nan")
        result["nfe_ratio"] = ar.nfe / passes if passes else float("nan")
        if draft_alone(trace):
            clock = verdict_clock(trace, ar)  # the seconds shown beside it
            ours, theirs = clock_seconds(trace, clock), clock_seconds(ar, clock)
            result["cost_ratio"] = ours / theirs if theirs else float("nan")
    return result
