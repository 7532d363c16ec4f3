"""The continuous toy pair `specviz.measure.continuous_lossless` proves methods exact on: a target and a draft
on three 2-dimensional positions, each a backbone of fixed random maps and a random diffusion head."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specviz.core.settings import SamplingSettings
from specviz.models.continuous import ContinuousSession, PairSession
from specviz.models.networks.diffusion_head import DenoiserMLP, DiffusionHead
from specviz.models.protocol import Geometry


class ToyConditions(torch.nn.Module):
    """The toy's backbone: the (G, H) condition of position i is tanh(offset_i + sum_j<i weight_ij x_j)."""

    def __init__(self, positions: int, rows: int, width: int, dim: int, generator: torch.Generator):
        super().__init__()
        self.dim = dim
        self.offset = torch.nn.Parameter(torch.randn(positions, rows, width, generator=generator))
        self.weight = torch.nn.Parameter(torch.randn(positions, positions, rows, width, dim, generator=generator))

    def forward(self, prefix: torch.Tensor, position: int) -> torch.Tensor:
        """Conditions (N, G, H) of `position` for N prefixes (N, position, d)."""
        mixed = torch.einsum("jghd,njd->ngh", self.weight[position, :position], prefix)
        return torch.tanh(self.offset[position] + mixed)


class ToySession(ContinuousSession):
    """A toy model behind the continuous protocol. Its cache holds the token vectors fed so far, as a KV
    cache holds their keys: a pass reads its prefix from the cache, not from the committed tokens, so a
    session that forgot to crop rejected drafts would condition on them."""

    def __init__(self, backbone: ToyConditions, head: DiffusionHead, geometry: Geometry, guidance: float):
        self.backbone = backbone
        self.cache = torch.zeros(0, backbone.dim)
        first = backbone(self.cache[None], 0)
        super().__init__(head, geometry, backbone.dim, guidance, first)

    def _run(self, vectors: torch.Tensor, length: int) -> torch.Tensor:
        prefix = torch.cat([self.cache, vectors])
        start = len(self.cache)
        self.cache = prefix
        return torch.stack([self.backbone(prefix[None, :position], position)[0] for position in
                            range(start + 1, start + len(vectors) + 1)])  # fmt: skip

    def _crop(self, length: int) -> None:
        self.cache = self.cache[:length]


def random_head(dim: int, width: int, generator: torch.Generator, base: DenoiserMLP | None, spread: float):
    """A denoiser with random weights everywhere (a trained one's zero-initialised layers included),
    or `base`'s weights perturbed by `spread` times as much."""
    network = DenoiserMLP(dim, width, 16, 1, frequency_dim=16)
    with torch.no_grad():
        for name, parameter in network.named_parameters():
            # unit gain per layer, and a small output layer, keep v (the variance interpolation) near
            # [-1, 1] and epsilon near unit scale, as training does
            gain = 0.3 if name.startswith("output") else 1.0
            fan_in = parameter.shape[1] if parameter.ndim == 2 else 10.0
            values = torch.randn(parameter.shape, generator=generator) * gain / fan_in**0.5
            if base is not None:
                values = dict(base.named_parameters())[name] + spread * values
            parameter.copy_(values)
    return network.eval().requires_grad_(False)


@dataclass
class ContinuousToy:
    """Target and draft on three 2-dimensional positions, 4 denoising steps, guidance 1.5, temperature 0.9."""

    seed: int = 7
    positions: int = 3
    dim: int = 2
    width: int = 8
    steps: int = 4
    spread: float = 0.3

    def __post_init__(self) -> None:
        generator = torch.Generator().manual_seed(self.seed)
        self.name = "continuous-toy"
        self.device = torch.device("cpu")
        self.geometry = Geometry.plain_grid(1, self.positions, 1)
        self.token_dim = self.dim
        self.default_sampling = SamplingSettings(temperature=0.9, guidance_scale=1.5)
        # conditions are defined one position past the end: a pass that feeds the last token asks for it
        self.target_backbone = ToyConditions(self.positions + 1, 2, self.width, self.dim, generator)
        self.draft_backbone = ToyConditions(self.positions + 1, 2, self.width, self.dim, generator)
        self.target_backbone.requires_grad_(False)
        self.draft_backbone.requires_grad_(False)
        with torch.no_grad():  # the draft's backbone: the target's, perturbed
            for target, draft in zip(self.target_backbone.parameters(), self.draft_backbone.parameters(), strict=True):
                draft.copy_(target + self.spread * draft)
        target = random_head(self.dim, self.width, generator, None, 0.0)
        draft = random_head(self.dim, self.width, generator, target, self.spread)
        self.target_head = DiffusionHead(target, self.steps)
        self.draft_head = DiffusionHead(draft, self.steps)

    def session(self, prompt: str, guidance_scale: float, seed: int = 0) -> PairSession:
        """Both models on one prompt; the grid is drawn in raster order, whatever the seed."""
        return PairSession(
            ToySession(self.target_backbone, self.target_head, self.geometry, guidance_scale),
            ToySession(self.draft_backbone, self.draft_head, self.geometry, guidance_scale),
        )

    @torch.inference_mode()
    def target_samples(self, count: int, generator: torch.Generator) -> torch.Tensor:
        """(count, positions * d) sequences from the target's own AR sampling, all at once."""
        sampling = self.default_sampling
        tokens = torch.zeros(count, 0, self.dim)
        for position in range(self.positions):
            conditions = self.target_backbone(tokens, position)
            noise = torch.randn(count, self.steps + 1, self.dim, generator=generator)
            path = self.target_head.sample(conditions, noise, sampling.guidance_scale, sampling.temperature)
            tokens = torch.cat([tokens, path.tokens[:, None]], dim=1)
        return tokens.reshape(count, -1)
