"""ImageNet-1k class labels, the prompts of class-conditional models (LlamaGen c2i, MAR).

`data/imagenet_classes.txt` holds the 1,000 classes in index order, each line the WordNet lemmas of
its synset (as timm's `imagenet_synset_to_lemma.txt` lists them), so "golden retriever" is 207 and
"red panda" or "lesser panda" is 387. A prompt is an index or any one of those names; a name two
classes share ("crane") goes to the first, and the other is offered as "crane (517)".
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from specviz.core.inputs import InputError, brief

CLASS_FILE = Path(__file__).resolve().parents[1] / "data" / "imagenet_classes.txt"
# the default prompts of a benchmark on a class-conditional model: golden retriever, macaw, volcano, goldfish
EXAMPLE_CLASSES = ("207", "88", "980", "1")


@cache
def class_names() -> tuple[str, ...]:
    """The 1,000 class descriptions in index order ("golden retriever" at 207)."""
    return tuple(CLASS_FILE.read_text(encoding="utf-8").splitlines())


@cache
def _index_of_name() -> dict[str, int]:
    index: dict[str, int] = {}
    for i, line in enumerate(class_names()):
        for name in line.split(","):
            index.setdefault(name.strip().lower(), i)
    return index


def class_label(index: int) -> str:
    """The first name of a class, for lists and titles: 207 -> "golden retriever"; a first name another
    class had before carries its index, so it parses back to this class: 517 -> "crane (517)"."""
    name = class_names()[index].split(",")[0].strip()
    return name if _index_of_name()[name.lower()] == index else f"{name} ({index})"


def parse_class(prompt: str, num_classes: int, model: str = "a class-conditional model") -> int:
    """An ImageNet class index ("207"), a class name ("golden retriever", "Golden Retriever"), or a
    name with its index ("crane (517)", as `class_label` writes a shared name)."""
    text = " ".join(prompt.strip().lower().split())
    labelled = re.fullmatch(r"(.*?)\s*\(([0-9]+)\)", text)  # 0-9: \d takes every script's digits
    if labelled:
        text = labelled.group(2)
    if re.fullmatch(r"[0-9]+", text):
        index = int(text)
    elif text in _index_of_name():
        index = _index_of_name()[text]
    else:
        raise InputError(
            f"{model}: the prompt must be an ImageNet class index 0-{num_classes - 1} or a class name (for "
            f"example 207 or golden retriever, 88 or macaw); got {brief(prompt)}"
        )
    if not 0 <= index < num_classes:
        raise InputError(f"{model}: class index {index} is out of range 0-{num_classes - 1}")
    return index
