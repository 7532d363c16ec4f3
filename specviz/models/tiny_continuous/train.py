"""Train one model of the embedded continuous pair (target or draft) on OpenMoji, from a fixed seed.

    python -m specviz.models.tiny_continuous.train --role target
    python -m specviz.models.tiny_continuous.train --role draft

The data is tiny's (every named emoji with skin tones, hue rotations, mirrors, whole-patch shifts;
held out by base emoji), tokens are projected patches (`projection.py`). Both roles use the same
data order from the same seed; the draft is a smaller network trained the same way, as the CSpD
paper's MAR-B is a smaller MAR. No EMA: MAR's users report black images when short runs from
scratch use EMA 0.9999. Writes `<role>.safetensors` (bfloat16), `<role>.json` (architecture,
training record) and `projection.safetensors` to `assets/tiny-continuous/`.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from specviz.models.diffusion_head import TRAINING_STEPS, Schedule
from specviz.models.tiny.data import augmented_images, build_emoji_set, shift_tokens
from specviz.models.tiny.train import (
    CAPTION_TEMPLATES,
    CONDITION_DROP,
    adamw,
    bfloat16,
    caption_vectors,
    evaluation,
    learning_rate,
    training_draws,
)
from specviz.models.tiny_continuous.network import ContinuousConfig, ContinuousTextToImage
from specviz.models.tiny_continuous.projection import PatchProjection
from specviz.threads import configure_threads

ASSETS = Path(__file__).resolve().parents[3] / "assets" / "tiny-continuous"
ROLES = {
    "target": ContinuousConfig(
        hidden_size=256, num_layers=4, num_heads=4, intermediate_size=768, head_width=256, head_blocks=3
    ),
    "draft": ContinuousConfig(
        hidden_size=128, num_layers=1, num_heads=2, intermediate_size=384, head_width=96, head_blocks=1
    ),
}


@torch.no_grad()
def mean_loss(model: ContinuousTextToImage, text: torch.Tensor, tokens: torch.Tensor, schedule: Schedule) -> float:
    """The loss of un-augmented images under their first caption, with a fixed draw of timesteps and
    noise, so checkpoints compare on the same draws."""
    model.eval()
    total = 0.0
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1234)
        for start in range(0, len(tokens), 64):
            batch = slice(start, start + 64)
            drop = torch.zeros(len(tokens[batch]), dtype=torch.bool, device=tokens.device)
            loss = model.training_loss(text[batch], drop, tokens[batch], schedule, repeats=1)
            total += loss.item() * len(tokens[batch])
    model.train()
    return total / len(tokens)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--role", choices=tuple(ROLES), required=True)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--weight-decay", type=float, default=0.05)
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument(
        "--init-from",
        type=Path,
        help="continue from this folder's <role>.safetensors and <role>.json (a fresh schedule over --steps more)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, default=ASSETS)
    parser.add_argument("--cache", type=Path, default=Path(".cache"))
    args = parser.parse_args(argv)
    started = time.time()
    threads = configure_threads()
    torch.manual_seed(args.seed)  # the diffusion timesteps and noise
    generator = torch.Generator().manual_seed(args.seed)  # the data order, shifts and condition drops
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)

    emoji = build_emoji_set(args.cache / "openmoji48-variants.npz")
    held = torch.from_numpy(emoji.held_out)
    pictures, source = augmented_images(emoji)
    source = torch.from_numpy(source)
    projection = PatchProjection.fit(torch.from_numpy(emoji.images)[~held])
    tokens = projection.encode(torch.from_numpy(pictures)).to(device)
    white = projection.encode(torch.full((1, 3, 3, 3), 255, dtype=torch.uint8))[0, 0].to(device)
    save_file(projection.state(), str(args.out / "projection.safetensors"))

    captions = [template.format(c) for template in CAPTION_TEMPLATES for c in emoji.captions]
    text = caption_vectors(captions, args.cache).view(len(CAPTION_TEMPLATES), len(emoji.images), -1).to(device)
    train_pictures = (~held[source]).nonzero().squeeze(1)
    held_ids = held.nonzero().squeeze(1)
    train_probe = (~held).nonzero().squeeze(1)[torch.randperm(int((~held).sum()), generator=generator)[:200]]
    source = source.to(device)

    config, earlier = ROLES[args.role], None
    model = ContinuousTextToImage(config)
    if args.init_from:
        summary = json.loads((args.init_from / f"{args.role}.json").read_text())
        config, earlier = ContinuousConfig(**summary["model"]), summary["training"]
        model = ContinuousTextToImage(config)
        state = load_file(str(args.init_from / f"{args.role}.safetensors"))
        model.load_state_dict({name: tensor.float() for name, tensor in state.items()})
    model.to(device)
    schedule = Schedule.respaced(TRAINING_STEPS)
    params = sum(p.numel() for p in model.parameters())
    print(f"{args.role}: {params / 1e6:.2f}M parameters, {len(train_pictures)} training images", flush=True)
    optimizer = adamw(model, args.lr, args.weight_decay)
    history = []
    for step in range(args.steps):
        draws = training_draws(train_pictures, args.batch_size, generator)
        picture, template, drop, dy, dx = (t.to(device) for t in draws)
        batch_tokens = shift_tokens(tokens[picture], config.rows, config.cols, dy, dx, white)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, args.steps, args.lr)
        loss = model.training_loss(text[template, source[picture]], drop, batch_tokens, schedule)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if not math.isfinite(loss.item()):
            raise SystemExit(f"loss is {loss.item()} at step {step}; stopping")
        if step % args.eval_every == 0 or step == args.steps - 1:
            train_loss = mean_loss(model, text[0, train_probe], tokens[train_probe], schedule)
            held_out_loss = mean_loss(model, text[0, held_ids], tokens[held_ids], schedule)
            history.append(evaluation(step, loss, train_loss, held_out_loss, started))

    save_file(bfloat16(model.state_dict()), str(args.out / f"{args.role}.safetensors"))
    summary = {
        "model": config.to_dict(),
        "parameters": params,
        "training": {
            "steps": args.steps,
            "batch_size": args.batch_size,
            "lr": args.lr,
            "weight_decay": args.weight_decay,
            "seed": args.seed,
            "torch_threads": threads,
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "condition_drop": CONDITION_DROP,
            "training_images": len(train_pictures),
            "held_out_emoji": int(held.sum()),
            "ema": None,
            "continued_from": earlier,
            "minutes": round((time.time() - started) / 60, 1),
            "torch": torch.__version__,
            "history": history,
        },
    }
    (args.out / f"{args.role}.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {args.out / args.role}.safetensors in {summary['training']['minutes']} min", flush=True)


if __name__ == "__main__":
    main()
