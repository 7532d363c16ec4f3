"""The protocol of continuous-token models, beside (not inside) the discrete one.

A continuous-token AR model (MAR and its successors) samples each token with a small diffusion
head: the backbone turns the prefix into a condition z per position, the head denoises Gaussian
noise into the token given z. So a session returns conditions, not logits, and methods sample and
evaluate densities through the model's `DiffusionHead` (`specviz.models.networks.diffusion_head`).

- `ContinuousSession`: one generation in progress. `next_condition` (1, G, H) is the condition of
  position `position` given the committed prefix; `forward(vectors)` appends n tokens (n, d) after
  the committed prefix (discarding anything appended and not committed) and returns (n, G, H): row i
  conditions position `position + i + 1`. One backbone pass. `commit(keep)` keeps the first `keep`
  of the last forward; `truncate(position)` forgets committed tokens from `position` on (a cache
  crop: how a draft model takes back its rejected drafts). G = 2 rows (conditional, unconditional)
  when `guidance_scale` is not 1, else 1.
- `ContinuousPair`: a target and a draft model on the same tokens, the pair CSpD needs; its
  `session` opens both on one prompt (a random-order model draws its generation order from `seed`
  and puts it in the session's geometry), and `decode` turns (n, d) tokens into pixels (a partial
  grid leaves the rest blank; a random-order pair's `decode` also takes the `order` of its tokens'
  cells, see `protocol.decode_in_order`). A pair may have no draft (MAR-B, the smallest): then only the target's
  own methods run.

A continuous model's tokens have no ids: its geometry has a vocabulary of one (every position's id
is 0 in a trace) and the values travel in the trace's `vectors`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from PIL import Image

from specviz.core.settings import SamplingSettings, SettingsError
from specviz.models.networks.diffusion_head import DiffusionHead, Guidance
from specviz.models.protocol import Geometry


class ContinuousSession:
    """The bookkeeping every continuous session shares; a model supplies `_run` (one backbone pass
    appending vectors after `length` cached tokens, returning their (n, G, H) outputs) and `_crop`
    (drop cached tokens from `length` on). The condition of every committed position is kept, so a
    truncation needs no pass."""

    def __init__(
        self, head: DiffusionHead, geometry: Geometry, token_dim: int, guidance_scale: float, first: torch.Tensor
    ):
        self.head, self.geometry, self.token_dim, self.guidance_scale = head, geometry, token_dim, guidance_scale
        self.position = 0
        self.nfe = 1  # the prefill pass that produced `first`
        self._conditions = [first]  # (1, G, H) of positions 0 .. position
        self._pending: tuple[torch.Tensor, torch.Tensor] | None = None
        self.vectors: list[torch.Tensor] = []  # committed tokens, (d,) each

    @property
    def next_condition(self) -> torch.Tensor:
        return self._conditions[self.position]

    def guidance_at(self, positions: torch.Tensor) -> Guidance:
        """The guidance scale of the tokens at `positions` (n,): one scale for all here; a model whose
        scale follows a schedule over the positions (MAR) returns one per token."""
        return self.guidance_scale

    def forward(self, vectors: torch.Tensor) -> torch.Tensor:
        self._crop(self.position)
        outputs = self._run(vectors, self.position)
        self.nfe += 1
        self._pending = (vectors, outputs)
        return outputs

    def commit(self, keep: int) -> None:
        if keep and (self._pending is None or keep > len(self._pending[0])):
            raise ValueError(f"cannot keep {keep} tokens of the last forward")
        if keep:
            vectors, outputs = self._pending
            self.vectors.extend(vectors[:keep])
            self._conditions.extend(outputs[i : i + 1] for i in range(keep))
            self.position += keep
        self._crop(self.position)
        self._pending = None

    def truncate(self, position: int) -> None:
        """Forget committed tokens from `position` on (a draft taking back its rejected drafts)."""
        if not 0 <= position <= self.position:
            raise ValueError(f"can truncate to 0..{self.position} committed tokens, not {position}")
        del self.vectors[position:]
        del self._conditions[position + 1 :]
        self.position = position
        self._crop(position)
        self._pending = None

    def _run(self, vectors: torch.Tensor, length: int) -> torch.Tensor:
        raise NotImplementedError

    def _crop(self, length: int) -> None:
        raise NotImplementedError


@dataclass
class PairSession:
    """A target and a draft session on one prompt; `nfe` counts target passes (the expensive model)."""

    target: ContinuousSession
    draft: ContinuousSession | None

    @property
    def nfe(self) -> int:
        return self.target.nfe

    @property
    def geometry(self) -> Geometry:
        return self.target.geometry


@runtime_checkable
class ContinuousPair(Protocol):
    name: str
    geometry: Geometry
    token_dim: int
    default_sampling: SamplingSettings
    device: torch.device
    reference_generate: None

    def session(self, prompt: str, guidance_scale: float, seed: int = 0) -> PairSession: ...

    def decode(self, vectors: torch.Tensor | list) -> Image.Image: ...


def check_continuous_sampling(sampling: SamplingSettings) -> None:
    """Top-k and top-p truncate a discrete distribution; a diffusion head has none to truncate."""
    if sampling.top_k is not None or sampling.top_p != 1.0:
        raise SettingsError("a continuous-token model samples with a diffusion head: leave top-k and top-p off")
    if sampling.greedy:
        raise SettingsError("a continuous-token model needs a temperature above 0 (its head samples noise)")


def sample_noise(count: int, head: DiffusionHead, dim: int, generator: torch.Generator) -> torch.Tensor:
    """(count, S + 1, d) standard normal noise for `count` tokens: x_T and one draw per denoising step."""
    return torch.randn(count, head.steps + 1, dim, generator=generator, device=generator.device)
