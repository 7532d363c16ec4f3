"""What an embedded discrete model of each shape costs on this machine, before any training (issue 60).

    python scripts/stage_cost.py [--repeats 5] [--shape hidden,layers ...]

A pass's cost does not depend on the weights, so each shape is timed with seeded random weights (heads of
64 dimensions and an MLP three times the hidden size, as `python -m specviz.training.tiny --hidden H
--layers L` builds it): AR per image (256 passes) on one prompt, after an image that warms up, at the
thread count the app uses, beside the shipped `tiny-uncertain` itself on the same prompt, so the ratio
carries to another machine. (Not SJD: a random network's distributions hardly depend on the context, so
its drafts pass as a trained model's would not.) The weights' size is the bfloat16 file's, head not
included. Picks the size of the model a GPU trains (`scripts/stage_on_gpu.sh`) from what two CPU cores
must still run: AR <= 1.5 s per image.
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
from specviz.models.tiny.adapter import SHIPPED, TinyModel
from specviz.models.tiny.network import TinyConfig, TinyTextToImage
from specviz.training.tiny import bfloat16

SHIPPED_SHAPE = "256,6"  # tiny-uncertain's


def shape(text: str) -> TinyConfig:
    """hidden,layers as the trainer's config."""
    hidden, layers = (int(part) for part in text.split(","))
    return TinyConfig(hidden_size=hidden, num_layers=layers, num_heads=hidden // 64, intermediate_size=3 * hidden)


def write_random(folder: Path, config: TinyConfig) -> tuple[int, int]:
    """A model of `config` with seeded random weights and the shipped codebook, saved as the adapter reads
    it; its parameter count and the size of its weights file in bytes."""
    torch.manual_seed(0)
    network = TinyTextToImage(config)
    save_file(bfloat16(network.state_dict()), str(folder / "model.safetensors"))
    shutil.copy(SHIPPED["tiny-uncertain"] / "codebook.safetensors", folder)
    sampling = {"temperature": 1.0, "top_k": None, "top_p": 1.0, "guidance_scale": 1.5}
    (folder / "config.json").write_text(json.dumps({"model": config.to_dict(), "sampling": sampling}))
    return sum(p.numel() for p in network.parameters()), (folder / "model.safetensors").stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--prompt", default="red apple")
    parser.add_argument("--shape", action="append", type=shape, help="hidden,layers beside tiny-uncertain's")
    args = parser.parse_args()
    threads = configure_threads()
    print(f"{threads} torch threads; {args.repeats} timed images each, after one that warms up")
    print("| model | parameters | weights MB | AR s per image, median (range) | of tiny-uncertain's |")
    print("|---|---:|---:|---|---:|")
    shipped = ar_seconds(TinyModel.load(name="tiny-uncertain"), args.prompt, args.repeats)
    print(f"| tiny-uncertain (256, 6; trained) | 6.0M | 12.1 | {spread(shipped)} | 1.00 |", flush=True)
    for config in [shape(SHIPPED_SHAPE), *(args.shape or [])]:
        with tempfile.TemporaryDirectory() as temporary:
            folder = Path(temporary)
            parameters, size = write_random(folder, config)
            seconds = ar_seconds(TinyModel.load(folder, name="stage-candidate"), args.prompt, args.repeats)
        ratio = statistics.median(seconds) / statistics.median(shipped)
        print(
            f"| {config.hidden_size}, {config.num_layers} (random) | {parameters / 1e6:.1f}M | {size / 1e6:.1f} | "
            f"{spread(seconds)} | {ratio:.2f} |",
            flush=True,
        )


def ar_seconds(model: TinyModel, prompt: str, repeats: int) -> list[float]:
    """AR's seconds per image over `repeats` seeds, after one image that warms up."""
    return [run(model, "ar", prompt, seed, model.default_sampling).seconds for seed in range(repeats + 1)][1:]


def spread(seconds: list[float]) -> str:
    return f"{statistics.median(seconds):.2f} ({min(seconds):.2f}-{max(seconds):.2f})"


if __name__ == "__main__":
    main()
