"""CLIP score of a benchmark's images, with a CLIP model from a local folder the user gives.

The CLIP score of Hessel et al. (2021), as torchmetrics' `CLIPScore` defines it: 100 x the cosine of the
image's and the prompt's CLIP embeddings, floored at 0, averaged over the images. It is computed here from
transformers' `CLIPModel` outputs, since torchmetrics 1.9 reads the features of transformers 4 (transformers
5 returns an output object where it expects a tensor). Nothing is downloaded: the model and its processor
load from the folder (e.g. a local copy of openai/clip-vit-large-patch14). A class-conditional run's prompt
is its class index; its class's names are scored instead.
"""

from __future__ import annotations

from io import BytesIO
from pathlib import Path

import torch
from PIL import Image

from specviz.core.inputs import FolderError, InputError, parse_json, read_bounded, read_inside, shown_path

MAX_CONFIG_BYTES = 1024 * 1024  # a CLIP model's config.json
MAX_IMAGE_BYTES = 16 * 1024 * 1024  # an image of a results folder (a bench keeps small PNGs)
MAX_IMAGE_PIXELS = 4096 * 4096


class QualityUnavailable(InputError):
    """No CLIP model in the folder given."""


def check_clip_folder(weights: Path) -> None:
    """A folder with a readable config.json (a JSON object), checked before any work."""
    config = weights / "config.json"
    if not config.exists() and not config.is_symlink():
        raise QualityUnavailable(f"{shown_path(weights)} holds no CLIP model (config.json): give a local copy of one")
    data = read_bounded(config, MAX_CONFIG_BYTES, "CLIP config", QualityUnavailable)
    if not isinstance(parse_json(data, f"--clip {shown_path(config)}", QualityUnavailable), dict):
        raise QualityUnavailable(f"--clip {shown_path(config)} is not a JSON object: not a CLIP model's config")


def scored_text(job: dict) -> str:
    """The text an image is scored against: the prompt, or a class-conditional run's class names."""
    return job["category"] if job["prompt"].isdigit() and job["category"] else job["prompt"]


def load_clip(weights: Path):
    """The CLIP model and processor in `weights`, never from a hub."""
    from transformers import CLIPModel, CLIPProcessor

    check_clip_folder(weights)
    try:
        return CLIPModel.from_pretrained(str(weights)).eval(), CLIPProcessor.from_pretrained(str(weights))
    except Exception as error:  # transformers raises many kinds for a folder that is not a CLIP model
        message = " ".join(str(error).split())[:300]
        raise QualityUnavailable(
            f"cannot load a CLIP model from {shown_path(weights)}: {type(error).__name__}: {message}"
        ) from None


def read_image(root: Path, relative: str) -> Image.Image:
    """An image of the results folder, read as its other files are (regular, bounded, never through a link)."""
    data = read_inside(root, relative, MAX_IMAGE_BYTES, "image")
    try:
        image = Image.open(BytesIO(data))
        if image.width * image.height > MAX_IMAGE_PIXELS:
            raise FolderError(f"image {shown_path(root / relative)} has {image.width}x{image.height} pixels")
        return image.convert("RGB")
    except (OSError, ValueError, Image.DecompressionBombError) as error:
        if isinstance(error, FolderError):
            raise
        problem = " ".join(str(error).split())[:200]
        raise FolderError(f"image {shown_path(root / relative)} is not a readable image ({problem})") from None


@torch.inference_mode()
def cosines(root: Path, results: list[dict], model, processor, batch: int = 32) -> list[float]:
    """Each result's image against its text: the cosine of their CLIP embeddings, in the results' order."""
    found: list[float] = []
    for start in range(0, len(results), batch):
        chunk = results[start : start + batch]
        images = [read_image(root, result["image"]) for result in chunk]  # checked: the job's own, inside root
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
