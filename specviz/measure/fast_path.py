"""What the fast path (`specviz.models.fast.fixed_passes`) gains on a model, and proof that it changes nothing.

Each method first runs once with both paths in lock-step (`specviz.models.fast.shadow`): the largest total
variation distance between their next-token distributions over every pass. Then it runs on the plain path
and on the fast path in turns, per prompt and seed; AR's rows on both paths give each path's latency
speedup.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from specviz.core.settings import SamplingSettings
from specviz.decoding import run
from specviz.models.fast.shadow import ShadowedModel


@dataclass
class FastPathResult:
    method: str
    plain_seconds: float  # mean seconds per image on the plain path
    fast_seconds: float  # the same on the fast path
    plain_speedup: float  # AR's plain seconds / the method's plain seconds
    fast_speedup: float  # AR's fast seconds / the method's fast seconds
    largest_gap: float  # total variation distance, the largest over the lock-step run's passes

    @property
    def gain(self) -> float:
        """How many times faster the fast path runs this method."""
        return self.plain_seconds / self.fast_seconds


def measure_fast_path(
    plain, fast, methods: list[str], prompts: list[str], seeds: list[int], sampling: SamplingSettings
) -> list[FastPathResult]:
    """Every method in `methods` (AR first, added if missing) on `plain` and `fast`: one model's two paths.

    The lock-step run comes first and is also the warm-up: the fast path leads it, so it captures the
    graphs of the widths its own run of the first prompt and seed uses."""
    methods = ["ar"] + [name for name in methods if name != "ar"]
    gaps = {}
    for name in methods:
        shadowed = ShadowedModel(fast, plain)
        run(shadowed, name, prompts[0], seeds[0], sampling)
        gaps[name] = shadowed.largest_gap
    seconds: dict[tuple[str, str], list[float]] = {}
    for prompt in prompts:
        for seed in seeds:
            for name in methods:
                for path, model in (("plain", plain), ("fast", fast)):
                    seconds.setdefault((name, path), []).append(run(model, name, prompt, seed, sampling).seconds)
    mean = {key: statistics.fmean(values) for key, values in seconds.items()}
    return [
        FastPathResult(
            name,
            mean[name, "plain"],
            mean[name, "fast"],
            mean["ar", "plain"] / mean[name, "plain"],
            mean["ar", "fast"] / mean[name, "fast"],
            gaps[name],
        )
        for name in methods
    ]


def fast_path_markdown(results: list[FastPathResult], model: str, device: str) -> list[str]:
    """A table of the results, with what its columns mean."""
    lines = [
        f"`{model}` on {device}: each method on the plain path and on the fast path (a static cache, passes "
        "padded to powers of two, CUDA graphs on a GPU), seconds per image.",
        "",
        "| method | plain s | fast s | fast path gain | latency speedup, plain | latency speedup, fast "
        "| largest TV distance |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    rows = [
        f"| {r.method} | {r.plain_seconds:.3f} | {r.fast_seconds:.3f} | {r.gain:.2f}x | {r.plain_speedup:.2f}x | "
        f"{r.fast_speedup:.2f}x | {r.largest_gap:.1e} |"
        for r in results
    ]
    return [
        *lines,
        *rows,
        "",
        "Latency speedup: AR's seconds on the same path over the method's. Largest TV distance: both paths in "
        "lock-step, the largest total variation distance between their next-token distributions over every pass "
        "of one run (float rounding: the padded passes reduce in another order).",
    ]
