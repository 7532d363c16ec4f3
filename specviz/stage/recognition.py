"""Whether the embedded model draws what it is asked for: by the recogniser, and by the nearest training images.

    python -m specviz.stage.recognition [--weights DIR] [--captions 200] [--seeds 2]
    python -m specviz.stage.recognition --weights assets/tiny-continuous   # the continuous pair's target
    python -m specviz.stage.recognition --real     # the measure on real images of held-out designs
    python -m specviz.stage.recognition --weights assets/tiny-continuous --guidance 4 --temperature 0.8

The fair measure is the recogniser's (`recogniser.py`, assets/recogniser): a classifier of the emoji's
figures (skin tones and genders merged, and emoji a design draws alike) judged by designs it never saw,
so a model that draws a correct new design counts. Its top-1 / top-5 on the samples are given beside its
own on real images of held-out designs, the most a model can expect of it. The nearest-image measure,
kept beside it, rewards memorising: for training captions (a fixed draw of `--captions` of them) and
seeds 0..K-1 the model draws an image by AR at its default sampling (or at the `--guidance` and
`--temperature` given: whether the sampling, not the model, stands in the way); the sample is compared
with every training image of every design by a fixed, simple feature (the image averaged down to
12 x 12 RGB, L2 distance). Top-1 is the share of samples whose nearest training image has the sample's
caption; top-5 the share whose caption is among the captions of the 5 nearest. Chance is about 1 in
4,000 captions for top-1; a model that draws one of the designs of its caption scores near 1. The
images of the other designs of a caption count, so a model need not reproduce one design to be
recognised.
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from specviz.core.settings import SamplingSettings, SettingsError
from specviz.core.threads import configure_threads
from specviz.stage.recogniser import ASSETS as RECOGNISER
from specviz.stage.recogniser import TrainedRecogniser, figures, held_out_by_figure, scores

if TYPE_CHECKING:
    from specviz.models.continuous import ContinuousPair
    from specviz.models.protocol import ImageModel

    EmbeddedModel = ImageModel | ContinuousPair

FEATURE_SIZE = 12  # the side of the averaged image the distance is taken on
NEAREST = 5


def features(images: np.ndarray) -> torch.Tensor:
    """(N, H, W, 3) uint8 images as (N, 12 * 12 * 3) floats: each image averaged down to 12 x 12."""
    pixels = torch.from_numpy(np.ascontiguousarray(images)).float().permute(0, 3, 1, 2) / 255.0
    return torch.nn.functional.adaptive_avg_pool2d(pixels, FEATURE_SIZE).flatten(1)


@dataclass(frozen=True)
class Recognition:
    top1: float
    top5: float
    samples: int

    def summary(self) -> str:
        return f"recognised: top-1 {self.top1:.0%}, top-5 {self.top5:.0%} of {self.samples} samples"


@dataclass(frozen=True)
class Recognitions:
    """One set of samples judged three ways: the nearest training image by caption and by emoji (any skin
    tone), and the recogniser (by figure: skin tones and genders merged; None without its weights)."""

    by_caption: Recognition
    by_emoji: Recognition
    by_recogniser: Recognition | None

    def summary(self) -> str:
        nearest = f"nearest image {self.by_caption.summary()}; by emoji, any skin tone: {self.by_emoji.summary()}"
        if self.by_recogniser is None:
            return f"{nearest} (no recogniser weights)"
        return f"recogniser {self.by_recogniser.summary()}; {nearest}"


def recognition(
    samples: np.ndarray,
    captions: list[str],
    reference: np.ndarray,
    reference_captions: list[str],
    groups: list | None = None,
) -> Recognition:
    """Top-1 and top-5 recognition of `samples` drawn for `captions` among the `reference` images (with
    `groups`, one per sample, each group weighing the same)."""
    distance = torch.cdist(features(samples), features(reference))
    nearest = distance.topk(min(NEAREST, len(reference)), largest=False).indices.tolist()
    top1, top5 = scores([[reference_captions[index] for index in row] for row in nearest], captions, groups)
    return Recognition(top1, top5, len(samples))


def drawn(
    model: EmbeddedModel, captions: list[str], seeds: int, sampling: SamplingSettings | None = None
) -> tuple[np.ndarray, list[str]]:
    """AR samples of every caption at seeds 0..K-1 as (N, H, W, 3) uint8 images, with each one's caption:
    a discrete model's, or the continuous pair's target's; at the model's default sampling unless given."""
    from specviz.decoding import run
    from specviz.models.protocol import decode_in_order

    images, asked = [], []
    for caption in captions:
        for seed in range(seeds):
            trace = run(model, "ar", caption, seed, sampling)
            images.append(np.array(decode_in_order(model, trace.decodable, trace.geometry.order)))
            asked.append(caption)
    return np.stack(images), asked


def judged_by(
    recogniser: TrainedRecogniser | None, images: np.ndarray, emoji: list[str], designs: list[str] | None = None
) -> Recognition | None:
    """The recogniser's top-1 and top-5 on images of these emoji (None without a recogniser); with their
    designs, each design of a figure weighing the same."""
    if recogniser is None:
        return None
    top1, top5 = recogniser.judged(images, emoji, designs)
    return Recognition(top1, top5, len(images))


def shipped_recogniser() -> TrainedRecogniser | None:
    """The recogniser in assets/recogniser, or None where its weights are missing."""
    return TrainedRecogniser.load() if (RECOGNISER / "recogniser.json").exists() else None


def recognised(
    model: EmbeddedModel,
    captions: list[str],
    seeds: int,
    cache: Path,
    sampling: SamplingSettings | None = None,
    recogniser: TrainedRecogniser | None = None,
) -> Recognitions:
    """Recognition of AR samples of `captions`: by `recogniser`, and among every training image of every
    design by caption and by emoji (its code points less skin tones), where a sample of "woman artist
    medium skin tone" whose nearest image is the woman artist in another skin tone counts. Half the
    captions are such variants, about five per emoji, which the 12 x 12 feature can hardly tell apart."""
    from specviz.models.tiny.designs import build_design_set

    designs = build_design_set(cache / "designs")
    training = ~designs.held_out
    reference_captions = [c for c, kept in zip(designs.captions, training, strict=True) if kept]
    reference_bases = [b for b, kept in zip(designs.bases, training, strict=True) if kept]
    base_of = dict(zip(designs.captions, designs.bases, strict=True))
    images, asked = drawn(model, captions, seeds, sampling)
    reference = designs.images[training]
    emoji = [base_of[c] for c in asked]
    return Recognitions(
        recognition(images, asked, reference, reference_captions),
        recognition(images, emoji, reference, reference_bases),
        judged_by(recogniser, images, emoji),
    )


def load_embedded(folder: Path) -> EmbeddedModel:
    """The embedded model whose weights are in `folder`: the continuous pair where it holds a target."""
    if (folder / "target.json").exists():
        from specviz.models.tiny_continuous.adapter import TinyContinuousModel

        return TinyContinuousModel.load(folder)
    from specviz.models.tiny.adapter import TinyModel

    return TinyModel.load(folder)


def real_designs(cache: Path, recogniser: TrainedRecogniser | None = None) -> Recognitions:
    """Recognition of the real held-out images (an emoji in one design, its figure seen in training in others),
    held out as the recogniser's split holds them (by figure), each design of a figure weighing the same as
    in the recogniser's own record: what each measure gives a model that draws new designs perfectly."""
    from specviz.models.tiny.designs import build_design_set

    designs = build_design_set(cache / "designs")
    figure_of = figures(designs.images, designs.bases, designs.designs)
    held = held_out_by_figure(figure_of, designs.bases, designs.designs, designs.held_out)
    training = ~held
    learnt = {figure_of[base] for base, kept in zip(designs.bases, training, strict=True) if kept}
    held &= np.array([figure_of[base] in learnt for base in designs.bases])  # a figure seen in another design
    reference = designs.images[training]
    reference_captions = [c for c, kept in zip(designs.captions, training, strict=True) if kept]
    reference_bases = [b for b, kept in zip(designs.bases, training, strict=True) if kept]
    asked = [c for c, out in zip(designs.captions, held, strict=True) if out]
    emoji = [b for b, out in zip(designs.bases, held, strict=True) if out]
    images = designs.images[held]
    held_designs = [design for design, out in zip(designs.designs, held, strict=True) if out]
    groups = [(figure_of[base], design) for base, design in zip(emoji, held_designs, strict=True)]
    return Recognitions(
        recognition(images, asked, reference, reference_captions, groups),
        recognition(images, emoji, reference, reference_bases, groups),
        judged_by(recogniser, images, emoji, held_designs),
    )


