"""Checks of a weights folder's files, made before anything is allocated from them.

A configuration's numbers must lie within bounds (a vocabulary of 10^12 would ask for terabytes, a
dropout of "x" fails deep inside transformers), and a tensor file must read as safetensors and hold
finite numbers (NaN weights would make every distribution NaN and the first sampling step fail).
Each check raises WeightsError with one line; the model's loader says which model and folder.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from specviz.core.inputs import brief, read_bounded

if TYPE_CHECKING:
    import torch

MAX_CONFIG_BYTES = 1024 * 1024
MAX_LINE_CHARS = 200  # of a library's error message quoted in ours

# where a non-editable install looks for the embedded weights, which ship in the repository, not the package
NOT_IN_CHECKOUT = (
    "the embedded weights are read from the repository's assets/ folder: install the project editable from a "
    "clone (pip install -r requirements.txt)"
)

Bounds = Mapping[str, tuple[type, float, float]]  # name -> (int or float, lowest, highest), inclusive


class WeightsError(ValueError):
    """A weights file that cannot be used; the message names the file and what is wrong, on one line."""


def first_line(error: BaseException) -> str:
    """An exception's message cut to its first line (library errors often run to many)."""
    lines = str(error).strip().splitlines()
    if not lines:
        return type(error).__name__
    return lines[0] if len(lines[0]) <= MAX_LINE_CHARS else f"{lines[0][:MAX_LINE_CHARS]}..."


def read_json(path: Path) -> object:
    """A small JSON file (a configuration), refused when it is large, unreadable or not JSON."""
    text = read_bounded(path, MAX_CONFIG_BYTES, "configuration", WeightsError)
    try:
        return json.loads(text)
    except ValueError as error:
        raise WeightsError(f"{path.name} is not readable JSON: {first_line(error)}") from None


def check_numbers(values: Mapping, bounds: Bounds, defaults: object, where: str) -> None:
    """Every bounded number of a configuration section (or its default) of the right type and in range."""
    for key, (kind, low, high) in bounds.items():
        value = values.get(key, getattr(defaults, key, None))
        if kind is int:
            fits = isinstance(value, int) and not isinstance(value, bool)
        else:
            fits = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if not fits or not low <= value <= high:
            what = "an integer" if kind is int else "a number"
            raise WeightsError(f"{where}{key} must be {what} from {low} to {high}, got {brief(value)}")


def read_tensors(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file; refused when the file does not read (truncated, not
    safetensors) or a floating-point tensor holds NaN or infinity."""
    import torch
    from safetensors.torch import load_file

    try:
        tensors = load_file(str(path))
    except Exception as error:  # safetensors raises its own error types for every way a file is malformed
        raise WeightsError(f"{path.name} is not a readable safetensors file: {first_line(error)}") from None
    for name, tensor in tensors.items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise WeightsError(f"{path.name}: tensor {brief(name)} holds NaN or infinite values")
    return tensors
