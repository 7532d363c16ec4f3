"""How many passes each schedule takes on the released models' grids (issue 59): Lumina-mGPT's 48 x 48 and
Emu3's 90 x 90, each with its end-of-row token after every row.

    python scripts/grid_passes.py [--shapes lumina-mgpt-7b emu3-8b] [--methods ar sjd sjd++ zipar pjd]
                                  [--seeds 0 1] [--scale 0.01] [--floor]

The decoders are the releases' (transformers' Chameleon and Emu3 classes) cut to `scale` of their width and two
layers, with random weights, at the releases' sampling (top-k 2000, guidance 3); every method at its defaults,
and ZipAR also at s 16 (its Lumina-mGPT code's). A random decoder's distribution hardly depends on the context,
so a draft drawn from the right neighbour's distribution passes almost surely: these counts lie near each
schedule's best case, not at what trained weights give. `--floor` adds that best case exactly: one image code,
so every draft is accepted and only the schedule limits a pass.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

from specviz.core.threads import configure_threads
from specviz.decoding.runner import run
from specviz.measure.shapes import ShapeModel, release_shapes

RUNS = {  # label: (method, parameters other than the defaults)
    "ar": ("ar", {}),
    "sjd": ("sjd", {}),
    "sjd++": ("sjd++", {}),
    "zipar": ("zipar", {}),
    "zipar s16": ("zipar", {"window_size": 16}),
    "pjd": ("pjd", {}),
}


def most_rows_in_flight(trace) -> int:
    """The most rows one pass verified or drew at once (PJD, ZipAR); 1 for every other run."""
    in_flight = [len(it.windows) if it.windows else len(set(it.rows)) for it in trace.iterations if it.kind == "rows"]
    return max(in_flight, default=1)


def count(model: ShapeModel, label: str, seeds: list[int]) -> dict:
    method, params = RUNS[label]
    passes, rows = [], []
    for seed in seeds:
        trace = run(model, method, "a grid of the release's shape", seed, params=params)
        passes.append(len(trace.iterations))
        rows.append(most_rows_in_flight(trace))
    return {"passes": passes, "rows": max(rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=["lumina-mgpt-7b", "emu3-8b"], choices=sorted(release_shapes()))
    parser.add_argument("--methods", nargs="+", default=list(RUNS), choices=list(RUNS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--scale", type=float, default=0.01, help="the decoder's width as a share of the release's")
    parser.add_argument("--floor", action="store_true", help="also the schedules' best case: one image code")
    args = parser.parse_args()
    configure_threads()
    print("| grid | image codes | method | passes (each seed) | step compression | most rows in a pass |")
    print("|---|---:|---|---|---:|---:|")
    for name in args.shapes:
        shape = release_shapes()[name].scaled(args.scale, keep_grid=True)
        variants = [shape] + ([dataclasses.replace(shape, image_codes=1)] if args.floor else [])
        for variant in variants:
            model = ShapeModel(variant)
            grid = f"{name}: {variant.rows} x {variant.cols} + row ends ({model.geometry.seq_len} positions)"
            for label in args.methods:
                counted = count(model, label, args.seeds)
                compression = model.geometry.seq_len / statistics.mean(counted["passes"])
                shown = " / ".join(f"{p:,}" for p in counted["passes"])
                cells = [grid, f"{variant.image_codes:,}", label, shown, f"{compression:.2f}x", str(counted["rows"])]
                print(f"| {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
