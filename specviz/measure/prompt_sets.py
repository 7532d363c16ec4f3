"""The benchmark prompt sets the papers report on, shipped with their licences (`data/prompt_sets/CREDITS.md`):
PartiPrompts, COCO-2017 captions, GenEval and DPG-Bench for text-to-image models, ImageNet's classes for
class-conditional ones, or a file of one's own. `bench --prompts NAME --limit N --category C` reads them
through `load_prompt_set`."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from specviz.core.inputs import PromptFileError, brief, read_prompts

FOLDER = Path(__file__).resolve().parents[1] / "data" / "prompt_sets"
IMAGENET_CLASSES = Path(__file__).resolve().parents[1] / "data" / "imagenet_classes.txt"


@dataclass(frozen=True)
class BenchPrompt:
    """One prompt of a set, with the category a report groups it by (Parti's category, GenEval's tag,
    DPG-Bench's source, an ImageNet class's name; empty for a file of one's own)."""

    text: str
    category: str = ""


def _parti() -> list[BenchPrompt]:
    with (FOLDER / "parti.tsv").open(encoding="utf-8", newline="") as rows:
        return [BenchPrompt(row["Prompt"].strip(), row["Category"]) for row in csv.DictReader(rows, delimiter="\t")]


def _jsonl(name: str, category: str | None) -> list[BenchPrompt]:
    lines = (FOLDER / name).read_text(encoding="utf-8").splitlines()
    return [
        BenchPrompt(entry["prompt"].strip(), entry[category] if category else "") for entry in map(json.loads, lines)
    ]


def _imagenet() -> list[BenchPrompt]:
    """A class-conditional model's prompt is its class index; the category is the class's names."""
    names = IMAGENET_CLASSES.read_text(encoding="utf-8").splitlines()
    return [BenchPrompt(str(index), name) for index, name in enumerate(names)]


SHIPPED = {
    "parti": _parti,
    "coco": lambda: _jsonl("coco.jsonl", None),  # one caption per image: the first annotated
    "geneval": lambda: _jsonl("geneval.jsonl", "tag"),
    "dpg": lambda: _jsonl("dpg.jsonl", "source"),
    "imagenet": _imagenet,
}


def load_prompt_set(name: str | None, limit: int | None = None, category: str | None = None) -> list[BenchPrompt]:
    """The prompts of a shipped set (`SHIPPED`), of a text file (one per line) or, for None, the shipped
    examples (`data/prompts.txt`), in their order; only `category`'s where one is given, then the first
    `limit`."""
    prompts = SHIPPED[name]() if name in SHIPPED else [BenchPrompt(text) for text in read_prompts(name)]
    if category is not None:
        categories = sorted({prompt.category for prompt in prompts if prompt.category})
        if category not in categories:
            listed = ", ".join(categories) if categories else "none (a file's prompts have no categories)"
            where = brief(name) if name else "the shipped examples"
            raise PromptFileError(f"no category {brief(category)} in {where}; its categories: {listed}")
        prompts = [prompt for prompt in prompts if prompt.category == category]
    if limit is not None:
        if limit < 1:
            raise PromptFileError(f"--limit must be 1 or more, got {limit}")
        prompts = prompts[:limit]
    return prompts
