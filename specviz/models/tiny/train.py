"""Train the embedded `tiny` model: tokenizer, then generator; writes assets/tiny/.

    python -m specviz.models.tiny.train --steps 50 --out /tmp/tiny   # a quick smoke run
    python -m specviz.models.tiny.train --steps 1200 --batch-size 64 --out runs/tiny   # from scratch, on a GPU
    python -m specviz.models.tiny.train --init-from assets/tiny --lr 3e-4 --steps 1000 --batch-size 64 \
        --eval-every 100 --out runs/tiny-ft   # fine-tune the shipped weights on the broadened data

The data are meant to make the model generalise rather than memorise: every named OpenMoji emoji
(skin-tone variants included), hue rotations and mirror images tokenised once, translations by whole
patches drawn per batch, dropout on the input embeddings and attention, Gaussian noise on the prompt
vector, weight decay. The held-out split is by base emoji; a fine-tuning run (`--init-from`) holds out
what the starting weights never saw (`held_out_before`). `--keep last` writes the final weights (the
schedule's length is then the early stop), `--keep best-held-out` the evaluated checkpoint with the
lowest held-out loss. Everything is seeded from `--seed`, the draws on the CPU generator whatever the
device; a GPU run is not bit-identical across machines. On a GPU (`--device cuda`, the default where
one is) a run takes minutes; on CPUs with AMX/AVX-512 bf16, autocast makes training about 4x faster
than float32. The shipped weights are still the first model's (memorised, near-deterministic): see
the README's "embedded model" section for what the runs of this script measured.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import hashlib
import json
import math
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from specviz.models.tiny.adapter import TinyModel
from specviz.models.tiny.data import augmented_images, build_emoji_set, held_out_before, shift_tokens
from specviz.models.tiny.network import TinyConfig, TinyTextToImage
from specviz.models.tiny.text import TextEncoder
from specviz.models.tiny.tokenizer import PatchTokenizer, fit_codebook, nearest_code, patchify, psnr
from specviz.threads import configure_threads

CAPTION_TEMPLATES = ("{}", "{} emoji", "an emoji of {}")
CONDITION_DROP = 0.1
MAX_SHIFT = 1  # translations of up to one whole patch (3 pixels) each way
SHIFT_PROBABILITY = 0.5
ASSETS = Path(__file__).resolve().parents[3] / "assets" / "tiny"


def learning_rate(step: int, steps: int, peak: float, warmup: int = 100) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def random_shifts(batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Whole-patch translations (dy, dx) for a batch: none with probability 1 - SHIFT_PROBABILITY, else
    up to MAX_SHIFT patches each way."""
    shifted = torch.rand(batch_size, generator=generator) < SHIFT_PROBABILITY
    dy, dx = torch.randint(-MAX_SHIFT, MAX_SHIFT + 1, (2, batch_size), generator=generator) * shifted
    return dy, dx


@torch.no_grad()
def mean_loss(model: TinyTextToImage, text: torch.Tensor, tokens: torch.Tensor, autocast: bool) -> float:
    """Next-code cross-entropy of un-augmented images under their first caption, in batches."""
    model.eval()
    total = 0.0
    for start in range(0, len(tokens), 64):
        batch = slice(start, start + 64)
        drop = torch.zeros(len(tokens[batch]), dtype=torch.bool, device=tokens.device)
        with torch.autocast(tokens.device.type, dtype=torch.bfloat16, enabled=autocast):
            total += model.training_loss(text[batch], drop, tokens[batch]).item() * len(tokens[batch])
    model.train()
    return total / len(tokens)


def caption_vectors(captions: list[str], cache: Path) -> torch.Tensor:
    """MiniLM vectors of the captions, kept in `cache` under a hash of the list, so a machine without
    the text encoder's package (a lent GPU) can train from a copy of the cache folder."""
    digest = hashlib.sha256("\n".join(captions).encode()).hexdigest()[:16]
    path = cache / f"caption-vectors-{digest}.safetensors"
    if path.exists():
        return load_file(str(path))["vectors"]
    vectors = TextEncoder()(captions)
    cache.mkdir(parents=True, exist_ok=True)
    save_file({"vectors": vectors.contiguous()}, str(path))
    return vectors


