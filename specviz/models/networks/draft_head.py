"""An EAGLE draft head: one decoder layer that predicts the target model's next feature.

EAGLE (Li et al. 2024) drafts at the feature level: the head reads the target's last hidden state
f_{i-1} (the feature that predicts token x_i) fused with the embedding of x_i, and predicts f_i; the
target's own LM head turns a predicted feature into a distribution of x_{i+1}. Fed its own
predictions, it drafts several tokens ahead. It reuses the target's embedding and LM head (not
trained, not stored with it), so the head itself is small: a fusion layer (2H -> H) and one
transformers `LlamaDecoderLayer` with its rotary embedding, positions counted over the image tokens.

Guidance: the conditional and unconditional rows of a session each get their own features (PEANUT,
appendix B), so the head runs with the session's rows as its batch.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch
from huggingface_hub.errors import StrictDataclassError
from safetensors.torch import save_file
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

from specviz.models.session import cache_keyword
from specviz.models.weights import WeightsError, check_numbers, first_line, read_json, read_tensors

HEAD_FILES = ("head.safetensors", "head.json")

HEAD_BOUNDS = {  # head.json's configuration, checked before a layer is built from it
    "vocab_size": (int, 2, 65536),
    "hidden_size": (int, 8, 4096),
    "intermediate_size": (int, 8, 16384),
    "num_attention_heads": (int, 1, 64),
    "num_key_value_heads": (int, 1, 64),
    "max_position_embeddings": (int, 1, 65536),
    "attention_dropout": (float, 0.0, 1.0),
}


TokenEmbedding = Callable[[torch.Tensor], torch.Tensor]  # method ids (..., n) -> (..., n, H)
LMHead = Callable[[torch.Tensor], torch.Tensor]  # features (..., H) -> logits over method ids (..., V)


class DraftHead(nn.Module):
    def __init__(self, config: LlamaConfig, embed: TokenEmbedding, lm_head: LMHead):
        super().__init__()
        self.config = config
        self.fuse = nn.Linear(2 * config.hidden_size, config.hidden_size)
        self.layer = LlamaDecoderLayer(config, layer_idx=0)
        self.rotary = LlamaRotaryEmbedding(config)
        # the target's own, shared and frozen: kept out of this module's parameters and state dict
        self._target = (embed, lm_head)

    @classmethod
    def sized_for(cls, target: LlamaConfig, embed: TokenEmbedding, lm_head: LMHead) -> DraftHead:
        """A head with the target's width, heads and MLP size, and one layer."""
        config = LlamaConfig(
            vocab_size=target.vocab_size,
            hidden_size=target.hidden_size,
            intermediate_size=target.intermediate_size,
            num_hidden_layers=1,
            num_attention_heads=target.num_attention_heads,
            num_key_value_heads=target.num_key_value_heads,
            max_position_embeddings=target.max_position_embeddings,
            rms_norm_eps=target.rms_norm_eps,
            attn_implementation="sdpa",
        )
        return cls(config, embed, lm_head)

    def forward(
        self,
        tokens: torch.Tensor,
        features: torch.Tensor,
        positions: torch.Tensor,
        cache=None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """tokens (B, n), the target's (or the head's own) features before each (B, n, H), position ids
        (B, n) -> predicted features (B, n, H). `mask` (B, 1, n, keys) bool, True attends; None: causal."""
        embed, _ = self._target
        hidden = self.fuse(torch.cat([embed(tokens).to(features.dtype), features], dim=-1))
        return self.layer(
            hidden,
            attention_mask=mask,
            position_ids=positions,
            **cache_keyword(self.layer, cache),
            use_cache=cache is not None,
            position_embeddings=self.rotary(hidden, positions),
        )

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        _, lm_head = self._target
        return lm_head(features)

    def save(self, folder: Path, **about) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        state = {name: tensor.detach().to(torch.bfloat16).contiguous() for name, tensor in self.state_dict().items()}
        save_file(state, str(folder / "head.safetensors"))
        (folder / "head.json").write_text(json.dumps({"config": self.config.to_dict(), **about}, indent=2) + "\n")

    @classmethod
    def load(cls, folder: Path, embed: TokenEmbedding, lm_head: LMHead) -> DraftHead:
        """The head in `folder` (head.safetensors, head.json) over the target's embedding and LM head;
        WeightsError (one line) when a file is malformed, out of bounds or does not fit the model."""
        about = read_json(folder / "head.json")
        settings = about.get("config") if isinstance(about, dict) else None
        if not isinstance(settings, dict):
            raise WeightsError("head.json has no 'config' section")
        check_numbers(settings, HEAD_BOUNDS, LlamaConfig(), "head.json: config.")
        try:
            config = LlamaConfig.from_dict(settings)
        except (ValueError, TypeError, KeyError, StrictDataclassError) as error:
            raise WeightsError(f"head.json is not a Llama layer's configuration: {first_line(error)}") from None
        config._attn_implementation = "sdpa"
        state = {name: tensor.float() for name, tensor in read_tensors(folder / "head.safetensors").items()}
        try:
            head = cls(config, embed, lm_head)
            head.load_state_dict(state)
        except (RuntimeError, ValueError) as error:
            raise WeightsError(f"head.safetensors does not fit head.json or the model: {first_line(error)}") from None
        return head.eval()
