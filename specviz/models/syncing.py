"""A pass's intended synchronisations: the only places a decoding pass waits for the device.

Under `torch.cuda.set_sync_debug_mode("error")` every synchronisation raises. A pass makes its
intended ones inside `intended_sync`: it reads its record (and a tree its shape) through `read_to_host`,
and the session copies a tree's mask (and a kept path's indices) to the device. The CUDA tests run passes
in that mode, so any other sync fails them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def intended_sync() -> Iterator[None]:
    """A synchronisation the pass means to make: allowed while CUDA's sync debug mode guards the rest."""
    mode = torch.cuda.get_sync_debug_mode() if torch.cuda.is_available() else 0
    if mode:
        torch.cuda.set_sync_debug_mode(0)
    try:
        yield
    finally:
        if mode:
            torch.cuda.set_sync_debug_mode(mode)


def read_to_host(tensor: torch.Tensor) -> list:
    """`tensor.tolist()` as a pass's one intended host read."""
    with intended_sync():
        return tensor.tolist()
