"""A KV-cached session shared by the transformers-based families.

It holds one batch row for the prompt and, when guidance is on, a second row for the
unconditional prompt; both rows see the same generated tokens. Rejected drafts are cropped from
the `DynamicCache` (`crop(-n)`, a negative count in transformers 5), so they leave no trace.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import DynamicCache

from specviz.models.protocol import IMAGE_CELL, Geometry

# (tokens (rows, n), cache) -> raw logits (rows, n, V): one model pass appending n tokens per row
StepFn = Callable[[torch.Tensor, DynamicCache], torch.Tensor]


def combine_guidance(raw: torch.Tensor, scale: float) -> torch.Tensor:
    """uncond + scale * (cond - uncond) on raw logits; row 0 is conditional, row 1 unconditional.

    A token masked (-inf) in either row stays masked instead of turning into NaN.
    """
    if raw.shape[0] == 1:
        return raw[0]
    cond, uncond = raw[0], raw[1]
    return (uncond + scale * (cond - uncond)).nan_to_num(nan=float("-inf"))


class CachedSession:
    """Implements the `Session` protocol over a step function and a prefilled `DynamicCache`."""

    def __init__(
        self,
        geometry: Geometry,
        cache: DynamicCache,
        prefill_logits: torch.Tensor,
        step: StepFn,
        guidance_scale: float,
        rows: int,
        combine: Callable[[torch.Tensor, float], torch.Tensor] = combine_guidance,
        token_vectors: torch.Tensor | None = None,
    ):
        self.geometry = geometry
        self.token_vectors = token_vectors
        self.length = 0
        self.nfe = 1
        self._cache = cache
        self._step = step
        self._scale = guidance_scale
        self._rows = rows
        self._combine = combine
        self._pending = 0  # tokens in the cache after the committed prefix
        self._last: torch.Tensor | None = None
        self._forced = torch.tensor(geometry.layout)
        self._next = self._force(combine(prefill_logits.float(), guidance_scale).unsqueeze(0), 0)[0]

    @property
    def next_logits(self) -> torch.Tensor:
        return self._next

    def _force(self, logits: torch.Tensor, first_position: int) -> torch.Tensor:
        """One-hot logits at layout slots among positions first_position .. first_position + n - 1."""
        end = min(first_position + logits.shape[0], self.geometry.seq_len)
        forced = self._forced[first_position:end]
        slots = (forced != IMAGE_CELL).nonzero().squeeze(1)
        if len(slots) == 0:
            return logits
        logits = logits.clone()
        logits[slots] = float("-inf")
        logits[slots, forced[slots].to(logits.device)] = 0.0
        return logits

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if self._pending:
            self._cache.crop(-self._pending)
        tokens = tokens.reshape(1, -1).expand(self._rows, -1)
        raw = self._step(tokens, self._cache).float()
        self._pending = tokens.shape[1]
        self.nfe += 1
        self._last = self._force(self._combine(raw, self._scale), self.length + 1)
        return self._last

    def commit(self, count: int) -> None:
        if not 0 <= count <= self._pending:
            raise ValueError(f"cannot commit {count} of {self._pending} appended tokens")
        if count < self._pending:
            self._cache.crop(-(self._pending - count))
        if count:
            self._next = self._last[count - 1]
            self.length += count
        self._pending = 0