def training_captions(cache: Path, count: int) -> list[str]:
    """A fixed draw of `count` captions that have a design in training."""
    from specviz.models.tiny.designs import build_design_set

    designs = build_design_set(cache / "designs")
    known = sorted({c for c, out in zip(designs.captions, designs.held_out, strict=True) if not out})
    return random.Random(0).sample(known, min(count, len(known)))


def main(argv: list[str] | None = None) -> None:
    from specviz.models.tiny.adapter import ASSETS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--weights",
        type=Path,
        default=ASSETS,
        help="an embedded model's folder (assets/tiny-continuous: the pair's target)",
    )
    parser.add_argument("--captions", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--cache", type=Path, default=Path(".cache"), help="where the emoji designs are kept")
    parser.add_argument("--real", action="store_true", help="measure real images of held-out designs instead")
    parser.add_argument("--guidance", type=float, help="the guidance scale to sample at (default: the model's)")
    parser.add_argument("--temperature", type=float, help="the temperature to sample at (default: the model's)")
    args = parser.parse_args(argv)
    configure_threads()  # every core but one: a busy core does not stall the OpenMP team
    recogniser = shipped_recogniser()
    if args.real:
        found = real_designs(args.cache, recogniser)
        print(f"real images of held-out designs, each design of a figure weighing the same: {found.summary()}")
        return
    model = load_embedded(args.weights)
    sampling = model.default_sampling
    if args.guidance is not None or args.temperature is not None:
        chosen = {"guidance_scale": args.guidance, "temperature": args.temperature}
        try:
            sampling = replace(sampling, **{name: value for name, value in chosen.items() if value is not None})
        except SettingsError as error:
            parser.error(str(error))
    captions = training_captions(args.cache, args.captions)
    found = recognised(model, captions, args.seeds, args.cache, sampling, recogniser)
    at = f"guidance {sampling.guidance_scale:g}, temperature {sampling.temperature:g}"
    print(f"{args.weights} ({at}): {found.summary()}")
    if recogniser is not None:
        own = recogniser.held_out
        print(f"the recogniser on real images of held-out designs: top-1 {own[0]:.0%}, top-5 {own[1]:.0%}")


if __name__ == "__main__":
    main()
