"""Registered model families: how to load each, and whether it can run offline here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from specviz.models.errors import ModelUnavailable, UnknownModel
from specviz.models.protocol import ImageModel


@dataclass(frozen=True)
class ModelEntry:
    name: str
    description: str
    load: Callable[..., ImageModel]
    offline: Callable[[], str | None]  # None when it can load with no network, else the reason


def _tiny_load(weights: str | None = None, device: str = "cpu") -> ImageModel:
    from specviz.models.tiny.adapter import TinyModel

    return TinyModel.load(weights, device)


def _tiny_offline() -> str | None:
    from specviz.models.tiny.adapter import ASSETS, WEIGHT_FILES

    missing = [name for name in WEIGHT_FILES if not (ASSETS / name).is_file()]
    return f"missing {', '.join(missing)} in {ASSETS}" if missing else None


MODELS: dict[str, ModelEntry] = {
    "tiny": ModelEntry(
        "tiny",
        "embedded 12M-parameter text-to-emoji Llama over 1024 patch codes, 16x16 grid (OpenMoji, CC BY-SA 4.0)",
        _tiny_load,
        _tiny_offline,
    ),
}


def get_entry(name: str) -> ModelEntry:
    if name not in MODELS:
        raise UnknownModel(f"unknown model {name!r}; registered: {', '.join(MODELS)}")
    return MODELS[name]


def load_model(name: str, weights: str | None = None, device: str = "cpu") -> ImageModel:
    """Load a registered model; raises UnknownModel or ModelUnavailable with a clear message."""
    entry = get_entry(name)
    try:
        return entry.load(weights=weights, device=device)
    except torch.OutOfMemoryError as error:
        raise ModelUnavailable(f"{name}: out of memory while loading on {device} ({error})") from error
