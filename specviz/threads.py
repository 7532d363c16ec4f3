"""How many threads torch runs on the CPU, chosen so that a busy machine does not stall a run.

OpenMP teams spin-wait for each other. With as many threads as cores, one core taken by another
process (a browser, a second run, a lecture's screen sharing) leaves a thread that waits for a
descheduled partner, and every short pass pays for it. Measured on the 2-core development machine,
the embedded model's AR run: 1.80 s with one thread and 1.75 s with two on a quiet machine, but with
one core kept busy by another process 1.76 s against 7.25 s (SJD: 1.53 s against 4.03 s). Leaving
one core free costs little when the machine is quiet and saves several-fold when it is not.
"""

from __future__ import annotations

import os

import torch

ENV_VAR = "SPECVIZ_THREADS"


class ThreadSettingError(ValueError):
    """SPECVIZ_THREADS is not a positive integer."""


def available_cores() -> int:
    """Cores this process may run on (its affinity, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def choose_threads() -> int:
    """SPECVIZ_THREADS if set, else every available core but one (at least one)."""
    given = os.environ.get(ENV_VAR)
    if given is not None:
        if not given.strip().isdigit() or int(given) < 1:
            raise ThreadSettingError(f"{ENV_VAR} must be a positive integer, got {given!r}")
        return int(given)
    return max(1, available_cores() - 1)


def configure_threads() -> int:
    """Apply the choice to torch's intra-op pool and return it."""
    threads = choose_threads()
    torch.set_num_threads(threads)
    return threads
