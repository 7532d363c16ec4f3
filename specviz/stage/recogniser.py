"""A fair judge of whether an embedded model draws the emoji it was asked for: a small image classifier.

    python -m specviz.stage.recogniser [--out assets/recogniser] [--epochs 40] [--cache .cache]

The nearest training image (`recognition.features`) names the right caption for only a few real images
of held-out designs, so a model that draws a new, correct design scores as badly as one that draws a blob;
only memorising scores well. This classifier learns each figure from its training designs (a figure is
an emoji with its skin tones and gender merged, and with the emoji a design draws in the very same
images in every skin tone: see `figures`) under augmentations that stand in for another design's
drawing (scale, rotation, shift, outlines, flat colours, blur, contrast and saturation; never hue, which
tells a red heart from a blue one), and is judged by the designs it never saw: each figure's held-out
design, every one weighing the same. A small ResNet on 48 x 48 images, trained from one seeded generator
on the CPU (40 epochs: 18 minutes with SPECVIZ_THREADS=2 on two cores). Writes recogniser.safetensors
(float16) and recogniser.json (its classes, each emoji's figure, how it was trained and how well it
recognises held-out designs).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn import functional

from specviz.core.threads import configure_threads

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "recogniser"
MAX_CLASSES = 10_000  # the figures of every design are about 1,800
WIDTH = 32  # channels of the first stage; each of the four stages after it halves the side, doubles the width
BATCH = 128
ROTATION_DEGREES = 12
SCALES = (0.8, 1.15)
SHIFT = 0.1  # of the image's side, each way
BLUR_SHARE = 0.4
CONTRAST, SATURATION = 0.3, 0.6  # each drawn uniformly within +-half of this around 1
OUTLINE_SHARE, OUTLINE_INK = 0.3, 0.85  # images given a dark outline, and how dark
FLAT_SHARE, FLAT_LEVELS = 0.2, 4  # images flattened to this many steps per channel


def stage(channels_in: int, channels_out: int) -> nn.Sequential:
    """Two 3 x 3 convolutions, the first halving the side."""
    return nn.Sequential(
        nn.Conv2d(channels_in, channels_out, 3, 2, 1, bias=False),
        nn.BatchNorm2d(channels_out),
        nn.ReLU(inplace=True),
        nn.Conv2d(channels_out, channels_out, 3, 1, 1, bias=False),
        nn.BatchNorm2d(channels_out),
        nn.ReLU(inplace=True),
    )


class Recogniser(nn.Module):
    """Logits over the emoji classes of (N, 3, 48, 48) images in [0, 1]."""

    def __init__(self, classes: int, width: int = WIDTH):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Conv2d(3, width, 3, 1, 1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            stage(width, width),
            stage(width, 2 * width),
            stage(2 * width, 4 * width),
            stage(4 * width, 8 * width),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Dropout(0.3),
            nn.Linear(8 * width, classes),
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.layers(images * 2 - 1)


def as_input(images: np.ndarray) -> torch.Tensor:
    """(N, H, W, 3) uint8 images as (N, 3, 48, 48) floats in [0, 1]."""
    pixels = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float() / 255.0
    return functional.interpolate(pixels, size=48, mode="area") if pixels.shape[-1] != 48 else pixels


GENDER_SIGNS = (0x2640, 0x2642)  # female and male sign: "man farmer" is "farmer" ZWJ male sign
ZWJ = 0x200D
GENDERED = {  # Unicode's gendered people and their gender-neutral counterparts
    0x1F468: 0x1F9D1,  # man, woman: person
    0x1F469: 0x1F9D1,
    0x1F466: 0x1F9D2,  # boy, girl: child
    0x1F467: 0x1F9D2,
    0x1F474: 0x1F9D3,  # old man, old woman: older person
    0x1F475: 0x1F9D3,
    0x1F934: 0x1FAC5,  # prince, princess: person with crown
    0x1F478: 0x1FAC5,
    0x1FAC3: 0x1FAC4,  # pregnant man, pregnant woman: pregnant person
    0x1F930: 0x1FAC4,
}
NEUTRAL_SEQUENCES = {  # one code point for a gendered person or two people, and the ZWJ sequence of its neutral
    0x1F385: (0x1F9D1, ZWJ, 0x1F384),  # Santa Claus, Mrs. Claus: Mx Claus
    0x1F936: (0x1F9D1, ZWJ, 0x1F384),
    0x1F491: (0x1F9D1, ZWJ, 0x2764, ZWJ, 0x1F9D1),  # couple with heart (Unicode's skin-toned forms are these)
    0x1F48F: (0x1F9D1, ZWJ, 0x2764, ZWJ, 0x1F48B, ZWJ, 0x1F9D1),  # kiss
    0x1F46B: (0x1F9D1, ZWJ, 0x1F91D, ZWJ, 0x1F9D1),  # woman and man, men, women holding hands
    0x1F46C: (0x1F9D1, ZWJ, 0x1F91D, ZWJ, 0x1F9D1),
    0x1F46D: (0x1F9D1, ZWJ, 0x1F91D, ZWJ, 0x1F9D1),
    0x1F46F: (0x1F9D1, ZWJ, 0x1F430, ZWJ, 0x1F9D1),  # people with bunny ears
    0x1F93C: (0x1F9D1, ZWJ, 0x1FAEF, ZWJ, 0x1F9D1),  # people wrestling
}


def gender_neutral(base: str) -> str:
    """An emoji's code points ('1F468-200D-1F33E', skin tones already dropped) without gender: a gender sign
    joined to a person dropped with its joiner (the sign alone, an emoji of its own, kept), gendered people as
    their neutral counterparts, so "man farmer" and "woman farmer" are "farmer" as their skin tones are one
    emoji."""
    neutral: list[int] = []
    for point in (int(part, 16) for part in base.split("-") if part):
        if point in GENDER_SIGNS and neutral and neutral[-1] == ZWJ:
            neutral.pop()
            continue
        neutral.extend(NEUTRAL_SEQUENCES.get(point, (GENDERED.get(point, point),)))
    return "-".join(f"{point:X}" for point in neutral)


def figures(images: np.ndarray, bases: list[str], designs: list[str]) -> dict[str, str]:
    """Each emoji's figure, named by its first emoji in sorted order: emoji with the same gender-neutral
    code points are one figure, and so are emoji that one design draws alike, in the same images in every
    skin tone (OpenMoji draws "man pilot" as "pilot", Noto the flag of Bouvet Island as Norway's): no image
    can tell them apart, so a recogniser asked to would be judged on a coin toss, not on what it sees. (One
    tone alike is not enough: Twemoji's "woman" and "woman: blond hair" are one image in one tone only.)"""
    parent = {base: base for base in bases}
    drawn: dict[tuple[str, str], list[bytes]] = {}
    for base, image, design in zip(bases, images, designs, strict=True):
        drawn.setdefault((base, design), []).append(image.tobytes())  # its skin tones, in code point order

    def root(base: str) -> str:
        while parent[base] != base:
            parent[base] = parent[parent[base]]
            base = parent[base]
        return base

    def join(first: str, second: str) -> None:
        low, high = sorted((root(first), root(second)))
        parent[high] = low

    first_of: dict[tuple, str] = {}
    for (base, design), tones in drawn.items():
        for key in (("neutral", gender_neutral(base)), (design, *tones)):
            join(first_of.setdefault(key, base), base)
    return {base: root(base) for base in parent}


def held_out_by_figure(
    figure_of: dict[str, str], bases: list[str], designs: list[str], held_out: np.ndarray
) -> np.ndarray:
    """The design set's held-out images (N,) with every other emoji of their figure in their design: a
    design of a figure is held out whole where any of its emoji is (else "woman farmer" in Noto, held out,
    would be judged by a recogniser that learnt Noto's "farmer")."""
    pairs = list(zip((figure_of[base] for base in bases), designs, strict=True))
    held_pairs = {pair for pair, out in zip(pairs, held_out, strict=True) if out}
    return np.array([pair in held_pairs for pair in pairs], dtype=bool)


@dataclass(frozen=True)
class TrainedRecogniser:
    """The network with the figure each of its outputs stands for, each emoji's figure, and its own top-1
    and top-5 on the real images of held-out designs (once trained: the most a model's samples can expect
    of it)."""

    network: Recogniser
    classes: list[str]
    figure_of: dict[str, str]
    held_out: tuple[float, float] | None = None

    def figures(self, emoji: list[str]) -> list[str]:
        """The figure each emoji is judged as (itself where the recogniser knows no other)."""
        return [self.figure_of.get(base, base) for base in emoji]

    def judged(self, images: np.ndarray, emoji: list[str], designs: list[str] | None = None) -> tuple[float, float]:
        """Top-1 and top-5 on (N, H, W, 3) uint8 images drawn for these emoji, by their figures; with their
        designs, each design of a figure weighs the same (not its many emoji and skin tones)."""
        figures = self.figures(emoji)
        groups = None if designs is None else list(zip(figures, designs, strict=True))
        return scores(self.ranked(images), figures, groups)

    @classmethod
    def load(cls, folder: Path = ASSETS) -> TrainedRecogniser:
        """The recogniser in `folder`; its shape checked before anything is allocated."""
        record = json.loads((folder / "recogniser.json").read_text())
        width, classes = record.get("width"), record.get("classes")
        if not (isinstance(width, int) and 1 <= width <= 4 * WIDTH and isinstance(classes, list)):
            raise ValueError(f"{folder}/recogniser.json: a width of 1 to {4 * WIDTH} and a list of classes needed")
        if not 1 <= len(classes) <= MAX_CLASSES or not all(isinstance(name, str) for name in classes):
            raise ValueError(f"{folder}/recogniser.json: 1 to {MAX_CLASSES} classes, each a name, needed")
        figure_of = record.get("figure_of", {})
        named = isinstance(figure_of, dict) and len(figure_of) <= MAX_CLASSES
        named = named and all(isinstance(figure, str) for figure in figure_of.values())
        if not named or not set(figure_of.values()) <= set(classes):
            raise ValueError(
                f"{folder}/recogniser.json: figure_of must name one of its classes for each emoji "
                f"(at most {MAX_CLASSES} emoji)"
            )
        network = Recogniser(len(classes), width)
        network.load_state_dict({k: v.float() for k, v in load_file(str(folder / "recogniser.safetensors")).items()})
        training = record["training"]
        held_out = (training["held_out_top1"], training["held_out_top5"])
        return cls(network.eval(), classes, figure_of, held_out)

    @torch.no_grad()
    def ranked(self, images: np.ndarray, top: int = 5) -> list[list[str]]:
        """The `top` most likely figures of each (N, H, W, 3) uint8 image, best first."""
        was_training = self.network.training
        self.network.eval()
        pixels = as_input(images)
        logits = torch.cat([self.network(pixels[start : start + 256]) for start in range(0, len(pixels), 256)])
        self.network.train(was_training)
        return [[self.classes[index] for index in row] for row in logits.topk(top).indices.tolist()]


def scores(ranked: list[list[str]], asked: list[str], groups: list | None = None) -> tuple[float, float]:
    """Top-1 and top-5: the share of images whose best guess is the class asked, or among the first five;
    with `groups` (one per image), each group's shares averaged, so every group weighs the same."""
    groups = groups if groups is not None else list(range(len(asked)))
    found: dict = {}
    for row, emoji, group in zip(ranked, asked, groups, strict=True):
        found.setdefault(group, []).append((row[0] == emoji, emoji in row[:5]))
    top1 = sum(sum(hit for hit, _ in hits) / len(hits) for hits in found.values()) / len(found)
    top5 = sum(sum(hit for _, hit in hits) / len(hits) for hits in found.values()) / len(found)
    return top1, top5


def outlined(images: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
    """The chosen (N, 1, 1, 1) images with a dark line along the edge of what is drawn on the white, as
    OpenMoji draws every emoji (the design the others recognise worst without it)."""
    drawn = (images.min(1, keepdim=True).values < 0.97).float()
    edge = functional.max_pool2d(drawn, 3, 1, 1) + functional.max_pool2d(-drawn, 3, 1, 1)  # dilated - eroded
    return images * (1 - OUTLINE_INK * edge * chosen.float())


def augmented(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A batch redrawn as another design might draw it: scaled, rotated and shifted on white, outlined or
    flattened to a few colour levels in part, blurred in part, its contrast and saturation changed; every
    draw from `generator`."""
    count = len(images)
    angle = (torch.rand(count, generator=generator) - 0.5) * 2 * math.radians(ROTATION_DEGREES)
    scale = SCALES[0] + torch.rand(count, generator=generator) * (SCALES[1] - SCALES[0])
    shift = (torch.rand(count, 2, generator=generator) - 0.5) * 2 * SHIFT
    cos, sin = torch.cos(angle) / scale, torch.sin(angle) / scale
    rows = (torch.stack([cos, -sin, shift[:, 0]], 1), torch.stack([sin, cos, shift[:, 1]], 1))
    grid = functional.affine_grid(torch.stack(rows, 1), list(images.shape), align_corners=False)
    images = functional.grid_sample(images - 1, grid, align_corners=False) + 1  # what comes in is white
    images = outlined(images, torch.rand(count, 1, 1, 1, generator=generator) < OUTLINE_SHARE)
    flat = torch.rand(count, 1, 1, 1, generator=generator) < FLAT_SHARE
    images = torch.where(flat, torch.round(images * FLAT_LEVELS) / FLAT_LEVELS, images)
    kernel = torch.tensor([1.0, 2.0, 1.0])
    kernel = (kernel[:, None] * kernel[None]).div(16).expand(3, 1, 3, 3).contiguous()
    blurred = functional.conv2d(functional.pad(images, (1, 1, 1, 1), mode="replicate"), kernel, groups=3)
    blur = (torch.rand(count, 1, 1, 1, generator=generator) < BLUR_SHARE).float()
    images = blur * blurred + (1 - blur) * images
    contrast = 1 + (torch.rand(count, 1, 1, 1, generator=generator) - 0.5) * CONTRAST
    saturation = 1 + (torch.rand(count, 1, 1, 1, generator=generator) - 0.5) * SATURATION
    gray = images.mean(1, keepdim=True)
    images = gray + (images - gray) * saturation
    return ((images - 0.5) * contrast + 0.5).clamp(0, 1)


@dataclass(frozen=True)
class Split:
    """The designs as the recogniser learns and is judged by them: training images and their figures,
    each emoji's figure, and the held-out designs of figures that have training designs, with their emoji
    (each a design in which the recogniser saw no emoji of its figure)."""

    classes: list[str]
    figure_of: dict[str, str]
    train_images: torch.Tensor
    train_labels: torch.Tensor
    held_images: np.ndarray
    held_emoji: list[str]
    held_designs: list[str]

    @classmethod
    def of(cls, images: np.ndarray, bases: list[str], designs: list[str], held_out: np.ndarray) -> Split:
        figure_of = figures(images, bases, designs)
        held_out = held_out_by_figure(figure_of, bases, designs, held_out)
        classes = sorted({figure_of[base] for base, out in zip(bases, held_out, strict=True) if not out})
        index = {figure: position for position, figure in enumerate(classes)}
        train = ~held_out
        held = held_out & np.array([figure_of[base] in index for base in bases])
        labels = torch.tensor([index[figure_of[base]] for base, kept in zip(bases, train, strict=True) if kept])
        held_emoji = [base for base, out in zip(bases, held, strict=True) if out]
        held_designs = [design for design, out in zip(designs, held, strict=True) if out]
        return cls(classes, figure_of, as_input(images[train]), labels, images[held], held_emoji, held_designs)


def train(split: Split, epochs: int, seed: int, log=print) -> tuple[TrainedRecogniser, list[dict]]:
    """Train on the split's training designs (AdamW, one-cycle learning rate, label smoothing), judging
    the held-out designs every few epochs; returns the recogniser and those judgements."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    network = Recogniser(len(split.classes))
    recogniser = TrainedRecogniser(network, split.classes, split.figure_of)
    optimizer = torch.optim.AdamW(network.parameters(), lr=3e-3, weight_decay=0.05)
    batches = math.ceil(len(split.train_images) / BATCH)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, 3e-3, total_steps=epochs * batches, pct_start=0.1)
    history, started = [], time.time()
    network.train()
    for epoch in range(epochs):
        order, total = torch.randperm(len(split.train_images), generator=generator), 0.0
        for start in range(0, len(order), BATCH):
            batch = order[start : start + BATCH]
            logits = network(augmented(split.train_images[batch], generator))
            loss = functional.cross_entropy(logits, split.train_labels[batch], label_smoothing=0.1)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            total += loss.item() * len(batch)
        if epoch % 5 == 4 or epoch == epochs - 1:
            top1, top5 = recogniser.judged(split.held_images, split.held_emoji, split.held_designs)
            record = {
                "epoch": epoch + 1,
                "loss": round(total / len(order), 4),
                "held_out_top1": round(top1, 4),
                "held_out_top5": round(top5, 4),
                "minutes": round((time.time() - started) / 60, 1),
            }
            history.append(record)
            log(json.dumps(record))
    return TrainedRecogniser(network.eval(), split.classes, split.figure_of), history


def write(recogniser: TrainedRecogniser, folder: Path, record: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    state = {name: value.half().contiguous() for name, value in recogniser.network.state_dict().items()}
    save_file(state, str(folder / "recogniser.safetensors"))
    known = set(recogniser.classes)  # an emoji whose figure has no training design is judged as itself: unknown
    figure_of = {base: figure for base, figure in recogniser.figure_of.items() if figure in known and figure != base}
    summary = {"width": WIDTH, "classes": recogniser.classes, "figure_of": figure_of, "training": record}
    (folder / "recogniser.json").write_text(json.dumps(summary, indent=1) + "\n")


def main(argv: list[str] | None = None) -> None:
    from specviz.models.tiny.designs import build_design_set

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ASSETS)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", type=Path, default=Path(".cache"), help="where the emoji designs are kept")
    args = parser.parse_args(argv)
    threads = configure_threads()
    designs = build_design_set(args.cache / "designs")
    split = Split.of(designs.images, designs.bases, designs.designs, designs.held_out)
    held = zip(split.held_emoji, split.held_designs, strict=True)
    held_designs = len({(split.figure_of[base], design) for base, design in held})
    print(
        f"{len(split.classes)} figures of {len(set(designs.bases))} emoji; {len(split.train_images)} training "
        f"images; {held_designs} held-out designs of a figure, {len(split.held_emoji)} images; {threads} threads",
        flush=True,
    )
    started = time.time()
    recogniser, history = train(split, args.epochs, args.seed, lambda line: print(line, flush=True))
    final = history[-1]
    record = {
        "epochs": args.epochs,
        "seed": args.seed,
        "batch_size": BATCH,
        "torch_threads": threads,
        "minutes": round((time.time() - started) / 60, 1),
        "torch": torch.__version__,
        "held_out_designs": held_designs,
        "held_out_images": len(split.held_emoji),
        "held_out_top1": final["held_out_top1"],
        "held_out_top5": final["held_out_top5"],
        "history": history,
    }
    write(recogniser, args.out, record)
    print(f"wrote {args.out}: held-out designs of a figure recognised top-1 {final['held_out_top1']:.1%}, "
          f"top-5 {final['held_out_top5']:.1%} (each design of a figure weighing the same)")  # fmt: skip


if __name__ == "__main__":
    main()
