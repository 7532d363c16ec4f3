"""Numbers derived from a Trace, shared by the figures, the animation frames and the tests.

A sequence position is a generated token; most are image cells, some are forced layout tokens
(`geometry.layout` entry other than -1), which have no place on the grid.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from specviz.trace import Iteration, Trace

MAP_KINDS = ("iteration", "run_length", "redraws")
# a stall: this many window passes in a row that accept nothing. Runs of one to five such passes are
# common on the embedded model (SJD and SCD-MC at W = 16: 409 runs over 24 runs of 4 prompts, 352 of
# them at most 5 long); the long ones (20 to 126 passes) are what the decoding-engine issue describes.
STALL_PASSES = 8


class GridState(NamedTuple):
    """What the grid shows at one iteration: per cell its state, sequence position and whether
    this iteration committed it."""

    state: np.ndarray  # (rows, cols) of str, one of palette.STATES
    position: np.ndarray  # (rows, cols) int
    now: np.ndarray  # (rows, cols) bool


def _check_index(trace: Trace, j: int) -> Iteration:
    """The iteration j, with a clear error instead of a silent negative index."""
    if not 0 <= j < len(trace.iterations):
        raise IndexError(f"iteration {j} is out of range; the trace has {len(trace.iterations)} iterations")
    return trace.iterations[j]


def fates(iteration: Iteration) -> list[str]:
    """What the window views colour each draft of one iteration by: its fate, except that a draft
    verified for the first time and neither accepted nor rejected shows as new."""
    first_new = len(iteration.drafts) - len(iteration.new_init)
    return [
        "new" if offset >= first_new and fate not in ("accepted", "rejected") else fate
        for offset, fate in enumerate(iteration.fate)
    ]


def stalls(trace: Trace, minimum: int = STALL_PASSES) -> list[tuple[int, int]]:
    """(first iteration, length) of every run of at least `minimum` consecutive window passes that
    accepted no draft: each fixed one token, as AR would, at the cost of a whole window."""
    found, run_start = [], None
    passes = [bool(it.drafts) and it.accepted == 0 for it in trace.iterations]
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


def tokens_through(trace: Trace, j: int) -> list[int]:
    """Tokens fixed once iteration j has run, to decode the partial image after it."""
    _check_index(trace, j)
    return trace.tokens[: committed_before(trace, j + 1)]


def cell_of_position(trace: Trace) -> np.ndarray:
    """Grid cell of every sequence position (-1 for a layout slot), to place positions on the grid."""
    is_cell = np.asarray(trace.geometry.layout) == -1
    return np.where(is_cell, np.cumsum(is_cell) - 1, -1)


def _on_grid(trace: Trace, values: np.ndarray, fill: object) -> np.ndarray:
    """Per-position values laid out on the (rows, cols) grid, dropping layout slots."""
    g = trace.geometry
    cells = cell_of_position(trace)
    grid = np.full(g.rows * g.cols, fill, dtype=values.dtype)
    grid[cells[cells >= 0]] = values[cells >= 0]
    return grid.reshape(g.rows, g.cols)


def grid_state(trace: Trace, j: int) -> GridState:
    """The grid at iteration j: committed before it, its window by fate, then pending; the cells it
    commits are flagged (a token sampled after the window, or without drafts, shows as committed)."""
    it = _check_index(trace, j)
    length = len(trace.geometry.layout)
    state = np.full(length, "pending", dtype=object)
    state[: it.start] = "committed"
    window = fates(it)[: length - it.start]  # a malformed trace may draft past the sequence
    state[it.start : it.start + len(window)] = window
    end = it.start + len(it.committed)
    state[it.start + len(window) : end] = "committed"  # sampled outside the window: no draft, no fate
    now = np.zeros(length, dtype=bool)
    now[it.start : end] = True
    return GridState(
        state=_on_grid(trace, state, "pending"),
        position=_on_grid(trace, np.arange(length), -1),
        now=_on_grid(trace, now, False),
    )


def acceptance_maps(trace: Trace) -> dict[str, np.ndarray]:
    """Per cell: the iteration that committed it, the length of that run, how often it was
    drafted before being fixed (NaN for cells not committed yet)."""
    length = len(trace.geometry.layout)
    iteration = np.full(length, np.nan)
    run_length = np.full(length, np.nan)
    drafted_uncommitted = np.zeros(length + 1)  # +1 where such a span starts, -1 after it ends
    for index, it in enumerate(trace.iterations):
        start, committed, window = it.start, len(it.committed), min(len(it.drafts), length - it.start)
        iteration[start : start + committed] = index
        run_length[start : start + committed] = committed
        if window > committed:
            drafted_uncommitted[start + committed] += 1
            drafted_uncommitted[start + window] -= 1
    redraws = np.cumsum(drafted_uncommitted[:length])
    redraws[np.isnan(iteration)] = np.nan
    return {
        "iteration": _on_grid(trace, iteration, np.nan),
        "run_length": _on_grid(trace, run_length, np.nan),
        "redraws": _on_grid(trace, redraws, np.nan),
    }


def per_iteration(trace: Trace) -> dict[str, np.ndarray]:
    """Per-iteration counts and timings, the series of the iteration plots."""
    its = trace.iterations
    return {
        "accepted": np.array([it.accepted for it in its], dtype=int),
        "committed": np.array([len(it.committed) for it in its], dtype=int),
        "changed": np.array([it.changed for it in its], dtype=int),
        "carried": np.array([it.carried for it in its], dtype=int),
        "window": np.array([len(it.drafts) for it in its], dtype=int),
        "new_drafts": np.array([len(it.new_init) for it in its], dtype=int),
        "forward_ms": np.array([it.forward_ms for it in its], dtype=float),
        "verify_ms": np.array([it.verify_ms for it in its], dtype=float),
    }


def summary(trace: Trace, ar: Trace | None = None) -> dict:
    """Headline numbers of a run and, given the AR run of the same prompt and seed, its speedups.

    `nfe_ratio` is AR's model passes over this run's (how many times fewer passes it needed).
    """
    tokens = len(trace.tokens)
    result: dict = {
        "method": trace.method,
        "tokens": tokens,
        "nfe": trace.nfe,
        "seconds": trace.seconds,
        "step_compression": tokens / trace.nfe if trace.nfe else float("nan"),
    }
    if ar is not None:
        result["latency_speedup"] = ar.seconds / trace.seconds if trace.seconds else float("nan")
        result["nfe_ratio"] = ar.nfe / trace.nfe if trace.nfe else float("nan")
    return result
