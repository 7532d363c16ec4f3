"""Train the EAGLE draft head of an embedded text-to-emoji model on its own features; writes
head.safetensors and head.json next to its weights.

    python -m specviz.training.tiny_head                 # a head for tiny-uncertain (assets/tiny-uncertain)
    python -m specviz.training.tiny_head --steps 20 --out /tmp/head   # a quick smoke run

As EAGLE trains its head: teacher forcing on the target's features. For every training image (the
same designs, mirrors, held-out split and texture quantiser as tiny's own training, the codes drawn
afresh per batch at the tau tiny's config.json records), tiny runs once with the prompt
and once with the null prompt (guidance's two rows); the head reads, for each token x_i, tiny's
feature f_{i-1} (plus uniform noise of +-`--noise`, so it tolerates its own imperfect predictions when
it drafts several levels deep) and the embedding of x_i, and learns f_i: a smooth-L1 loss on the
feature plus `--cls-weight` times the cross-entropy of its token distribution (through tiny's LM
head) against tiny's own. Reported: top-1 agreement with tiny on held-out emoji, the head's
acceptance-rate proxy.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from specviz.core.threads import configure_threads
from specviz.models.networks.draft_head import DraftHead
from specviz.models.tiny.adapter import SHIPPED, TinyModel
from specviz.models.tiny.data import shift_tokens
from specviz.models.tiny.designs import build_design_set
from specviz.models.tiny.tokenizer import patchify, sample_codes
from specviz.training.tiny import (
    CAPTION_TEMPLATES,
    TEXTURE_TAU,
    descend,
    device_name,
    held_and_mirrors,
    learning_rate,
    prompt_vectors,
    random_shifts,
    set_learning_rate,
)


def target_features(model: TinyModel, text: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """(2B, 256, H) tiny's features f_{-1} .. f_254 for each image: first the prompted rows, then the
    null-prompt rows (f_{-1} is the last prompt slot's hidden state, which predicts the first token)."""
    net = model.network
    batch = len(tokens)
    prefix = torch.cat([net.prefix(text), net.prefix(None, batch)])
    embeds = torch.cat([prefix, net.embed_tokens(tokens[:, :-1]).repeat(2, 1, 1)], dim=1)
    hidden = net.lm.model(inputs_embeds=embeds).last_hidden_state
    return hidden[:, net.config.prefix_len - 1 :]


def head_losses(
    head: DraftHead, features: torch.Tensor, tokens: torch.Tensor, noise: float, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(feature loss, token loss, top-1 agreement) of the head on one batch of rows."""
    rows, length = tokens.shape
    inputs, wanted = features[:, :-1].float(), features[:, 1:].float()
    if noise:
        inputs = inputs + (torch.rand(inputs.shape, generator=generator).to(inputs.device) * 2 - 1) * noise
    positions = torch.arange(length - 1, device=tokens.device)[None].expand(rows, -1)
    predicted = head(tokens[:, :-1], inputs, positions)
    feature_loss = F.smooth_l1_loss(predicted, wanted)
    draft, target = head.logits(predicted).float(), head.logits(wanted).float()
    token_loss = -(target.softmax(-1) * draft.log_softmax(-1)).sum(-1).mean()
    agreement = (draft.argmax(-1) == target.argmax(-1)).float().mean()
    return feature_loss, token_loss, agreement


AUTOCAST = True  # bf16 matrix products: tensor cores on a GPU, AMX or AVX-512 on a recent CPU


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--weights",
        type=Path,
        default=SHIPPED["tiny-uncertain"],
        help="the model's weights folder (the head goes there)",
    )
    parser.add_argument("--out", type=Path, help="write the head here instead of into --weights")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch-size", type=int, default=16, help="images per step (each gives two rows)")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--noise", type=float, default=0.1, help="uniform noise on the input features (EAGLE)")
    parser.add_argument("--cls-weight", type=float, default=0.1, help="weight of the token loss (EAGLE: 0.1)")
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--cache", type=Path, default=Path(".cache"))
    return parser.parse_args(argv)


@dataclass(frozen=True)
class Data:
    """What the head's training reads, on the device: tiny's own training data (`specviz.training.tiny`),
    quantised at the tau tiny's config.json records, and a fixed draw of 64 held-out images' codes."""

    source: torch.Tensor  # per picture (design or mirror): the design it shows, on the CPU
    patches: torch.Tensor  # uint8 (pictures, 256, 27): each batch's codes are drawn afresh from them
    tau: float
    text: torch.Tensor  # `prompt_vectors`
    white: int  # the code of a white patch, which fills what a shift uncovers
    train_pictures: torch.Tensor
    held_ids: torch.Tensor  # the held-out designs the evaluations measure
    held_tokens: torch.Tensor  # their codes


def prepare_data(args: argparse.Namespace, model: TinyModel, generator: torch.Generator) -> Data:
    """The data, the held-out probe drawn from `generator` before the data order."""
    device = torch.device(args.device)
    designs = build_design_set(args.cache / "designs")
    held, pictures, source = held_and_mirrors(designs)
    patches = patchify(torch.from_numpy(pictures)).to(device)
    summary = json.loads((args.weights / "config.json").read_text())
    tau = summary.get("tokenizer", {}).get("texture_tau", TEXTURE_TAU)
    text = prompt_vectors(designs, args.cache, device)
    white = int(model.tokenizer.encode(torch.full((1, 3, 3, 3), 255, dtype=torch.uint8, device=device))[0, 0])
    held_ids = held.nonzero().squeeze(1)[torch.randperm(int(held.sum()), generator=generator)[:64]]
    codebook = model.tokenizer.codebook
    held_tokens = sample_codes(patches[held_ids].float() / 255.0, codebook, tau, torch.Generator().manual_seed(1))
    train_pictures = (~held[source]).nonzero().squeeze(1)
    return Data(source, patches, tau, text, white, train_pictures, held_ids, held_tokens)


def training_step(
    args: argparse.Namespace,
    data: Data,
    model: TinyModel,
    head: DraftHead,
    optimizer: torch.optim.Optimizer,
    step: int,
    generator: torch.Generator,
) -> tuple[torch.Tensor, ...]:
    """One optimiser step of the head on tiny's features of a fresh batch (its images, templates and
    shifts, then its codes, then the noise on the features, drawn from `generator` in that order);
    returns the loss, the feature loss, the token loss and the top-1 agreement."""
    device = torch.device(args.device)
    pictures = data.train_pictures
    picture = pictures[torch.randint(len(pictures), (args.batch_size,), generator=generator)]
    template = torch.randint(len(CAPTION_TEMPLATES), (args.batch_size,), generator=generator)
    dy, dx = random_shifts(args.batch_size, generator)
    emoji_of = data.source[picture]
    picture, emoji_of, template, dy, dx = (t.to(device) for t in (picture, emoji_of, template, dy, dx))
    codes = sample_codes(data.patches[picture].float() / 255.0, model.tokenizer.codebook, data.tau, generator)
    config = model.network.config
    batch_tokens = shift_tokens(codes, config.rows, config.cols, dy, dx, data.white)
    with torch.no_grad(), torch.autocast(device.type, torch.bfloat16, enabled=AUTOCAST):
        features = target_features(model, data.text[template, emoji_of], batch_tokens)
    set_learning_rate(optimizer, learning_rate(step, args.steps, args.lr))
    with torch.autocast(device.type, torch.bfloat16, enabled=AUTOCAST):
        losses = head_losses(head, features, batch_tokens.repeat(2, 1), args.noise, generator)
        loss = losses[0] + args.cls_weight * losses[1]
    descend(loss, head, optimizer)
    return loss, *losses


def evaluation(
    data: Data, model: TinyModel, head: DraftHead, step: int, losses: tuple[torch.Tensor, ...], started: float
) -> dict:
    """One evaluation's record, printed as a JSON line: the step's losses and agreement, and the head's
    token loss and agreement with tiny on the held-out probe."""
    device = data.patches.device
    _, feature_loss, token_loss, agreement = losses
    with torch.no_grad(), torch.autocast(device.type, torch.bfloat16, enabled=AUTOCAST):
        head.eval()
        held_features = target_features(model, data.text[0, data.source[data.held_ids].to(device)], data.held_tokens)
        held_losses = head_losses(head, held_features, data.held_tokens.repeat(2, 1), 0.0, None)
        head.train()
    record = {
        "step": step,
        "feature_loss": round(feature_loss.item(), 4),
        "token_loss": round(token_loss.item(), 4),
        "train_top1": round(agreement.item(), 4),
        "held_out_token_loss": round(held_losses[1].item(), 4),
        "held_out_top1": round(held_losses[2].item(), 4),
        "minutes": round((time.time() - started) / 60, 1),
    }
    print(json.dumps(record), flush=True)
    return record


def training_record(args: argparse.Namespace, data: Data, threads: int, history: list[dict], started: float) -> dict:
    """How the head was made, written into head.json: the settings and the evaluations."""
    return {
        "steps": args.steps,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "noise": args.noise,
        "cls_weight": args.cls_weight,
        "seed": args.seed,
        "device": device_name(torch.device(args.device)),
        "torch_threads": threads,
        "held_out_images": len(data.held_ids),
        "texture_tau": data.tau,
        "minutes": round((time.time() - started) / 60, 1),
        "history": history,
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_arguments(argv)
    started = time.time()
    threads = configure_threads()
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    device = torch.device(args.device)
    model = TinyModel.load(args.weights, device=args.device)
    net = model.network
    head = DraftHead.sized_for(net.lm.config, net.lm.get_input_embeddings(), net.lm.lm_head).to(device)
    data = prepare_data(args, model, generator)
    print(f"head: {sum(p.numel() for p in head.parameters()) / 1e6:.2f}M parameters on {device}", flush=True)
    optimizer = torch.optim.AdamW(head.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    history = []
    for step in range(args.steps):
        losses = training_step(args, data, model, head, optimizer, step, generator)
        if step % args.eval_every == 0 or step == args.steps - 1:
            history.append(evaluation(data, model, head, step, losses, started))
            if not math.isfinite(losses[0].item()):
                raise SystemExit("the loss diverged; try a smaller --lr")
    head.eval().save(args.out or args.weights, training=training_record(args, data, threads, history, started))
    print(f"wrote {args.out or args.weights} in {(time.time() - started) / 60:.1f} min", flush=True)


if __name__ == "__main__":
    main()
