"""The decoder of MAR's KL-16 VAE: 16-channel latents on a 16 x 16 grid -> 256 x 256 RGB.

It is the latent-diffusion `AutoencoderKL` decoder (128 base channels, multipliers 1, 1, 2, 2, 4, two
ResNet blocks per level, attention only in the middle), the same network as taming's decoder in
`specviz.models.networks.vqgan`, behind a 1 x 1 `post_quant_conv`. MAR trains on latents scaled by 0.2325, so
tokens are divided by it before decoding.
"""

from __future__ import annotations

import torch
from torch import nn

from specviz.models.networks.vqgan import Decoder

LATENT_SCALE = 0.2325


class KLDecoder(nn.Module):
    """Tokens (B, d, rows, cols) in MAR's scale -> pixels (B, 3, rows * 2^(levels-1), ...) in [-1, 1]."""

    def __init__(self, channels: int = 16, base: int = 128, multipliers: tuple[int, ...] = (1, 1, 2, 2, 4)):
        super().__init__()
        self.post_quant_conv = nn.Conv2d(channels, channels, 1)
        stride = 2 ** (len(multipliers) - 1)
        self.decoder = Decoder(
            ch=base,
            out_ch=3,
            ch_mult=multipliers,
            num_res_blocks=2,
            attn_resolutions=(),
            resolution=16 * stride,
            z_channels=channels,
        )
        self.stride = stride

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        latents = tokens.to(self.post_quant_conv.weight.dtype) / LATENT_SCALE
        return self.decoder(self.post_quant_conv(latents))

    @staticmethod
    def decoder_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The decoder's tensors of a KL-16 checkpoint (its encoder is not needed to draw)."""
        kept = ("decoder.", "post_quant_conv.")
        return {key: value for key, value in state.items() if key.startswith(kept)}
