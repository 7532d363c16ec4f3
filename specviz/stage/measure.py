"""How uncertain the embedded model is: entropy per token along its own AR samples.

    python -m specviz.stage.measure [--weights DIR] [--seeds 2] [--prompts FILE]
    python -m specviz.stage.measure --temperature 1 --top-k 200 --guidance 2 [--write]

For training captions and for free text (or the prompts of a file) it prints the mean entropy (nats)
of the distribution each token is sampled from and the share of positions whose most likely token
has probability above 0.99, at the model's default sampling or the one given. A real AR image model
(Lumina-mGPT at top-k 2000, Janus-Pro, Emu3) samples from broad distributions; a model that memorised
its data is near-deterministic. `--write` makes the given sampling the default in the weights'
config.json (how the shipped defaults were set, after comparing candidates with this and `bench`).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from specviz.core.settings import SamplingSettings
from specviz.models.tiny.adapter import ASSETS, TinyModel
from specviz.stage.samples import FREE_TEXT, TRAINING_CAPTIONS

CONFIDENT = 0.99


@torch.inference_mode()
def uncertainty(model: TinyModel, prompt: str, seed: int, sampling: SamplingSettings) -> tuple[float, float]:
    """(mean entropy per token, share of positions with top probability > CONFIDENT) along one AR sample."""
    session = model.session(prompt, sampling.guidance_scale)
    generator = torch.Generator().manual_seed(seed)
    logits, entropies, confident = session.next_logits, [], 0
    length = model.geometry.seq_len
    for position in range(length):
        p = sampling.probabilities(logits)
        entropies.append(float(-(p * p.clamp(min=1e-30).log()).sum()))
        confident += float(p.max()) > CONFIDENT
        token = torch.multinomial(p, 1, generator=generator)
        if position + 1 < length:
            logits = session.forward(token)[0]
            session.commit(1)
    return statistics.fmean(entropies), confident / length


def report(model: TinyModel, prompts: list[str], seeds: int, sampling: SamplingSettings) -> tuple[float, float]:
    results = [uncertainty(model, prompt, seed, sampling) for prompt in prompts for seed in range(seeds)]
    return statistics.fmean(r[0] for r in results), statistics.fmean(r[1] for r in results)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", type=Path, default=ASSETS)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--prompts", type=Path, help="a text file, one prompt per line, instead of the built-in sets")
    parser.add_argument("--temperature", type=float)
    parser.add_argument("--top-k", type=int, help="0 for no top-k")
    parser.add_argument("--top-p", type=float)
    parser.add_argument("--guidance", type=float)
    parser.add_argument("--write", action="store_true", help="write the sampling measured into config.json")
    args = parser.parse_args(argv)
    model = TinyModel.load(args.weights)
    overrides = {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p}
    overrides["guidance_scale"] = args.guidance
    chosen = {name: value for name, value in overrides.items() if value is not None}
    if chosen.get("top_k") == 0:
        chosen["top_k"] = None
    sampling = SamplingSettings(**{**model.default_sampling.to_dict(), **chosen})
    print(f"sampling {sampling.to_dict()}")
    groups = [("training captions", TRAINING_CAPTIONS), ("free text", FREE_TEXT)]
    if args.prompts:
        groups = [(str(args.prompts), [line.strip() for line in args.prompts.read_text().splitlines() if line.strip()])]
    for label, prompts in groups:
        entropy, confident = report(model, prompts, args.seeds, sampling)
        print(
            f"{label}: {len(prompts)} prompts x {args.seeds} seeds, mean entropy {entropy:.3f} nats per token, "
            f"{confident:.0%} of positions with top probability > {CONFIDENT}"
        )
    if args.write:
        config = args.weights / "config.json"
        summary = json.loads(config.read_text())
        summary["sampling"] = sampling.to_dict()
        config.write_text(json.dumps(summary, indent=2) + "\n")
        print(f"wrote the sampling defaults into {config}")


if __name__ == "__main__":
    main()
