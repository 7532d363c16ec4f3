"""Decoded pictures as the tabs show them: at display size, token cells kept crisp."""

from __future__ import annotations

from collections.abc import Sequence

from PIL import Image

from specviz.models.protocol import ImageModel, decode_in_order
from specviz.ui.compute import on_compute_thread

DISPLAY_SIZE = 384  # pixels of the displayed images; token cells stay crisp (nearest neighbour)


def show(image: Image.Image | None) -> Image.Image | None:
    if image is None:
        return None
    return image.resize((DISPLAY_SIZE, DISPLAY_SIZE * image.height // image.width), Image.NEAREST)


def picture(model: ImageModel, tokens: list, description: str, order: Sequence[int] | None = None) -> Image.Image:
    """The displayed image of a possibly partial token sequence, decoded on the compute thread.

    The description goes into the PNG's text chunk. Gradio caches an output image under the hash of
    its bytes and rewrites that file each time it is sent, so an identical image sent again can be
    truncated under a browser still reading it; distinct descriptions keep distinct files.
    """
    image = show(on_compute_thread(decode_in_order, model, tokens, order))
    image.info["Description"] = description
    return image
