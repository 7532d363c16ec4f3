"""How a race is timed: the undisturbed repeats of each run, as the command line and the app make them.

Light (no torch): the command line gives these as its defaults and bounds before anything heavy is imported.
"""

from __future__ import annotations

import os

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
