"""MAR (Li et al., "Autoregressive Image Generation without Vector Quantization"), written for specviz.

The network, as the authors' `models/mar.py` builds it: a class-conditional MAE-style encoder and
decoder over a 16 x 16 grid of KL-16 VAE latents (16 numbers per token), and a diffusion MLP head
(`SimpleMLPAdaLN`, here `DenoiserMLP`) that samples each token from the decoder's output z.

- Encoder: tokens projected to the width, `buffer_size` (64) leading slots that all hold the class
  embedding (or the learned `fake_latent`, the unconditional row of classifier-free guidance), learned
  position embeddings, a layer norm; masked tokens are dropped and pre-norm ViT blocks run over the
  rest. Here the masked tokens stay and are excluded as attention keys instead: the known tokens'
  outputs are the same, and rows with different numbers of known tokens fit in one batch (what an
  exact speculative pass needs).
- Decoder: the encoder output re-expanded with a learned mask token at every masked position, its
  own position embeddings and ViT blocks over all slots; z = its token slots plus a learned
  diffusion position embedding.
- ViT blocks are torch's `TransformerEncoderLayer` (pre-norm, GELU, eps 1e-6), the same computation
  as timm's `Block` the release uses; `official_state_dict` renames a release checkpoint's keys.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from specviz.models.networks.diffusion_head import DenoiserMLP


@dataclass(frozen=True)
class MarConfig:
    """The release's sizes (`mar_base`, `mar_large`, `mar_huge` with their diffusion heads)."""

    width: int = 1024  # encoder and decoder width (the release uses the same for both)
    depth: int = 16  # blocks in the encoder, and again in the decoder
    heads: int = 16
    head_width: int = 1280  # diffloss_w
    head_blocks: int = 8  # diffloss_d
    grid: int = 16  # tokens per side: 256 px / VAE stride 16
    token_dim: int = 16  # KL-16 latent channels (patch size 1)
    buffer_size: int = 64
    num_classes: int = 1000
    mlp_ratio: float = 4.0
    sampling_steps: int = 100

    @property
    def seq_len(self) -> int:
        return self.grid * self.grid

    def to_dict(self) -> dict:
        return asdict(self)


RELEASES = {
    "mar-b": MarConfig(width=768, depth=12, heads=12, head_width=1024, head_blocks=6),
    "mar-l": MarConfig(width=1024, depth=16, heads=16, head_width=1280, head_blocks=8),
    "mar-h": MarConfig(width=1280, depth=20, heads=16, head_width=1536, head_blocks=12),
}


def _blocks(config: MarConfig) -> nn.ModuleList:
    return nn.ModuleList(
        nn.TransformerEncoderLayer(
            config.width,
            config.heads,
            int(config.width * config.mlp_ratio),
            dropout=0.0,
            activation="gelu",
            layer_norm_eps=1e-6,
            batch_first=True,
            norm_first=True,
        )
        for _ in range(config.depth)
    )


class Mar(nn.Module):
    """MAR's encoder, decoder and diffusion head; `conditions` runs the backbone for many masks at once."""

    def __init__(self, config: MarConfig):
        super().__init__()
        self.config = config
        slots, width = config.buffer_size + config.seq_len, config.width
        self.class_emb = nn.Embedding(config.num_classes, width)
        self.fake_latent = nn.Parameter(torch.zeros(1, width))
        self.z_proj = nn.Linear(config.token_dim, width)
        self.z_proj_ln = nn.LayerNorm(width, eps=1e-6)
        self.encoder_pos_embed_learned = nn.Parameter(torch.zeros(1, slots, width))
        self.encoder_blocks = _blocks(config)
        self.encoder_norm = nn.LayerNorm(width, eps=1e-6)
        self.decoder_embed = nn.Linear(width, width)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, width))
        self.decoder_pos_embed_learned = nn.Parameter(torch.zeros(1, slots, width))
        self.decoder_blocks = _blocks(config)
        self.decoder_norm = nn.LayerNorm(width, eps=1e-6)
        self.diffusion_pos_embed_learned = nn.Parameter(torch.zeros(1, config.seq_len, width))
        self.denoiser = DenoiserMLP(
            config.token_dim, width, config.head_width, config.head_blocks, frequency_dim=256, affine_norm=True
        )

    def class_embeddings(self, label: int, guided: bool) -> torch.Tensor:
        """(G, width): the class's embedding, and the unconditional `fake_latent` when guided."""
        row = self.class_emb.weight[label][None]
        return torch.cat([row, self.fake_latent]) if guided else row

    def conditions(self, tokens: torch.Tensor, known: torch.Tensor, classes: torch.Tensor) -> torch.Tensor:
        """z (B, L, width) for tokens (B, L, d) in raster order, of which `known` (B, L) are given, the
        rest masked; `classes` (B, width) fills the buffer."""
        batch, buffer = tokens.shape[0], self.config.buffer_size
        x = self.z_proj(tokens.to(self.z_proj.weight.dtype))
        x = torch.cat([classes[:, None].expand(-1, buffer, -1).to(x.dtype), x], dim=1)
        x = self.z_proj_ln(x + self.encoder_pos_embed_learned)
        visible = torch.cat([torch.ones(batch, buffer, dtype=torch.bool, device=known.device), known], dim=1)
        for block in self.encoder_blocks:
            x = block(x, src_key_padding_mask=~visible)
        x = self.decoder_embed(self.encoder_norm(x))
        x = torch.where(visible[..., None], x, self.mask_token.to(x.dtype)) + self.decoder_pos_embed_learned
        for block in self.decoder_blocks:
            x = block(x)
        return self.decoder_norm(x)[:, buffer:] + self.diffusion_pos_embed_learned


# release key -> ours, for the parts whose names differ (timm's Block, DiffLoss's SimpleMLPAdaLN)
_RENAMES = (
    (".attn.qkv.weight", ".self_attn.in_proj_weight"),
    (".attn.qkv.bias", ".self_attn.in_proj_bias"),
    (".attn.proj.", ".self_attn.out_proj."),
    (".mlp.fc1.", ".linear1."),
    (".mlp.fc2.", ".linear2."),
    ("diffloss.net.time_embed.mlp.", "denoiser.time_embed."),
    ("diffloss.net.res_blocks.", "denoiser.blocks."),
    ("diffloss.net.final_layer.adaLN_modulation.", "denoiser.final_modulation."),
    ("diffloss.net.final_layer.linear.", "denoiser.output."),
    ("diffloss.net.", "denoiser."),
    (".in_ln.", ".norm."),
    (".adaLN_modulation.", ".modulation."),
)


def official_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A release checkpoint's tensors under this module's names."""
    renamed = {}
    for key, value in state.items():
        for old, new in _RENAMES:
            if key.startswith("diffloss.net.") and new.startswith("denoiser.") and key.startswith(old):
                key = new + key[len(old) :]
            elif not old.startswith("diffloss") and old in key:
                key = key.replace(old, new)
        renamed[key] = value
    return renamed
