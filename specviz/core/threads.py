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

from specviz.core.inputs import brief

ENV_VAR = "SPECVIZ_THREADS"
MAX_THREADS = 1024  # OpenMP starts every thread asked for: a mistyped 10**9 would exhaust the machine


class ThreadSettingError(ValueError):
    """SPECVIZ_THREADS is not an integer from 1 to MAX_THREADS."""


def available_cores() -> int:
    """Cores this process may run on (its affinity, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def choose_threads(processes: int = 1) -> int:
    """SPECVIZ_THREADS if set, else every available core but one (at least one), shared among `processes`
    running side by side on this machine (the ranks of a launch on one node)."""
    given = os.environ.get(ENV_VAR)
    if given is not None:
        text = given.strip()
        if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_THREADS:  # isdigit takes "²", "٣"
            raise ThreadSettingError(
                f"{ENV_VAR} must be a whole number from 1 to {MAX_THREADS} in digits 0-9, got {brief(given)}"
            )
        return int(text)
    return max(1, (available_cores() - 1) // max(1, processes))


def configure_threads(processes: int = 1) -> int:
    """Apply the choice to torch's intra-op pool and return it."""
    import torch  # here: the command line answers --help and argument errors without torch

    threads = choose_threads(processes)
    torch.set_num_threads(threads)
    return threads
