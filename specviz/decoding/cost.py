"""What one model pass over n tokens costs on this device, against a pass over one.

Latency speedup is step compression divided by this ratio: a method that needs 3x fewer passes of 17
tokens is 3x faster only where a 17-token pass costs what a 1-token pass does (a GPU, while the pass
is memory-bound), and no faster where it costs 3x (a small CPU). The passes are timed through the
model's own session after the prompt's prefill, on tokens that are then rolled back, so the cache
holds the prompt only: the cost of the first window of an image.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from specviz.models.continuous import is_continuous
from specviz.models.protocol import ImageModel

SIZES = (1, 2, 4, 8, 17, 33)  # 17 = a Jacobi window of 16 plus the token after it


@dataclass(frozen=True)
class PassCost:
    tokens: int
    ms: float  # median of the timed repeats
    ratio: float  # over the one-token pass


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
    medians = {}
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
        medians[count] = statistics.median(times)
    one = medians[1]
    return [PassCost(n, ms, ms / one) for n, ms in medians.items()]


def cost_sentence(costs: list[PassCost], step_compression: float | None = None, window: int = 17) -> str:
    """What the costs mean for a speedup: the window-sized pass's ratio, and the latency speedup a given
    step compression can give at that ratio."""
    at = min(costs, key=lambda cost: abs(cost.tokens - window))
    text = (
        f"Here a {at.tokens}-token pass costs {at.ratio:.1f}x a one-token pass ({at.ms:.1f} ms against "
        f"{costs[0].ms:.1f} ms)"
    )
    if step_compression:
        text += (
            f", so a step compression of {step_compression:.2f}x can give at most about "
            f"{step_compression / at.ratio:.2f}x in latency"
        )
    return text + "; on a GPU the ratio stays near 1 while a pass is memory-bound."
