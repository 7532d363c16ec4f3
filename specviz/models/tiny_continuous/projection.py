"""Continuous tokens of the embedded pair: each 3x3 RGB patch of a 48x48 image projected on its
leading principal components (fitted on the training patches), divided by the first component's
standard deviation so the largest coordinate has unit variance, as MAR scales its VAE latents.

Twelve components keep about 99% of the patch variance. The grid is tiny's 16x16, so every map of
the app applies unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specviz.models.tiny.tokenizer import PATCH, patchify, unpatchify

TOKEN_DIM = 12


@dataclass(frozen=True)
class PatchProjection:
    """mean (27,), basis (27, d) orthonormal columns, scale: token = (patch - mean) @ basis / scale."""

    mean: torch.Tensor
    basis: torch.Tensor
    scale: float

    @classmethod
    def fit(cls, images: torch.Tensor, dim: int = TOKEN_DIM) -> PatchProjection:
        """Principal components of the patches of (N, 48, 48, 3) uint8 images."""
        patches = patchify(images.float() / 255.0).reshape(-1, PATCH * PATCH * 3).double()
        mean = patches.mean(0)
        values, vectors = torch.linalg.eigh(torch.cov((patches - mean).T))
        order = values.argsort(descending=True)[:dim]
        basis = vectors[:, order]
        basis = basis * torch.where(basis.sum(0) < 0, -1.0, 1.0)  # a fixed sign per component
        return cls(mean.float(), basis.float(), float(values[order[0]].sqrt()))

    @property
    def dim(self) -> int:
        return self.basis.shape[1]

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """(N, H, W, 3) uint8 -> (N, H/3 * W/3, d) tokens."""
        patches = patchify(images.float() / 255.0)
        return (patches - self.mean) @ self.basis / self.scale

    def decode(self, tokens: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
        """(N, rows * cols, d) tokens -> (N, rows * 3, cols * 3, 3) uint8."""
        patches = tokens.float() * self.scale @ self.basis.T + self.mean
        return (unpatchify(patches, rows, cols).clamp(0, 1) * 255).round().to(torch.uint8)

    def state(self) -> dict[str, torch.Tensor]:
        return {"mean": self.mean, "basis": self.basis, "scale": torch.tensor([self.scale])}

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor]) -> PatchProjection:
        return cls(state["mean"].float(), state["basis"].float(), float(state["scale"][0]))
