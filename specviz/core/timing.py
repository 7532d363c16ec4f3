"""How a race is timed: the undisturbed repeats of each run, as the command line and the app make them.

Light (no torch): the command line gives these as its defaults and bounds before anything heavy is imported.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from specviz.core.inputs import InputError

TIMINGS = 3  # undisturbed repeats of each run; the median is reported, the spread beside it
MAX_TIMINGS = 20
TIMING_BUDGET = 20.0  # seconds of repeats the app spends at most once two rounds are done
TIMINGS_ENV_VAR = "SPECVIZ_TIMINGS"  # a deployment's own count (fewer on a busy Space, more for a lecture)


def timings_wanted() -> int:
    """How many undisturbed repeats the app makes of each run: SPECVIZ_TIMINGS, else TIMINGS."""
    value = os.environ.get(TIMINGS_ENV_VAR, str(TIMINGS)).strip()
    if not (value.isascii() and value.isdigit()) or not 1 <= int(value) <= MAX_TIMINGS:  # isdigit takes "²", "٣"
        raise InputError(f"{TIMINGS_ENV_VAR} must be a whole number from 1 to {MAX_TIMINGS}, got {value!r}")
    return int(value)


def compute_clock(threads: int) -> Callable[[], float]:
    """The clock of this process's own compute, which other programs on a busy machine cannot slow: the
    calling thread's CPU time where torch computes on that thread alone (one intra-op thread), else the
    whole process's CPU time (the pool's workers included). Wall time is what a user waits, but on a shared
    CPU it times the other programs too: under two busy processes on 2 cores, AR's wall time grew 4.5x and
    the wall-clock ratio of AR to SJD swung from 0.96 to 1.31 between identical runs, where the CPU-time
    ratio stayed within 1.24-1.29."""
    return time.thread_time if threads == 1 else time.process_time
