"""The decoding half of LlamaGen's VQGAN image tokenizer (`vq_ds16_c2i.pt`, `vq_ds16_t2i.pt`).

Codes -> pixels: look each code up in the codebook (16384 x 8, L2-normalised as the tokenizer
does when it quantises), a 1x1 convolution to the decoder's latent width (`post_quant_conv`), then
a taming-transformers style decoder: a middle block (ResNet, self-attention, ResNet), one stage per
channel multiplier from the deepest up, each with `num_res_blocks + 1` ResNet blocks (self-attention
after each one in the deepest stage only) and a nearest-neighbour 2x upsampling plus convolution
between stages, then GroupNorm, swish and a 3x3 convolution to RGB in [-1, 1].

The ResNet, attention and upsampling blocks are the Chameleon decoder's (`specviz.models.networks.vqgan`:
both are taming-transformers' blocks under the same names); the stages around them are named as the
released state dicts name them, so `load_state_dict` takes the checkpoint's decoder, `post_quant_conv`
and `quantize.embedding` entries as they are; the encoder is not built.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from specviz.models.networks.vqgan import AttnBlock, ResnetBlock, Upsample, group_norm


@dataclass(frozen=True)
class VQDecoderConfig:
    codebook_size: int = 16384
    codebook_embed_dim: int = 8
    z_channels: int = 256
    base_channels: int = 128
    channel_multipliers: tuple[int, ...] = (1, 1, 2, 2, 4)  # VQ-16: 16x downsampling
    num_res_blocks: int = 2

    @property
    def downsampling(self) -> int:
        return 2 ** (len(self.channel_multipliers) - 1)

    @classmethod
    def from_state_dict(cls, state: dict[str, torch.Tensor]) -> VQDecoderConfig:
        """Read the shapes of a released checkpoint: codebook, latent width, channels and depth."""
        codebook = state["quantize.embedding.weight"]
        z_channels = state["post_quant_conv.weight"].shape[0]
        base = state["decoder.conv_out.weight"].shape[1]
        stages = sorted({int(key.split(".")[2]) for key in state if key.startswith("decoder.conv_blocks.")})
        blocks = {int(key.split(".")[4]) for key in state if key.startswith("decoder.conv_blocks.0.res.")}
        # stage i of the decoder is multiplier len - 1 - i; its blocks end at multiplier * base channels
        widths = [state[f"decoder.conv_blocks.{i}.res.0.conv1.weight"].shape[0] // base for i in stages]
        return cls(
            codebook_size=codebook.shape[0],
            codebook_embed_dim=codebook.shape[1],
            z_channels=z_channels,
            base_channels=base,
            channel_multipliers=tuple(reversed(widths)),
            num_res_blocks=len(blocks) - 1,
        )


class DecoderStage(nn.Module):
    """ResNet blocks (with attention in the deepest stage), then an upsampling unless it is the last."""

    def __init__(self, in_channels: int, out_channels: int, blocks: int, attention: bool, upsample: bool):
        super().__init__()
        self.res = nn.ModuleList(
            ResnetBlock(in_channels if i == 0 else out_channels, out_channels) for i in range(blocks)
        )
        self.attn = nn.ModuleList(AttnBlock(out_channels) for _ in range(blocks)) if attention else nn.ModuleList()
        self.upsample = Upsample(out_channels) if upsample else None

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        for i, block in enumerate(self.res):
            h = block(h)
            if len(self.attn):
                h = self.attn[i](h)
        return h if self.upsample is None else self.upsample(h)


class Decoder(nn.Module):
    def __init__(self, config: VQDecoderConfig):
        super().__init__()
        multipliers = config.channel_multipliers
        width = config.base_channels * multipliers[-1]
        self.conv_in = nn.Conv2d(config.z_channels, width, 3, padding=1)
        self.mid = nn.ModuleList([ResnetBlock(width, width), AttnBlock(width), ResnetBlock(width, width)])
        stages = []
        for depth, multiplier in enumerate(reversed(multipliers)):
            out = config.base_channels * multiplier
            deepest, last = depth == 0, depth == len(multipliers) - 1
            stages.append(DecoderStage(width, out, config.num_res_blocks + 1, attention=deepest, upsample=not last))
            width = out
        self.conv_blocks = nn.ModuleList(stages)
        self.norm_out = group_norm(width)
        self.conv_out = nn.Conv2d(width, 3, 3, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(z)
        for block in self.mid:
            h = block(h)
        for stage in self.conv_blocks:
            h = stage(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class Codebook(nn.Module):
    def __init__(self, size: int, dim: int):
        super().__init__()
        self.embedding = nn.Embedding(size, dim)

    def vectors(self) -> torch.Tensor:
        """(V, D) L2-normalised codes: the space the tokenizer quantises in and the decoder reads."""
        return F.normalize(self.embedding.weight, p=2, dim=-1)


class VQDecoder(nn.Module):
    """Codes (B, rows, cols) -> pixels (B, 3, rows * f, cols * f) in [-1, 1]."""

    def __init__(self, config: VQDecoderConfig):
        super().__init__()
        self.config = config
        self.quantize = Codebook(config.codebook_size, config.codebook_embed_dim)
        self.post_quant_conv = nn.Conv2d(config.codebook_embed_dim, config.z_channels, 1)
        self.decoder = Decoder(config)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        latents = self.quantize.vectors()[codes].permute(0, 3, 1, 2)  # (B, D, rows, cols)
        return self.decoder(self.post_quant_conv(latents.to(self.post_quant_conv.weight.dtype)))

    def load_released(self, state: dict[str, torch.Tensor]) -> None:
        """Load the decoding half of a released tokenizer state dict; the encoder's keys are skipped."""
        wanted = {key: value for key, value in state.items() if key.split(".")[0] in ("decoder", "post_quant_conv")}
        wanted["quantize.embedding.weight"] = state["quantize.embedding.weight"]
        self.load_state_dict(wanted, strict=True)
