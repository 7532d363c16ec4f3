"""Train the embedded `tiny` model from scratch: tokenizer, then generator; writes assets/tiny/.

    python -m specviz.models.tiny.train            # the shipped weights (about 75 min on 2 CPU cores)
    python -m specviz.models.tiny.train --steps 50 --out /tmp/tiny   # a quick smoke run

Everything is seeded, so a run on the same machine type reproduces the shipped files. On CPUs with
AMX/AVX-512 bf16, autocast makes training about 4x faster than float32.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from specviz.models.tiny.data import build_emoji_set
from specviz.models.tiny.network import TinyConfig, TinyTextToImage
from specviz.models.tiny.text import TextEncoder
from specviz.models.tiny.tokenizer import PatchTokenizer, fit_codebook, patchify, psnr

CAPTION_TEMPLATES = ("{}", "{} emoji", "an emoji of {}")
CONDITION_DROP = 0.1
ASSETS = Path(__file__).resolve().parents[3] / "assets" / "tiny"


def learning_rate(step: int, steps: int, peak: float, warmup: int = 100) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def held_out_loss(model: TinyTextToImage, text: torch.Tensor, tokens: torch.Tensor, autocast: bool) -> float:
    model.eval()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = model.training_loss(text, torch.zeros(len(tokens), dtype=torch.bool), tokens).item()
    model.train()
    return loss


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--codebook-iterations", type=int, default=20)
    parser.add_argument("--no-autocast", action="store_true", help="train in float32 (slower on CPU)")
    parser.add_argument("--out", type=Path, default=ASSETS)
    parser.add_argument("--cache", type=Path, default=Path(".cache"))
    args = parser.parse_args(argv)
    started = time.time()
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    autocast = not args.no_autocast
    args.out.mkdir(parents=True, exist_ok=True)

    emoji = build_emoji_set(args.cache / "openmoji48.npz")
    images = torch.from_numpy(emoji.images)
    held = torch.from_numpy(emoji.held_out)
    print(f"{len(images)} emoji, {int(held.sum())} held out", flush=True)

    vectors = patchify(images[~held].float() / 255.0).reshape(-1, 27)
    codebook = fit_codebook(vectors, 1024, args.codebook_iterations, generator)
    tokenizer = PatchTokenizer(codebook)
    tokens = tokenizer.encode(images)
    quality = {
        split: psnr(images[mask], tokenizer.decode(tokens[mask], 16, 16)).mean().item()
        for split, mask in (("train", ~held), ("held_out", held))
    }
    save_file({"codebook": codebook.contiguous()}, str(args.out / "codebook.safetensors"))
    print(f"tokenizer PSNR train {quality['train']:.2f} dB, held-out {quality['held_out']:.2f} dB", flush=True)

    encoder = TextEncoder()
    captions = [template.format(c) for template in CAPTION_TEMPLATES for c in emoji.captions]
    text = encoder(captions).view(len(CAPTION_TEMPLATES), len(images), -1)
    train_ids = (~held).nonzero().squeeze(1)
    held_ids = held.nonzero().squeeze(1)

    config = TinyConfig(hidden_size=384, num_layers=6, num_heads=6, intermediate_size=1024)
    model = TinyTextToImage(config)
    params = sum(p.numel() for p in model.parameters())
    print(f"generator: {params / 1e6:.2f}M parameters", flush=True)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
    )
    history = []
    for step in range(args.steps):
        batch = train_ids[torch.randint(len(train_ids), (args.batch_size,), generator=generator)]
        template = torch.randint(len(CAPTION_TEMPLATES), (args.batch_size,), generator=generator)
        drop = torch.rand(args.batch_size, generator=generator) < CONDITION_DROP
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, args.steps, args.lr)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = model.training_loss(text[template, batch], drop, tokens[batch])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 250 == 0 or step == args.steps - 1:
            record = {
                "step": step,
                "train_loss": round(loss.item(), 4),
                "held_out_loss": round(held_out_loss(model, text[0, held_ids], tokens[held_ids], autocast), 4),
                "minutes": round((time.time() - started) / 60, 1),
            }
            history.append(record)
            print(json.dumps(record), flush=True)

    weights = {name: p.detach().to(torch.bfloat16).contiguous() for name, p in model.state_dict().items()}
    save_file(weights, str(args.out / "model.safetensors"))
    summary = {
        "model": config.to_dict(),
        "parameters": params,
        "training": {
            "steps": args.steps,
            "batch_size": args.batch_size,
            "lr": args.lr,
            "seed": args.seed,
            "autocast_bf16": autocast,
            "condition_drop": CONDITION_DROP,
            "caption_templates": list(CAPTION_TEMPLATES),
            "images": len(images),
            "held_out_images": int(held.sum()),
            "minutes": round((time.time() - started) / 60, 1),
            "torch": torch.__version__,
            "history": history,
        },
        "tokenizer": {"codes": 1024, "patch": 3, "psnr_db": {k: round(v, 2) for k, v in quality.items()}},
    }
    (args.out / "config.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {args.out} in {summary['training']['minutes']} min", flush=True)


if __name__ == "__main__":
    main()
