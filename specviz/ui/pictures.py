"""Decoded pictures as the tabs show them: at display size, token cells kept crisp, each sent to the browser as a
file of its own (`write_each_picture_once`)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

from gradio import processing_utils
from PIL import Image

from specviz.models.protocol import ImageModel, decode_in_order
from specviz.ui.compute import on_compute_thread

DISPLAY_SIZE = 384  # pixels of the displayed images; token cells stay crisp (nearest neighbour)


def show(image: Image.Image | None) -> Image.Image | None:
    if image is None:
        return None
    return image.resize((DISPLAY_SIZE, DISPLAY_SIZE * image.height // image.width), Image.NEAREST)


def picture(model: ImageModel, tokens: list, description: str, order: Sequence[int] | None = None) -> Image.Image:
    """The displayed image of a possibly partial token sequence, decoded on the compute thread; the description
    goes into the PNG's text chunk."""
    image = show(on_compute_thread(decode_in_order, model, tokens, order))
    image.info["Description"] = description
    return image


def picture_file(img: Image.Image, cache_dir: str, name: str = "image", format: str = "webp") -> str:
    """What Gradio's `processing_utils.save_pil_to_cache` does for an image it sends (its arguments), except
    that the file is new: in a folder of its own, under a name nobody was given before, whole before its address
    is sent, and never written again (Gradio's sweep of old files removes it)."""
    data = processing_utils.encode_pil_to_bytes(img, format)  # an unknown format raises before any folder is made
    folder = Path(cache_dir) / uuid.uuid4().hex
    folder.mkdir(parents=True)
    path = folder / f"{name}.{format}"
    path.write_bytes(data)
    return str(path.resolve())


def write_each_picture_once() -> None:
    """Every picture a `gr.Image` sends (the race's, Inspect's, whatever the value: a PIL image or an array) gets
    a file of its own (`picture_file`).

    Gradio names a picture's file by the hash of its bytes, and writes it again, in place, whenever the same
    picture is sent again (Inspect's refresh after a race's timing or on a change of type size, another session
    racing the same preset): a browser still reading it got it truncated (the server's `h11 LocalProtocolError:
    Too little data for declared Content-Length`) and kept the broken picture, as its address had not changed.
    `layout.build` installs this; installing it again changes nothing."""
    processing_utils.save_pil_to_cache = picture_file
