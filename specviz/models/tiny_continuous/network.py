"""One model of the continuous pair: a causal Llama backbone over projected tokens, and a diffusion head.

As in tiny, the prompt's MiniLM vector becomes `prefix_len` input embeddings and a learned null
prefix replaces it for classifier-free guidance (trained by dropping the condition for 10% of
samples). Each generated token enters the backbone through a linear map; the backbone's output at
the position before a token is that token's condition z, and the diffusion head samples the token
from z (MAR's split of labour; MAR's backbone is bidirectional with a random order, ours raster and
causal so speculative decoding applies as the CSpD paper's Algorithm 1 states it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import LlamaModel

from specviz.models.networks.diffusion_head import DenoiserMLP, Schedule, diffusion_loss
from specviz.models.tiny.network import TinyConfig, TinyTextToImage
from specviz.models.tiny_continuous.projection import TOKEN_DIM


@dataclass(frozen=True)
class ContinuousConfig(TinyConfig):
    """tiny's architecture (its prefix, Llama sizes and grid) with continuous tokens and a diffusion head;
    the vocabulary is unused (inputs are embeddings, outputs hidden states)."""

    vocab_size: int = 1
    token_dim: int = TOKEN_DIM
    head_width: int = 256
    head_blocks: int = 3
    sampling_steps: int = 25


class ContinuousTextToImage(nn.Module):
    def __init__(self, config: ContinuousConfig):
        super().__init__()
        self.config = config
        self.cond_proj = nn.Linear(config.text_dim, config.prefix_len * config.hidden_size)
        self.null_prefix = nn.Parameter(torch.randn(config.prefix_len, config.hidden_size) * 0.02)
        self.token_in = nn.Linear(config.token_dim, config.hidden_size)
        self.backbone = LlamaModel(config.llama_config())
        self.backbone.embed_tokens = None  # inputs are always embeddings
        self.denoiser = DenoiserMLP(config.token_dim, config.hidden_size, config.head_width, config.head_blocks)

    prefix = TinyTextToImage.prefix  # the same prompt prefix and null prefix as tiny

    def conditions(self, text: torch.Tensor, drop: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """(B, L, hidden) condition of every token of (B, L, d) `tokens` given the ones before it; rows
        where `drop` is true see the null prefix instead of the prompt."""
        prefix = torch.where(drop[:, None, None], self.prefix(None, len(tokens)), self.prefix(text))
        embeds = torch.cat([prefix, self.token_in(tokens[:, :-1])], dim=1)
        embeds = nn.functional.dropout(embeds, self.config.dropout, self.training)
        return self.backbone(inputs_embeds=embeds).last_hidden_state[:, self.config.prefix_len - 1 :]

    def training_loss(
        self,
        text: torch.Tensor,
        drop: torch.Tensor,
        tokens: torch.Tensor,
        schedule: Schedule,
        repeats: int = 2,
        input_noise: float = 0.0,
    ) -> torch.Tensor:
        """The diffusion head's loss on every token, each token's condition used `repeats` times with
        fresh timesteps and noise (MAR's diffusion batch multiplier: the head is cheap next to the backbone).

        With `input_noise`, the backbone reads the tokens with Gaussian noise of a standard deviation
        drawn per image up to it (the targets stay clean): the data repeats exact vectors (a white patch
        is always the same one), and a backbone that saw only those drifts off the data at sampling time,
        where every token it reads is a draw of the head."""
        seen = tokens
        if input_noise:
            spread = torch.rand(len(tokens), 1, 1, device=tokens.device) * input_noise
            seen = tokens + spread * torch.randn_like(tokens)
        z = self.conditions(text, drop, seen).reshape(-1, self.config.hidden_size)
        x0 = tokens.reshape(-1, self.config.token_dim)
        return diffusion_loss(self.denoiser, x0.repeat(repeats, 1), z.repeat(repeats, 1), schedule)
