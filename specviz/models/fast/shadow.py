"""Two sessions of one model in lock-step: how the fast path is shown to compute what the plain path does.

Every pass runs on both sessions with the same tokens; the leading session's logits are returned, so a
method decodes exactly as it would on the leading path, and every pass's distributions are compared: the
largest total variation distance between the two paths' next-token distributions, over every row of
every pass. A method's run on the fast path samples from these same distributions, so this distance
bounds how far the fast path can move its samples. Comparing runs' tokens instead would not prove it:
a float rounding apart (the padded passes reduce in a different order) can flip a near tie in a draft
tree's order or a uniform draw at a boundary, and from there two runs go their own ways.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def total_variation(first: torch.Tensor, second: torch.Tensor) -> float:
    """The largest total variation distance between rows of two (n, V) logits (n may be 1 or a vector)."""
    gap = (first.float().softmax(-1) - second.float().softmax(-1)).abs().sum(-1) / 2
    return float(gap.max())


class ShadowedSession:
    """The `Session` protocol over a leading session, each pass repeated on a shadow session."""

    def __init__(self, leading: Any, shadow: Any) -> None:
        self._leading = leading
        self._shadow = shadow
        self.largest_gap = total_variation(leading.next_logits, shadow.next_logits)
        self.passes = 0

    def __getattr__(self, name: str) -> Any:  # position, next_logits, geometry, features, ...: the leading's
        return getattr(self._leading, name)

    def forward(self, tokens: torch.Tensor, parents: Sequence[int] | Any = None) -> torch.Tensor:
        logits = self._leading.forward(tokens, parents)
        self._compare(logits, self._shadow.forward(tokens, parents))
        return logits

    def forward_at(
        self, tokens: torch.Tensor, positions: Sequence[int], sees: torch.Tensor | None = None
    ) -> torch.Tensor:
        logits = self._leading.forward_at(tokens, positions, sees)
        self._compare(logits, self._shadow.forward_at(tokens, positions, sees))
        return logits

    def keep(self, indices: Sequence[int]) -> None:
        self._leading.keep(indices)
        self._shadow.keep(indices)

    def commit(self, keep: Any) -> None:
        self._leading.commit(keep)
        self._shadow.commit(keep)
        self._compare(self._leading.next_logits, self._shadow.next_logits)

    def _compare(self, leading: torch.Tensor, shadow: torch.Tensor) -> None:
        self.passes += 1
        self.largest_gap = max(self.largest_gap, total_variation(leading, shadow))


class ShadowedModel:
    """A model whose sessions are `ShadowedSession`s of `leading`'s and `shadow`'s sessions; everything
    else is `leading`'s. `largest_gap` is the largest distance any of its sessions saw."""

    def __init__(self, leading: Any, shadow: Any) -> None:
        self._leading = leading
        self._shadow = shadow
        self.sessions: list[ShadowedSession] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._leading, name)

    def session(self, prompt: str, guidance_scale: float) -> ShadowedSession:
        shadowed = ShadowedSession(
            self._leading.session(prompt, guidance_scale), self._shadow.session(prompt, guidance_scale)
        )
        self.sessions.append(shadowed)
        return shadowed

    @property
    def largest_gap(self) -> float:
        return max((session.largest_gap for session in self.sessions), default=0.0)
