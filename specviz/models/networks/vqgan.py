"""The VQGAN decoder of the Chameleon image tokenizer (Anole, Lumina-mGPT), which transformers lacks.

transformers' `ChameleonVQVAE` has the encoder, the codebook and `post_quant_conv` but no decoder.
This is the taming-transformers `Decoder` the released tokenizer (`tokenizer/vqgan.ckpt`, config
`vqgan.yaml`) uses: `conv_in`, a middle of ResNet / attention / ResNet, up blocks of
`num_res_blocks + 1` ResNet blocks (attention where the resolution is listed) with nearest-neighbour
upsampling and a 3x3 conv between levels, then GroupNorm, swish and `conv_out` to RGB in [-1, 1].
Module names follow taming's, so the checkpoint's `decoder.*`, `post_quant_conv.*` and
`quantize.embedding.weight` keys load as they are (prefixes such as `model.vqmodel.` are stripped).
Loading is strict: every one of those must be in the file, and the file may hold nothing else but
the parts of the taming model we do not build (`IGNORED`: the encoder, `quant_conv` and the training
loss), so a wrong or partial file is refused instead of decoding with random weights.

The shape comes from transformers' `ChameleonVQVAEConfig` (the released one: 128 base channels,
multipliers 1,1,2,2,4, two ResNet blocks, 256 latent channels, 8192 codes of 256 dimensions), so
a 32 x 32 grid of codes decodes to 512 x 512 pixels.

Weights load safely: safetensors, or `torch.load(weights_only=True)`, which refuses pickled code.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from specviz.core.errors import ModelUnavailable

KEY_PREFIXES = ("model.vqmodel.", "vqmodel.", "_vq_model.", "vq_model.", "model.")
KEPT = ("decoder.", "post_quant_conv.", "quantize.embedding.")
# the rest of taming's VQModel checkpoint, which decoding does not use: the encoder half and the
# training loss (perceptual network and discriminator)
IGNORED = ("encoder.", "quant_conv.", "loss.")


def group_norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(num_groups=32, num_channels=channels, eps=1e-6, affine=True)


class ResnetBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.norm1 = group_norm(in_channels)
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.norm2 = group_norm(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1)
        if in_channels != out_channels:
            self.nin_shortcut = nn.Conv2d(in_channels, out_channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))  # dropout is 0 at inference
        if self.in_channels != self.out_channels:
            x = self.nin_shortcut(x)
        return x + h


class AttnBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.norm = group_norm(channels)
        self.q = nn.Conv2d(channels, channels, 1)
        self.k = nn.Conv2d(channels, channels, 1)
        self.v = nn.Conv2d(channels, channels, 1)
        self.proj_out = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        b, c, height, width = h.shape
        q = self.q(h).reshape(b, c, height * width).transpose(1, 2)  # (b, hw, c)
        k = self.k(h).reshape(b, c, height * width).transpose(1, 2)
        v = self.v(h).reshape(b, c, height * width).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v)  # softmax(q k^T / sqrt(c)) v, as taming
        return x + self.proj_out(out.transpose(1, 2).reshape(b, c, height, width))


class Upsample(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class Decoder(nn.Module):
    """taming-transformers' `Decoder` (no timestep embedding, vanilla attention)."""

    def __init__(
        self,
        *,
        ch: int,
        out_ch: int,
        ch_mult: tuple[int, ...],
        num_res_blocks: int,
        attn_resolutions: tuple[int, ...],
        resolution: int,
        z_channels: int,
    ):
        super().__init__()
        self.num_resolutions, self.num_res_blocks = len(ch_mult), num_res_blocks
        block_in = ch * ch_mult[-1]
        current = resolution // 2 ** (self.num_resolutions - 1)
        self.conv_in = nn.Conv2d(z_channels, block_in, 3, padding=1)
        self.mid = nn.Module()
        self.mid.block_1 = ResnetBlock(block_in, block_in)
        self.mid.attn_1 = AttnBlock(block_in)
        self.mid.block_2 = ResnetBlock(block_in, block_in)
        self.up = nn.ModuleList()
        for level in reversed(range(self.num_resolutions)):
            block, attn = nn.ModuleList(), nn.ModuleList()
            block_out = ch * ch_mult[level]
            for _ in range(num_res_blocks + 1):
                block.append(ResnetBlock(block_in, block_out))
                block_in = block_out
                if current in attn_resolutions:
                    attn.append(AttnBlock(block_in))
            up = nn.Module()
            up.block, up.attn = block, attn
            if level != 0:
                up.upsample = Upsample(block_in)
                current *= 2
            self.up.insert(0, up)
        self.norm_out = group_norm(block_in)
        self.conv_out = nn.Conv2d(block_in, out_ch, 3, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(z)
        h = self.mid.block_2(self.mid.attn_1(self.mid.block_1(h)))
        for level in reversed(range(self.num_resolutions)):
            up = self.up[level]
            for i, block in enumerate(up.block):
                h = block(h)
                if len(up.attn) > 0:
                    h = up.attn[i](h)
            if level != 0:
                h = up.upsample(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class _Quantize(nn.Module):
    def __init__(self, codes: int, dim: int):
        super().__init__()
        self.embedding = nn.Embedding(codes, dim)


class VQGANDecoder(nn.Module):
    """Codes (batch, rows, cols) -> pixels (batch, 3, 16 rows, 16 cols) in [-1, 1] (for the released shape)."""

    def __init__(self, vq_config):
        super().__init__()
        self.quantize = _Quantize(vq_config.num_embeddings, vq_config.embed_dim)
        self.post_quant_conv = nn.Conv2d(vq_config.embed_dim, vq_config.latent_channels, 1)
        self.decoder = Decoder(
            ch=vq_config.base_channels,
            out_ch=vq_config.in_channels,
            ch_mult=tuple(vq_config.channel_multiplier),
            num_res_blocks=vq_config.num_res_blocks,
            attn_resolutions=tuple(vq_config.attn_resolutions or ()),
            resolution=vq_config.resolution,
            z_channels=vq_config.latent_channels,
        )
        self.scale = 2 ** (len(vq_config.channel_multiplier) - 1)

    @classmethod
    def from_vqmodel(cls, vqmodel) -> VQGANDecoder:
        """A decoder sharing the codebook and `post_quant_conv` of transformers' `ChameleonVQVAE`;
        the decoder's own weights are random until `load_weights`."""
        decoder = cls(vqmodel.config)
        parameter = next(vqmodel.parameters())
        decoder.to(device=parameter.device, dtype=parameter.dtype)
        with torch.no_grad():
            decoder.quantize.embedding.weight.copy_(vqmodel.quantize.embedding.weight)
            decoder.post_quant_conv.load_state_dict(vqmodel.post_quant_conv.state_dict())
        return decoder.eval().requires_grad_(False)

    @torch.inference_mode()
    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        weight = self.post_quant_conv.weight
        latents = self.quantize.embedding(codes.to(weight.device).long())  # (b, rows, cols, dim)
        latents = latents.permute(0, 3, 1, 2).contiguous().to(weight.dtype)
        return self.decoder(self.post_quant_conv(latents))

    decode = forward

    def load_weights(self, path: str | os.PathLike) -> None:
        """Load the tokenizer checkpoint's decoder, codebook and post_quant_conv, strictly (see the
        module docstring)."""
        state = {key: value for key, value in read_state_dict(path).items() if not key.startswith(IGNORED)}
        own = self.state_dict()
        missing = sorted(key for key in own if key not in state)
        if missing:
            raise ModelUnavailable(
                f"VQGAN decoder: {path} lacks {len(missing)} of the decoder's weights ({_few(missing)}); pass the "
                "Chameleon tokenizer checkpoint tokenizer/vqgan.ckpt, or a safetensors file converted from it"
            )
        unexpected = sorted(key for key in state if key not in own)
        if unexpected:
            raise ModelUnavailable(
                f"VQGAN decoder: {path} holds {len(unexpected)} weights this decoder does not have "
                f"({_few(unexpected)}); pass the Chameleon tokenizer checkpoint tokenizer/vqgan.ckpt"
            )
        wrong = [key for key in state if state[key].shape != own[key].shape]
        if wrong:
            key = wrong[0]
            raise ModelUnavailable(
                f"VQGAN decoder: {path} does not fit the model's vq_config ({key}: {tuple(state[key].shape)} "
                f"in the file, {tuple(own[key].shape)} expected)"
            )
        self.load_state_dict(state, strict=True)


def _few(keys: list[str], count: int = 3) -> str:
    """A few keys of a list, for a one-line message."""
    more = f" and {len(keys) - count} more" if len(keys) > count else ""
    return ", ".join(keys[:count]) + more


def read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Every tensor of a safetensors file or a (Lightning) checkpoint read with `weights_only=True`,
    names of taming's parts normalised (`decoder.*`, `post_quant_conv.*`, ..., prefixes stripped)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ModelUnavailable(f"VQGAN decoder: no file {path}")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            raw = load_file(str(path), device="cpu")
        else:
            raw = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # pickled objects beyond tensors, a truncated file, ...
        raise ModelUnavailable(
            f"VQGAN decoder: cannot read {path} safely ({str(error).splitlines()[0][:200]}); convert it to "
            "safetensors where you trust it: safetensors.torch.save_file(torch.load(ckpt)['state_dict'], out)"
        ) from error
    if isinstance(raw, dict) and isinstance(raw.get("state_dict"), dict):
        raw = raw["state_dict"]
    if not isinstance(raw, dict):
        raise ModelUnavailable(f"VQGAN decoder: {path} holds no state dict")
    parts = KEPT + IGNORED
    state = {}
    for key, value in raw.items():
        if not isinstance(value, torch.Tensor):
            continue
        for prefix in KEY_PREFIXES:
            if key.startswith(prefix) and key[len(prefix) :].startswith(parts):
                key = key[len(prefix) :]
                break
        state[key] = value
    return state
