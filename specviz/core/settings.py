"""Sampling settings: they turn a session's logits into the distribution p that every decoding
method samples from and verifies against. The lossless promise is about this p."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

MIN_TEMPERATURE = 1e-6  # below this a float32 division overflows; the distribution is greedy by then


class SettingsError(ValueError):
    """A setting out of range; the message says what is allowed."""


@dataclass(frozen=True)
class SamplingSettings:
    """temperature 0 means greedy; top_k None and top_p 1.0 mean no truncation."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float = 1.0
    guidance_scale: float = 1.0

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p", "guidance_scale"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise SettingsError(f"{name.replace('_', ' ')} must be a finite number, got {value!r}")
        if not 0 <= self.temperature <= 100:
            raise SettingsError(f"temperature must be between 0 (greedy) and 100, got {self.temperature}")
        if self.top_k is not None and (
            isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1
        ):
            raise SettingsError(f"top-k must be a positive integer (leave it out to disable), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise SettingsError(f"top-p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.guidance_scale <= 50:
            raise SettingsError(f"guidance scale must be between 0 and 50 (1 = no guidance), got {self.guidance_scale}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict:
        return asdict(self)

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        """(..., V) logits -> (..., V) float32 probabilities after temperature, top-k and top-p.

        Computed so that no setting the checks allow can produce NaN: logits are shifted by their
        maximum before the temperature divides them (a tiny temperature tends to greedy instead of
        overflowing), and the most likely token always survives top-p.
        """
        import torch  # here: the settings are checked on the command line before torch is imported

        logits = logits.float()
        if self.greedy:
            return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
        logits = (logits - logits.amax(-1, keepdim=True)) / max(self.temperature, MIN_TEMPERATURE)
        if self.top_k is not None and self.top_k < logits.shape[-1]:
            kth = logits.topk(self.top_k, dim=-1).values[..., -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if self.top_p < 1.0:
            sorted_logits, order = logits.sort(dim=-1, descending=True)
            sorted_probs = sorted_logits.softmax(-1)
            # drop a token when the mass strictly before it already reaches top_p; the first always stays
            drop_sorted = sorted_probs.cumsum(-1) - sorted_probs >= self.top_p
            drop_sorted[..., 0] = False
            drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
            logits = logits.masked_fill(drop, float("-inf"))
        return logits.softmax(-1)
