"""The cost ratio c of draft shapes beside the continuous trainer's target, before any training.

    python scripts/draft_cost.py [--repeats 5] [--shape hidden,layers,heads,head_width,head_blocks ...]

A pass's cost does not depend on the weights, so each shape is timed with random ones: the target's AR and
the draft's AR (`ar-draft`) on one prompt, interleaved, as `bench-cspd` takes c for a trained pair. Picks a
draft for issue 35 (c <= 0.3) without spending GPU minutes on training shapes that are too slow.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from pathlib import Path

import torch
from safetensors.torch import save_file

from specviz.core.threads import configure_threads
from specviz.decoding.runner import run
from specviz.models.tiny_continuous.adapter import ASSETS, TinyContinuousModel
from specviz.models.tiny_continuous.network import ContinuousConfig, ContinuousTextToImage
from specviz.training.tiny import bfloat16
from specviz.training.tiny_continuous import ROLES


def shape(text: str) -> ContinuousConfig:
    """hidden,layers,heads,head_width,head_blocks as a config (the MLP three times the hidden size)."""
    hidden, layers, heads, width, blocks = (int(part) for part in text.split(","))
    return ContinuousConfig(
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        intermediate_size=3 * hidden,
        head_width=width,
        head_blocks=blocks,
    )


def write_random(folder: Path, role: str, config: ContinuousConfig) -> int:
    """A model of `config` with seeded random weights, saved as the adapter reads it; its parameter count."""
    torch.manual_seed(0)
    model = ContinuousTextToImage(config)
    save_file(bfloat16(model.state_dict()), str(folder / f"{role}.safetensors"))
    (folder / f"{role}.json").write_text(json.dumps({"model": config.to_dict()}))
    return sum(p.numel() for p in model.parameters())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--prompt", default="red apple")
    parser.add_argument("--shape", action="append", type=shape, help="a candidate beside the trainer's draft")
    args = parser.parse_args()
    threads = configure_threads()
    print(f"{threads} torch threads")
    print("| draft | parameters | of the target's | target AR s | draft AR s | c median (range) |")
    print("|---|---:|---:|---:|---:|---|")
    for config in [ROLES["draft"], *(args.shape or [])]:
        with tempfile.TemporaryDirectory() as temporary:
            folder = Path(temporary)
            shutil.copy(ASSETS / "projection.safetensors", folder)
            target = write_random(folder, "target", ROLES["target"])
            draft = write_random(folder, "draft", config)
            model = TinyContinuousModel.load(folder)
            seconds: dict[str, list[float]] = {"ar": [], "ar-draft": []}
            for repeat in range(args.repeats + 1):  # the first round warms up, untimed
                for method in seconds:
                    trace = run(model, method, args.prompt, 0, model.default_sampling)
                    if repeat:
                        seconds[method].append(trace.seconds)
        ratios = [d / a for d, a in zip(seconds["ar-draft"], seconds["ar"], strict=True)]
        name = f"{config.hidden_size},{config.num_layers},{config.num_heads},{config.head_width},{config.head_blocks}"
        print(
            f"| {name} | {draft / 1e6:.2f}M | {draft / target:.3f} | {statistics.median(seconds['ar']):.2f} | "
            f"{statistics.median(seconds['ar-draft']):.2f} | {statistics.median(ratios):.3f} "
            f"({min(ratios):.3f}-{max(ratios):.3f}) |",
            flush=True,
        )


if __name__ == "__main__":
    main()
