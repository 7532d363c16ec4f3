"""The embedded text-to-image generator: a transformers Llama over VQ codes with a text prefix.

The prompt's MiniLM vector is projected to `prefix_len` input embeddings; the image's 256 codes
follow in raster order. A learned null prefix replaces the prompt for classifier-free guidance
(trained by dropping the condition for 10% of samples, as LlamaGen and Lumina-mGPT do). Keeping the
generator a stock `LlamaForCausalLM` means sessions use the same cache API as the real models.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

from specviz.models.tiny.text import TEXT_DIM


@dataclass(frozen=True)
class TinyConfig:
    vocab_size: int = 1024
    rows: int = 16
    cols: int = 16
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 768
    prefix_len: int = 4
    text_dim: int = TEXT_DIM
    dropout: float = 0.0  # on the input embeddings and in attention, while training

    @property
    def seq_len(self) -> int:
        return self.rows * self.cols

    def to_dict(self) -> dict:
        return asdict(self)

    def llama_config(self) -> LlamaConfig:
        return LlamaConfig(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_heads,
            max_position_embeddings=self.prefix_len + self.seq_len + 8,
            rms_norm_eps=1e-5,
            attention_dropout=self.dropout,
            tie_word_embeddings=False,
            bos_token_id=None,
            eos_token_id=None,  # an image always has all its cells: generate() must never stop early
            pad_token_id=None,
            attn_implementation="sdpa",
        )


class TinyTextToImage(nn.Module):
    def __init__(self, config: TinyConfig):
        super().__init__()
        self.config = config
        self.cond_proj = nn.Linear(config.text_dim, config.prefix_len * config.hidden_size)
        self.null_prefix = nn.Parameter(torch.randn(config.prefix_len, config.hidden_size) * 0.02)
        self.lm = LlamaForCausalLM(config.llama_config())

    def prefix(self, text: torch.Tensor | None, batch: int = 1) -> torch.Tensor:
        """(B, prefix_len, hidden) prompt prefix; `text=None` gives the unconditional prefix."""
        if text is None:
            return self.null_prefix.unsqueeze(0).expand(batch, -1, -1)
        return self.cond_proj(text).view(text.shape[0], self.config.prefix_len, self.config.hidden_size)

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.lm.get_input_embeddings()(tokens)

    def training_loss(self, text: torch.Tensor, drop: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Next-code cross-entropy; rows where `drop` is true see the null prefix instead of the prompt."""
        prefix = torch.where(drop[:, None, None], self.prefix(None, len(tokens)), self.prefix(text))
        embeds = torch.cat([prefix, self.embed_tokens(tokens[:, :-1])], dim=1)
        embeds = nn.functional.dropout(embeds, self.config.dropout, self.training)
        logits = self.lm(inputs_embeds=embeds).logits[:, self.config.prefix_len - 1 :]
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tokens.reshape(-1))
