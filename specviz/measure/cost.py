"""What one model pass over n tokens costs on this device, against a pass over one.

Latency speedup is step compression divided by this ratio: a method that needs 3x fewer passes of 17
tokens is 3x faster only where a 17-token pass costs what a 1-token pass does (a GPU, while the pass
is memory-bound), and no faster where it costs 3x (a small CPU). The passes are timed through the
model's own session after the prompt's prefill, on tokens that are then rolled back, so the cache
holds the prompt only: the cost of the first window of an image.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

import torch

from specviz.metrics import Speedup
from specviz.models.protocol import ImageModel, is_continuous
from specviz.viz.narration import LatencyVerdict, latency_verdict

SIZES = (1, 2, 4, 8, 17, 33)  # 17 = a Jacobi window of 16 plus the token after it
CHEAPER_BY_CHANCE = 0.05  # a longer pass measured up to this share cheaper than a shorter one is noise
REPEAT_SPREAD = 1.5  # a size whose slowest repeat took this many times its fastest was disturbed


@dataclass(frozen=True)
class PassCost:
    tokens: int
    ms: float  # median of the timed repeats
    ratio: float  # over the one-token pass
    low_ms: float = math.nan  # the fastest and the slowest repeat
    high_ms: float = math.nan
    repeats: int = 1  # timed, after the warm-up

    @property
    def ranged(self) -> bool:
        return not math.isnan(self.low_ms + self.high_ms)

    def ratio_range(self, one: PassCost) -> tuple[float, float]:
        """The lowest and highest ratio the repeats allow against the one-token pass's repeats (the
        median ratio where either kept no range)."""
        if not (self.ranged and one.ranged):
            return self.ratio, self.ratio
        return self.low_ms / one.high_ms, self.high_ms / one.low_ms


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.inference_mode()
def pass_costs(
    model: ImageModel, prompt: str, sizes: tuple[int, ...] = SIZES, repeats: int = 5, seed: int = 0
) -> list[PassCost]:
    """Median time of one forward over n appended tokens, for each n in `sizes` (one-token first); a
    continuous pair's passes are its target's backbone (the head's denoising is per token)."""
    if 1 not in sizes:
        sizes = (1, *sizes)
    generator = torch.Generator().manual_seed(seed)
    if is_continuous(model):
        session = model.session(prompt, model.default_sampling.guidance_scale).target
    else:
        session = model.session(prompt, model.default_sampling.guidance_scale)
    limit = session.geometry.seq_len - 1
    repeats_ms = {}
    for n in sorted(set(sizes)):
        count = min(n, limit)
        if is_continuous(model):
            tokens = torch.randn(count, model.token_dim, generator=generator).to(model.device)
        else:
            image_codes = session.geometry.vocab_size
            tokens = torch.randint(image_codes, (count,), generator=generator).to(model.device)
        times = []
        for attempt in range(repeats + 1):
            _sync(model.device)
            started = time.perf_counter()
            session.forward(tokens)
            _sync(model.device)
            if attempt:  # the first is a warm-up
                times.append((time.perf_counter() - started) * 1000)
            session.commit(0)
        repeats_ms[count] = times
    one = statistics.median(repeats_ms[1])
    return [
        PassCost(n, statistics.median(ms), statistics.median(ms) / one, min(ms), max(ms), len(ms))
        for n, ms in repeats_ms.items()
    ]


def cost_sentence(
    costs: list[PassCost],
    step_compression: float | None = None,
    window: int = 17,
    measured: LatencyVerdict | None = None,
) -> str:
    """What the costs mean for a speedup: the window-sized pass's ratio (the median of its repeats, with the
    range its repeats allow against the one-token pass's); for a run's step compression, the latency it would
    have were every pass that size, as an estimate in the words of `latency_verdict` (not a bound: a run's
    passes differ in size), and the run's own verdict when it raced AR (`measured`), in the race's words; and,
    where the timings cannot be right (`doubts`), that they were disturbed and the estimate comes from them."""
    at, one = min(costs, key=lambda cost: abs(cost.tokens - window)), costs[0]
    low, high = at.ratio_range(one)
    ranged = at.ranged and one.ranged
    spread = f", from {low:.1f}x to {high:.1f}x across the repeats" if ranged else ""
    text = (
        f"Here a {at.tokens}-token pass costs {at.ratio:.1f}x a one-token pass ({at.ms:.1f} ms against "
        f"{one.ms:.1f} ms, medians{spread}); on a GPU the ratio stays near 1 while a pass is memory-bound."
    )
    if step_compression:
        median = step_compression / at.ratio
        repeats = min(at.repeats, one.repeats)
        interval = Speedup(median, step_compression / high, step_compression / low, repeats) if ranged else None
        text += (
            f" Estimated from these costs for a step compression of {step_compression:.2f}x, every pass "
            f"{at.tokens} tokens: {latency_verdict(median, interval)}."
        )
    if measured is not None:
        text += f" Measured when it raced AR: {measured}."
    disturbed = doubts(costs)
    if disturbed:
        source = ", and the estimate comes from them" if step_compression else ""
        text += f" These timings were disturbed ({'; '.join(disturbed)}){source}: measure again on a quiet machine."
    return text


def doubts(costs: list[PassCost]) -> list[str]:
    """Why these timings cannot be right, if they cannot: a longer pass measured cheaper than a shorter
    one (a pass does not get cheaper as tokens are added: the machine was busy while the shorter ran),
    or repeats of one size far apart. `costs` in order of tokens, as `pass_costs` gives them."""
    found = []
    dearest = costs[0]  # the most expensive of the shorter passes so far
    for cost in costs[1:]:
        if cost.ms < dearest.ms * (1 - CHEAPER_BY_CHANCE):
            found.append(
                f"a {cost.tokens}-token pass measured cheaper than a {dearest.tokens}-token pass "
                f"({cost.ms:.2f} ms against {dearest.ms:.2f} ms)"
            )
        dearest = max(dearest, cost, key=lambda known: known.ms)
    for cost in costs:
        if cost.high_ms > REPEAT_SPREAD * cost.low_ms:
            found.append(
                f"the {cost.tokens}-token pass's repeats ranged from {cost.low_ms:.2f} to {cost.high_ms:.2f} ms"
            )
    return found
