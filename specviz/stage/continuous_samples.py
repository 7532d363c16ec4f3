"""Labelled sample grids of the embedded continuous pair, to look at after training: the target's AR,
the draft's AR, and cspd / cspd-exact (target with draft), on training captions and free text.

python -m specviz.stage.continuous_samples --out assets/tiny-continuous
"""

from __future__ import annotations

import argparse
from pathlib import Path

from specviz.models.tiny_continuous.adapter import ASSETS, TinyContinuousModel
from specviz.stage.samples import FREE_TEXT, TRAINING_CAPTIONS, sample_grid

GRIDS = {"samples.png": "ar", "samples-draft.png": "ar-draft", "samples-cspd.png": "cspd"}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", type=Path, default=ASSETS)
    parser.add_argument("--out", type=Path, default=ASSETS, help="folder for the grids")
    parser.add_argument("--only", choices=tuple(GRIDS.values()), help="one grid instead of all")
    args = parser.parse_args(argv)
    model = TinyContinuousModel.load(args.weights)
    for name, method in GRIDS.items():
        if args.only in (None, method):
            sample_grid(model, TRAINING_CAPTIONS + FREE_TEXT, method=method).save(args.out / name)
            print(f"wrote {args.out / name}", flush=True)


if __name__ == "__main__":
    main()
