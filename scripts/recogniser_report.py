"""Where a recogniser's figures come from and where it errs: the figures joined by drawing, the leak a split by
emoji would have, and its scores by design of a figure, by image and by design; any recogniser's weights.
The scores on the split by figure mean something only for a recogniser trained on it (the shipped one); the
last line, on the split by emoji, only for one trained on that (the first recogniser, before 97a6f54).

    python scripts/recogniser_report.py --cache .device/cache [--weights assets/recogniser]
    git show 3183d55:assets/recogniser/recogniser.json > OLD/recogniser.json   # and its .safetensors: the
    python scripts/recogniser_report.py --cache .device/cache --weights OLD       # first recogniser, by figure
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from specviz.core.threads import configure_threads
from specviz.models.tiny.designs import build_design_set
from specviz.stage.recogniser import ASSETS, Split, TrainedRecogniser, figures, gender_neutral, scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=Path(".cache"), help="where the emoji designs are kept")
    parser.add_argument("--weights", type=Path, default=ASSETS, help="a recogniser's folder")
    args = parser.parse_args()
    configure_threads()
    designs = build_design_set(args.cache / "designs")
    figure_of = figures(designs.images, designs.bases, designs.designs)
    caption = {}
    for name, base in zip(designs.captions, designs.bases, strict=True):
        caption.setdefault(base, name)
    members = defaultdict(set)
    for base, figure in figure_of.items():
        members[figure].add(base)
    by_drawing = [group for group in members.values() if len({gender_neutral(base) for base in group}) > 1]
    print(f"{len(members)} figures of {len(figure_of)} emoji; joined by drawing: {len(by_drawing)} groups of "
          f"{sum(map(len, by_drawing))} emoji")  # fmt: skip
    for group in by_drawing:
        print("  " + ", ".join(sorted(caption[base] for base in group)))
    trained = {
        (figure_of[b], d) for b, d, out in zip(designs.bases, designs.designs, designs.held_out, strict=True) if not out
    }
    held = [(b, d) for b, d, out in zip(designs.bases, designs.designs, designs.held_out, strict=True) if out]
    held = [(b, d) for b, d in held if figure_of[b] in {figure for figure, _ in trained}]
    leaked = sum((figure_of[b], d) in trained for b, d in held)
    print(f"held out by emoji: {leaked} of {len(held)} images have their figure in their own design in training")

    recogniser = TrainedRecogniser.load(args.weights)
    split = Split.of(designs.images, designs.bases, designs.designs, designs.held_out)
    known = [i for i, base in enumerate(split.held_emoji) if figure_of[base] in set(recogniser.classes)]
    images, emoji = split.held_images[known], [split.held_emoji[i] for i in known]
    design_of = [split.held_designs[i] for i in known]
    ranked = [[figure_of.get(name, name) for name in row] for row in recogniser.ranked(images)]
    asked = [figure_of[base] for base in emoji]
    groups = list(zip(asked, design_of, strict=True))
    top1, top5 = scores(ranked, asked, groups)
    print(f"{args.weights}, by figure, on {len(set(groups))} held-out designs of a figure ({len(known)} images): "
          f"top-1 {top1:.1%}, top-5 {top5:.1%}; by image {scores(ranked, asked)}")  # fmt: skip
    for design in sorted(set(design_of)):
        chosen = [i for i, name in enumerate(design_of) if name == design]
        top1, top5 = scores([ranked[i] for i in chosen], [asked[i] for i in chosen], [groups[i] for i in chosen])
        print(f"  {design}: {len({groups[i] for i in chosen})} designs of a figure, top-1 {top1:.1%}, top-5 {top5:.1%}")
    emoji_split = [i for i, (base, out) in enumerate(zip(designs.bases, designs.held_out, strict=True)) if out]
    emoji_split = [i for i in emoji_split if designs.bases[i] in set(recogniser.classes) | set(recogniser.figure_of)]
    ranked = recogniser.ranked(designs.images[emoji_split])
    asked = [designs.bases[i] for i in emoji_split]
    print(
        f"on the {len(asked)} images held out by emoji: as its classes {scores(ranked, recogniser.figures(asked))}, "
        f"by figure {scores([[figure_of.get(n, n) for n in row] for row in ranked], [figure_of[a] for a in asked])}"
    )


if __name__ == "__main__":
    main()
