"""A labelled grid of AR samples from the embedded model, to look at after training.

python -m specviz.stage.samples --out assets/tiny/samples.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from specviz.decoding import run
from specviz.models.protocol import ImageModel, decode_in_order
from specviz.models.tiny.adapter import ASSETS, TinyModel

TRAINING_CAPTIONS = [
    "red apple", "grinning face", "cat face", "rocket", "sun", "four leaf clover", "pizza", "snowman",
    "house", "fire", "rainbow", "ghost", "watermelon", "owl", "heart suit", "penguin",
]  # fmt: skip
FREE_TEXT = ["a smiling cat", "a blue car", "a yellow star", "a green tree", "a happy dog", "a red heart"]


def sample_grid(
    model: ImageModel, prompts: list[str], seeds: int = 2, cell: int = 144, method: str = "ar", params=None
) -> Image.Image:
    """Rows of prompts, `seeds` samples each, captioned; `method` (AR by default) at the model's defaults."""
    font = ImageFont.load_default(size=14)
    label_height = 20
    columns = 4
    per_row = columns // seeds
    rows = (len(prompts) + per_row - 1) // per_row
    grid = Image.new("RGB", (columns * cell, rows * (cell + label_height)), "white")
    draw = ImageDraw.Draw(grid)
    for index, prompt in enumerate(prompts):
        row, slot = divmod(index, per_row)
        for seed in range(seeds):
            trace = run(model, method, prompt, seed, params=params)
            image = decode_in_order(model, trace.vectors if trace.continuous else trace.tokens, trace.geometry.order)
            image = image.resize((cell, cell), Image.NEAREST)
            x, y = (slot * seeds + seed) * cell, row * (cell + label_height)
            grid.paste(image, (x, y + label_height))
            if seed == 0:
                draw.text((x + 4, y + 2), prompt, fill="black", font=font)
    return grid


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", type=Path, default=ASSETS)
    parser.add_argument("--out", type=Path, default=ASSETS / "samples.png")
    args = parser.parse_args(argv)
    model = TinyModel.load(args.weights)
    sample_grid(model, TRAINING_CAPTIONS + FREE_TEXT).save(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
