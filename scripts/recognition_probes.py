"""Why the continuous pair's target is not recognised: three probes of docs/models.md, on the 2 CPU cores.

    python scripts/recognition_probes.py siblings             # how close each caption's MiniLM vector is to another's
    python scripts/recognition_probes.py further --steps 321  # the shipped target trained on 40 captions alone
    python scripts/recognition_probes.py scratch --condition minilm --steps 2400   # or --condition caption

`further` continues the shipped target on the training pictures of the recognition measure's first 40
captions (batch 16, peak learning rate 3e-4) and measures recognition on them. `scratch` trains the
draft-size network from scratch on every caption of 20 emoji with skin-tone variants (batch 16, peak 1e-3),
reading either the MiniLM vectors or one orthonormal vector per caption (what MAR's class embedding gives),
and measures recognition on those captions. Each writes a pair folder (the trained network as the target,
the shipped draft beside it) under --out and prints the measure; one torch thread, as the runs quoted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from specviz.models.networks.diffusion_head import TRAINING_STEPS, Schedule
from specviz.models.tiny.data import shift_tokens
from specviz.models.tiny.designs import build_design_set
from specviz.models.tiny.text import TEXT_DIM, VECTORS_ENV_VAR, TextEncoder
from specviz.models.tiny_continuous.network import ContinuousTextToImage
from specviz.models.tiny_continuous.projection import PatchProjection
from specviz.stage.recognition import load_embedded, recognised, shipped_recogniser, training_captions
from specviz.training.tiny import (
    CAPTION_TEMPLATES,
    adamw,
    bfloat16,
    caption_vectors,
    learning_rate,
    mirrored,
    training_draws,
)
from specviz.training.tiny_continuous import ROLES, load_role

SHIPPED = Path(__file__).resolve().parents[1] / "assets" / "tiny-continuous"
FAMILIES = 20  # emoji with skin-tone variants that `scratch` trains on, all their captions


def siblings(cache: Path) -> None:
    """Each caption's nearest other caption by MiniLM cosine: over all, and over the 200 measured."""
    designs = build_design_set(cache / "designs")
    captions = sorted(set(designs.captions))
    vectors = TextEncoder()(captions)
    similarity = vectors @ vectors.T
    similarity.fill_diagonal_(-1)
    nearest = similarity.max(1).values
    measured = nearest[[captions.index(c) for c in training_captions(cache, 200)]]
    for name, values in (("all", nearest), ("the 200 measured", measured)):
        share = (values > 0.95).float().mean()
        print(f"{name} ({len(values)}): nearest other caption, cosine median {values.median():.3f}; > 0.95 {share:.0%}")


def train(
    model: ContinuousTextToImage, text: torch.Tensor, captions: set[str], steps: int, lr: float, cache: Path
) -> ContinuousTextToImage:
    """`model` trained on the training pictures (mirrors and shifts as in train.py) of `captions` only."""
    generator = torch.Generator().manual_seed(0)
    designs = build_design_set(cache / "designs")
    held = torch.from_numpy(designs.held_out)
    pictures, source = mirrored(designs.images, designs.captions)
    source = torch.from_numpy(source)
    projection = PatchProjection.from_state(load_file(str(SHIPPED / "projection.safetensors")))
    tokens = projection.encode(torch.from_numpy(pictures))
    white = projection.encode(torch.full((1, 3, 3, 3), 255, dtype=torch.uint8))[0, 0]
    chosen = torch.tensor([designs.captions[int(s)] in captions for s in source])
    train_pictures = (~held[source] & chosen).nonzero().squeeze(1)
    print(f"{len(captions)} captions, {len(train_pictures)} training pictures, {steps} steps of 16", flush=True)
    optimizer, schedule, config = adamw(model, lr, 0.05), Schedule.respaced(TRAINING_STEPS), model.config
    for step in range(steps):
        picture, template, drop, dy, dx = training_draws(train_pictures, 16, generator)
        batch = shift_tokens(tokens[picture], config.rows, config.cols, dy, dx, white)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, steps, lr)
        loss = model.training_loss(text[template, source[picture]], drop, batch, schedule, input_noise=0.05)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 250 == 0 or step == steps - 1:
            passes = (step + 1) * 16 / len(train_pictures)
            print(f"step {step}: batch loss {loss.item():.4f}, {passes:.1f} passes over the pictures", flush=True)
    return model


def measure(model: ContinuousTextToImage, captions: list[str], out: Path, cache: Path) -> None:
    """Write `model` as the target of a pair folder (the shipped draft beside it) and print its recognition."""
    out.mkdir(parents=True, exist_ok=True)
    for name in ("draft.json", "draft.safetensors", "projection.safetensors"):
        shutil.copy(SHIPPED / name, out / name)
    save_file(bfloat16(model.state_dict()), str(out / "target.safetensors"))
    summary = {"model": model.config.to_dict(), "parameters": sum(p.numel() for p in model.parameters())}
    (out / "target.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"{out}: {recognised(load_embedded(out), captions, 1, cache, recogniser=shipped_recogniser()).summary()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("probe", choices=("siblings", "further", "scratch"))
    parser.add_argument("--steps", type=int, default=321)
    parser.add_argument("--condition", choices=("minilm", "caption"), default="minilm", help="scratch: what it reads")
    parser.add_argument("--cache", type=Path, default=Path(".cache"), help="where the emoji designs are kept")
    parser.add_argument("--out", type=Path, default=Path("/tmp/recognition-probe"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)  # a network's initial weights, then the diffusion draws
    if args.probe == "siblings":
        siblings(args.cache)
        return
    designs = build_design_set(args.cache / "designs")
    templated = [template.format(c) for template in CAPTION_TEMPLATES for c in designs.captions]
    text = caption_vectors(templated, args.cache).view(len(CAPTION_TEMPLATES), len(designs.images), -1)
    if args.probe == "further":
        captions = training_captions(args.cache, 40)
        model = train(load_role(SHIPPED, "target")[0], text, set(captions), args.steps, 3e-4, args.cache)
        measure(model, captions, args.out, args.cache)
        return
    known: dict[str, set[str]] = {}
    for caption, base, out in zip(designs.captions, designs.bases, designs.held_out, strict=True):
        if not out:
            known.setdefault(base, set()).add(caption)
    families = random.Random(0).sample(sorted(b for b, c in known.items() if len(c) >= 5), FAMILIES)
    captions = sorted(set().union(*(known[base] for base in families)))
    if args.condition == "caption":  # an orthonormal vector per caption, the same under every template
        basis = torch.linalg.qr(torch.randn(TEXT_DIM, TEXT_DIM, generator=torch.Generator().manual_seed(1)))[0]
        table = {caption: basis[:, i] for i, caption in enumerate(captions)}
        rows = torch.stack([table.get(c, torch.zeros(TEXT_DIM)) for c in designs.captions])
        text = rows.expand(len(CAPTION_TEMPLATES), -1, -1)
        # sampling reads the prompts' vectors from this file in place of the encoder's
        stored = args.out / "vectors.safetensors"
        args.out.mkdir(parents=True, exist_ok=True)
        vectors = torch.stack([table[c] for c in captions]).contiguous()
        save_file({"vectors": vectors}, str(stored), metadata={"prompts": json.dumps(captions)})
        os.environ[VECTORS_ENV_VAR] = str(stored)
    model = train(ContinuousTextToImage(ROLES["draft"]), text, set(captions), args.steps, 1e-3, args.cache)
    measure(model, captions, args.out, args.cache)


if __name__ == "__main__":
    main()