def training_batch(
    pictures: torch.Tensor,
    tokens: torch.Tensor,
    batch_size: int,
    generator: torch.Generator,
    config: TinyConfig,
    white: int | torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch of training images (indices into `tokens`), caption templates, condition drops, and their
    tokens moved by random whole-patch shifts; every draw from the one CPU generator, in this order."""
    picture = pictures[torch.randint(len(pictures), (batch_size,), generator=generator)]
    template = torch.randint(len(CAPTION_TEMPLATES), (batch_size,), generator=generator)
    drop = torch.rand(batch_size, generator=generator) < CONDITION_DROP
    dy, dx = random_shifts(batch_size, generator)
    picture, template, drop, dy, dx = (t.to(tokens.device) for t in (picture, template, drop, dy, dx))
    return picture, template, drop, shift_tokens(tokens[picture], config.rows, config.cols, dy, dx, white)


def adamw(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW with weight decay on the matrices only (not on norms, biases and the null prefix)."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))


def evaluation(step: int, loss: torch.Tensor, train_loss: float, held_out_loss: float, started: float) -> dict:
    """One evaluation's record, printed as a JSON line as training goes."""
    record = {
        "step": step,
        "batch_loss": round(loss.item(), 4),
        "train_loss": round(train_loss, 4),
        "held_out_loss": round(held_out_loss, 4),
        "minutes": round((time.time() - started) / 60, 1),
    }
    print(json.dumps(record), flush=True)
    return record


def bfloat16(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: p.detach().to(torch.bfloat16).contiguous() for name, p in state.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1800)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--dropout", type=float, default=0.1, help="on input embeddings and attention")
    parser.add_argument(
        "--text-noise",
        type=float,
        default=0.025,
        help="std of Gaussian noise added to each coordinate of the unit prompt vector while training, so a "
        "caption stands for a neighbourhood of prompts rather than one point (0.025: cosine about 0.9)",
    )
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument(
        "--keep",
        choices=("last", "best-held-out"),
        default="last",
        help="write the final weights (the schedule's length is the early stop: the shipped run's was chosen by "
        "held-out loss and samples) or the evaluated checkpoint with the lowest held-out loss",
    )
    parser.add_argument("--checkpoints", type=Path, help="also write every evaluated checkpoint here")
    parser.add_argument(
        "--init-from",
        type=Path,
        help="start from a weights folder (its codebook, network size and weights) instead of from scratch",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--codebook-iterations", type=int, default=20)
    parser.add_argument("--no-autocast", action="store_true", help="train in float32 (slower on CPU)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, default=ASSETS)
    parser.add_argument("--cache", type=Path, default=Path(".cache"))
    args = parser.parse_args(argv)
    started = time.time()
    threads = configure_threads()  # every core but one: a busy core does not stall the OpenMP team
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    autocast = not args.no_autocast
    args.out.mkdir(parents=True, exist_ok=True)

    emoji = build_emoji_set(args.cache / "openmoji48-variants.npz")
    # fine-tuning holds out what the starting weights never saw; from scratch, the split by base hash
    held = torch.from_numpy(held_out_before(emoji) if args.init_from else emoji.held_out)
    pictures, source = augmented_images(emoji)
    source = torch.from_numpy(source)
    print(
        f"{len(emoji.images)} emoji ({len(set(emoji.bases))} base emoji), {int(held.sum())} held out; "
        f"{len(pictures)} images after hue rotations and mirrors",
        flush=True,
    )

    device = torch.device(args.device)
    originals = torch.from_numpy(emoji.images)
    if args.init_from:
        start = TinyModel.load(args.init_from)
        codebook = start.tokenizer.codebook
    else:
        vectors = patchify(originals[~held].to(device).float() / 255.0).reshape(-1, 27)
        codebook = fit_codebook(vectors, 1024, args.codebook_iterations, generator).cpu()
        del vectors
    tokens = PatchTokenizer(codebook.to(device)).encode(torch.from_numpy(pictures).to(device)).cpu()
    tokenizer = PatchTokenizer(codebook)  # the originals come first in `tokens`, in order
    white = int(nearest_code(torch.ones(1, 27), codebook)[0])
    quality = {
        split: psnr(originals[mask], tokenizer.decode(tokens[: len(originals)][mask], 16, 16)).mean().item()
        for split, mask in (("train", ~held), ("held_out", held))
    }
    save_file({"codebook": codebook.contiguous()}, str(args.out / "codebook.safetensors"))
    print(f"tokenizer PSNR train {quality['train']:.2f} dB, held-out {quality['held_out']:.2f} dB", flush=True)

    captions = [template.format(c) for template in CAPTION_TEMPLATES for c in emoji.captions]
    text = caption_vectors(captions, args.cache).view(len(CAPTION_TEMPLATES), len(emoji.images), -1)
    train_pictures = (~held[source]).nonzero().squeeze(1)
    held_ids = held.nonzero().squeeze(1)
    train_probe = (~held).nonzero().squeeze(1)[torch.randperm(int((~held).sum()), generator=generator)[:200]]
    tokens, text, source = tokens.to(device), text.to(device), source.to(device)

    if args.init_from:
        config = dataclasses.replace(start.network.config, dropout=args.dropout)
        model = TinyTextToImage(config)
        model.load_state_dict(start.network.state_dict())
    else:
        config = TinyConfig(
            hidden_size=args.hidden,
            num_layers=args.layers,
            num_heads=args.hidden // 64,
            intermediate_size=3 * args.hidden,
            dropout=args.dropout,
        )
        model = TinyTextToImage(config)
    model.to(device)
    params = sum(p.numel() for p in model.parameters())
    print(f"generator: {params / 1e6:.2f}M parameters, {len(train_pictures)} training images", flush=True)
    optimizer = adamw(model, args.lr, args.weight_decay)
    history, kept = [], {"held_out_loss": math.inf}
    for step in range(args.steps):
        # every draw from the one CPU generator, so a run is the same sequence on any device
        picture, template, drop, batch_tokens = training_batch(
            train_pictures, tokens, args.batch_size, generator, config, white
        )
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, args.steps, args.lr)
        prompts = text[template, source[picture]]
        if args.text_noise:
            noise = torch.randn(prompts.shape, generator=generator).to(device) * args.text_noise
            prompts = torch.nn.functional.normalize(prompts + noise, dim=-1)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            loss = model.training_loss(prompts, drop, batch_tokens)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % args.eval_every == 0 or step == args.steps - 1:
            record = evaluation(
                step,
                loss,
                mean_loss(model, text[0, train_probe], tokens[train_probe], autocast),
                mean_loss(model, text[0, held_ids], tokens[held_ids], autocast),
                started,
            )
            history.append(record)
            if args.checkpoints:
                args.checkpoints.mkdir(parents=True, exist_ok=True)
                save_file(bfloat16(model.state_dict()), str(args.checkpoints / f"step{step:05d}.safetensors"))
            if args.keep == "last" or record["held_out_loss"] < kept["held_out_loss"]:
                kept = {**record, "state": copy.deepcopy(model.state_dict())}

    save_file(bfloat16(kept.pop("state")), str(args.out / "model.safetensors"))
    summary = {
        "model": config.to_dict(),
        "parameters": params,
        "sampling": {"temperature": 1.0, "top_k": None, "top_p": 1.0, "guidance_scale": 1.5},
        "training": {
            "steps": args.steps,
            "batch_size": args.batch_size,
            "lr": args.lr,
            "weight_decay": args.weight_decay,
            "dropout": args.dropout,
            "keep": args.keep,
            "init_from": str(args.init_from) if args.init_from else None,
            "text_noise": args.text_noise,
            "seed": args.seed,
            "autocast_bf16": autocast,
            "torch_threads": threads,
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "condition_drop": CONDITION_DROP,
            "caption_templates": list(CAPTION_TEMPLATES),
            "max_shift_patches": MAX_SHIFT,
            "shift_probability": SHIFT_PROBABILITY,
            "emoji": len(emoji.images),
            "base_emoji": len(set(emoji.bases)),
            "held_out_emoji": int(held.sum()),
            "images_after_hue_and_mirror": len(pictures),
            "training_images": len(train_pictures),
            "translations_per_image": (2 * MAX_SHIFT + 1) ** 2,
            "kept_checkpoint": kept,
            "minutes": round((time.time() - started) / 60, 1),
            "torch": torch.__version__,
            "history": history,
        },
        "tokenizer": {"codes": 1024, "patch": 3, "psnr_db": {k: round(v, 2) for k, v in quality.items()}},
    }
    (args.out / "config.json").write_text(json.dumps(summary, indent=2) + "\n")
    known = sorted(caption for caption, out in zip(emoji.captions, held.tolist(), strict=True) if not out)
    (args.out / "prompts.json").write_text(json.dumps(known, indent=0) + "\n")  # the app offers them
    print(f"wrote {args.out} in {summary['training']['minutes']} min; kept {kept}", flush=True)


if __name__ == "__main__":
    main()
