"""CLIP score of a benchmark's images, with a CLIP model from a local folder the user gives.

The CLIP score of Hessel et al. (2021), as torchmetrics' `CLIPScore` defines it: 100 x the cosine of the
image's and the prompt's CLIP embeddings, floored at 0, averaged over the images. It is computed here from
transformers' `CLIPModel` outputs, since torchmetrics 1.9 reads the features of transformers 4 (transformers
5 returns an output object where it expects a tensor). Nothing is downloaded: the model and its processor
load from the folder (e.g. a local copy of openai/clip-vit-large-patch14). A class-conditional run's prompt
is its class index; its class's names are scored instead.
"""

from __future__ import annotations

from pathlib import Path

import torch
from PIL import Image

from specviz.inputs import InputError


class QualityUnavailable(InputError):
    """No CLIP model in the folder given."""


def scored_text(job: dict) -> str:
    """The text an image is scored against: the prompt, or a class-conditional run's class names."""
    return job["category"] if job["prompt"].isdigit() and job["category"] else job["prompt"]


def load_clip(weights: Path):
    """The CLIP model and processor in `weights`, never from a hub."""
    from transformers import CLIPModel, CLIPProcessor

    if not (weights / "config.json").is_file():
        raise QualityUnavailable(f"{weights} holds no CLIP model (config.json): give a local copy of one")
    return CLIPModel.from_pretrained(str(weights)).eval(), CLIPProcessor.from_pretrained(str(weights))


@torch.inference_mode()
def cosines(root: Path, results: list[dict], model, processor, batch: int = 32) -> list[float]:
    """Each result's image against its text: the cosine of their CLIP embeddings, in the results' order."""
    found: list[float] = []
    for start in range(0, len(results), batch):
        chunk = results[start : start + batch]
        images = [Image.open(root / result["image"]).convert("RGB") for result in chunk]
        texts = [scored_text(result["job"]) for result in chunk]
        inputs = processor(text=texts, images=images, return_tensors="pt", padding=True, truncation=True)
        outputs = model(**inputs)  # image_embeds and text_embeds come normalised
        found += (outputs.image_embeds * outputs.text_embeds).sum(-1).tolist()
    return found


def clip_scores(root: Path, results: list[dict], weights: Path) -> dict[str, float]:
    """Per method, the mean CLIP score of its images under their prompts: 100 x max(cosine, 0)."""
    model, processor = load_clip(weights)
    scores: dict[str, list[float]] = {}
    for result, cosine in zip(results, cosines(root, results, model, processor), strict=True):
        scores.setdefault(result["job"]["method"], []).append(100 * max(cosine, 0.0))
    return {method: sum(values) / len(values) for method, values in scores.items()}
