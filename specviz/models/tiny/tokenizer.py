"""A k-means patch VQ tokenizer: each 3x3 RGB patch of a 48x48 image becomes one of 1024 codes.

It is a real vector quantiser (nearest codebook vector, decode by lookup), small enough to train
in seconds and to ship as one tensor. Codebook-vector distances also give LANTERN and GSD their
notion of "nearby tokens".
"""

from __future__ import annotations

import torch

PATCH = 3


def patchify(images: torch.Tensor, patch: int = PATCH) -> torch.Tensor:
    """(N, H, W, 3) floats in [0, 1] -> (N, H/p * W/p, p*p*3) patch vectors in raster order."""
    n, h, w, c = images.shape
    grid = images.reshape(n, h // patch, patch, w // patch, patch, c).permute(0, 1, 3, 2, 4, 5)
    return grid.reshape(n, (h // patch) * (w // patch), patch * patch * c)


def unpatchify(patches: torch.Tensor, rows: int, cols: int, patch: int = PATCH) -> torch.Tensor:
    """Inverse of `patchify`: (N, rows*cols, p*p*3) -> (N, rows*p, cols*p, 3)."""
    n = patches.shape[0]
    grid = patches.reshape(n, rows, cols, patch, patch, 3).permute(0, 1, 3, 2, 4, 5)
    return grid.reshape(n, rows * patch, cols * patch, 3)


class PatchTokenizer:
    """Encode images to code indices and decode indices back to pixels."""

    def __init__(self, codebook: torch.Tensor, patch: int = PATCH):
        self.codebook = codebook.float()  # (K, p*p*3), values in [0, 1]
        self.patch = patch

    @property
    def vocab_size(self) -> int:
        return self.codebook.shape[0]

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """(N, H, W, 3) uint8 -> (N, H/p * W/p) int64 codes."""
        vectors = patchify(images.float() / 255.0, self.patch)
        return nearest_code(vectors.reshape(-1, vectors.shape[-1]), self.codebook).view(vectors.shape[:2])

    def decode(self, codes: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
        """(N, rows*cols) codes -> (N, rows*p, cols*p, 3) uint8."""
        pixels = unpatchify(self.codebook[codes], rows, cols, self.patch)
        return (pixels.clamp(0, 1) * 255).round().to(torch.uint8)


def nearest_code(vectors: torch.Tensor, codebook: torch.Tensor, chunk: int = 65536) -> torch.Tensor:
    """Index of the nearest codebook vector (squared L2) for each row of `vectors`."""
    norms = (codebook**2).sum(1)
    out = []
    for part in vectors.split(chunk):
        out.append((norms[None, :] - 2 * part @ codebook.T).argmin(1))
    return torch.cat(out)


def fit_codebook(vectors: torch.Tensor, size: int, iterations: int, generator: torch.Generator) -> torch.Tensor:
    """Lloyd's k-means from a k-means++ start; empty clusters restart at the worst-fit vectors.

    Runs on the vectors' device; the k-means++ draws take uniforms from the CPU `generator` and
    invert the cumulative distance, so the same seed picks the same starts on any device."""
    n = vectors.shape[0]
    centres = torch.empty(size, vectors.shape[1], device=vectors.device)
    centres[0] = vectors[int(torch.randint(n, (1,), generator=generator))]
    closest = ((vectors - centres[0]) ** 2).sum(1)
    uniforms = torch.rand(size, generator=generator, dtype=torch.float64).to(vectors.device)
    for k in range(1, size):
        cumulative = closest.double().cumsum(0)
        pick = torch.searchsorted(cumulative, uniforms[k : k + 1] * cumulative[-1]).clamp(max=n - 1)
        centres[k] = vectors[pick]
        closest = torch.minimum(closest, ((vectors - centres[k]) ** 2).sum(1))
    for _ in range(iterations):
        assign = nearest_code(vectors, centres)
        sums = torch.zeros_like(centres).index_add_(0, assign, vectors)
        counts = torch.bincount(assign, minlength=size).float()
        empty = counts == 0
        centres = torch.where(empty[:, None], centres, sums / counts.clamp(min=1)[:, None])
        if empty.any():
            error = ((vectors - centres[assign]) ** 2).sum(1)
            centres[empty] = vectors[error.topk(int(empty.sum())).indices]
    return centres


def psnr(original: torch.Tensor, reconstructed: torch.Tensor) -> torch.Tensor:
    """Per-image PSNR in dB of uint8 images (N, H, W, 3)."""
    mse = ((original.float() - reconstructed.float()) ** 2).flatten(1).mean(1)
    return 10 * torch.log10(255.0**2 / mse.clamp(min=1e-10))


# The texture quantiser. A real image tokenizer has several codes close to any detailed patch, and which
# one its encoder picks is beyond a generator's knowledge: that is much of a real model's uncertainty. An
# image is re-quantised each time it is seen by drawing each patch's code from
#   p(k | x) = softmax_k(-(||x - c_k||^2 - min_j ||x - c_j||^2) / (tau * (var(x) + VARIANCE_FLOOR)))
# where var(x) is the patch's pixel variance (summed over RGB): a patch of one colour has a variance of
# zero and keeps its nearest code all but surely, while a detailed patch spreads over the codes near it.
# tau = 0 is the nearest code.
VARIANCE_FLOOR = 5e-4


def code_log_probs(patches: torch.Tensor, codebook: torch.Tensor, tau: float) -> torch.Tensor:
    """(..., p*p*3) patch vectors in [0, 1] -> (..., K) log-probabilities of the texture quantiser."""
    distance = (patches**2).sum(-1, keepdim=True) - 2 * patches @ codebook.T + (codebook**2).sum(1)
    distance = distance - distance.min(-1, keepdim=True).values
    variance = patches.unflatten(-1, (-1, 3)).var(-2).sum(-1, keepdim=True)
    return torch.log_softmax(-distance / (tau * (variance + VARIANCE_FLOOR)), -1)


def sample_codes(patches: torch.Tensor, codebook: torch.Tensor, tau: float, generator: torch.Generator) -> torch.Tensor:
    """Codes drawn by the texture quantiser (the nearest ones at tau = 0), by inverting the cumulative
    probabilities at uniforms from the CPU `generator`, so a seed draws the same codes on any device."""
    if tau == 0:
        return nearest_code(patches.reshape(-1, patches.shape[-1]), codebook).view(patches.shape[:-1])
    cumulative = code_log_probs(patches, codebook, tau).exp().cumsum(-1)
    uniforms = torch.rand(patches.shape[:-1], generator=generator, dtype=cumulative.dtype).to(cumulative.device)
    picks = torch.searchsorted(cumulative, (uniforms * cumulative[..., -1]).unsqueeze(-1).contiguous())
    return picks.squeeze(-1).clamp(max=codebook.shape[0] - 1)


def quantiser_entropy(patches: torch.Tensor, codebook: torch.Tensor, tau: float) -> torch.Tensor:
    """(...,) entropy in nats of each patch's code under the texture quantiser: the floor of a model's
    loss on these patches, whatever it knows."""
    log_p = code_log_probs(patches, codebook, tau)
    return -(log_p.exp() * log_p).sum(-1)
