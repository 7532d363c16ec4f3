"""Train one model of the embedded continuous pair (target or draft) on the emoji designs, from a fixed seed.

    python -m specviz.training.tiny_continuous --role target
    python -m specviz.training.tiny_continuous --role draft
    python -m specviz.training.tiny_continuous --role draft --distil-from TARGET_DIR --init-from DRAFT_DIR
    python -m specviz.training.tiny_continuous ... --checkpoints DIR   # then the same command with --resume DIR
    python -m specviz.training.tiny_continuous --role target --prepare --cache DIR   # data only, for a GPU
    scripts/continuous_on_gpu.sh   # target, draft and distillation in one call on a lent GPU

The data is tiny-uncertain's (every named emoji in up to four designs, mirrors, whole-patch shifts; about
5% of (emoji, design) pairs held out), tokens are projected patches (`projection.py`). Both roles use the same
data order from the same seed; the draft is a smaller network trained the same way, as the CSpD
paper's MAR-B is a smaller MAR. With `--distil-from`, the draft also learns the target's own
denoising steps (`distillation_loss`), so that CSpD accepts its drafts more often. No EMA: MAR's
users report black images when short runs from scratch use EMA 0.9999. On a GPU the passes run under
bfloat16 autocast, and `--minutes` fixes the step count from the pace of the first steps (the count is
recorded, so `--steps` repeats the run). Writes `<role>.safetensors`
(bfloat16), `<role>.json` (architecture, training record) and `projection.safetensors` to `assets/tiny-continuous/`.

The shipped pair is from this version, trained on a lent H100 by `scripts/continuous_on_gpu.sh` (`train`,
then `more`; the step counts are in the summaries, docs/models.md). The first pair, trained on tiny's
one-design data by the script at commit b389423, drew no recognisable emoji.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from specviz.core.threads import configure_threads
from specviz.models.networks.diffusion_head import TRAINING_STEPS, Schedule, gaussian_kl, noised, transition_moments
from specviz.models.tiny.data import shift_tokens
from specviz.models.tiny.designs import SOURCES, DesignSet, build_design_set
from specviz.models.tiny_continuous.network import ContinuousConfig, ContinuousTextToImage
from specviz.models.tiny_continuous.projection import PatchProjection
from specviz.training.tiny import (
    CONDITION_DROP,
    Pace,
    SplitDesigns,
    adamw,
    add_device_run_arguments,
    bfloat16,
    descend,
    device_name,
    evaluation,
    held_and_mirrors,
    learning_rate,
    minutes_so_far,
    prepare_cache,
    prompt_vectors,
    resumed,
    save_checkpoint,
    set_learning_rate,
    training_draws,
)

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "tiny-continuous"
ROLES = {
    "target": ContinuousConfig(
        hidden_size=384, num_layers=6, num_heads=6, intermediate_size=1152, head_width=256, head_blocks=3
    ),
    # 2.8 times the first pair's draft (1 layer, hidden 128, head width 96: 0.52M), which fitted the designs
    # far worse than the target (held-out 0.0255 against 0.0114); c 0.22 beside this target on one CPU
    # thread (scripts/draft_cost.py; the first shape's 0.15, docs/models.md)
    "draft": ContinuousConfig(
        hidden_size=192, num_layers=2, num_heads=3, intermediate_size=576, head_width=128, head_blocks=1
    ),
}


@torch.no_grad()
def fixed_draw_mean(loss: Callable[[slice], torch.Tensor], count: int, *models: torch.nn.Module) -> float:
    """The mean of `loss` over `count` examples in batches of 64, with a fixed draw of timesteps and
    noise, so checkpoints compare on the same draws; the models are in evaluation mode meanwhile."""
    modes = [model.training for model in models]
    for model in models:
        model.eval()
    total = 0.0
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1234)
        for start in range(0, count, 64):
            batch = slice(start, min(start + 64, count))
            total += loss(batch).item() * (batch.stop - batch.start)
    for model, mode in zip(models, modes, strict=True):
        model.train(mode)
    return total / count


def mean_loss(model: ContinuousTextToImage, text: torch.Tensor, tokens: torch.Tensor, schedule: Schedule) -> float:
    """The diffusion loss of un-augmented images under their first caption."""

    def loss(batch: slice) -> torch.Tensor:
        drop = torch.zeros(len(tokens[batch]), dtype=torch.bool, device=tokens.device)
        return model.training_loss(text[batch], drop, tokens[batch], schedule, repeats=1)

    return fixed_draw_mean(loss, len(tokens), model)


def distillation_loss(
    draft: ContinuousTextToImage,
    target: ContinuousTextToImage,
    text: torch.Tensor,
    tokens: torch.Tensor,
    sampling: Schedule,
    guidance: float,
) -> torch.Tensor:
    """KL divergence from the target's guided denoising step to the draft's, in nats per token and
    step, at one step of the sampling schedule per token (drawn uniformly) on the data's tokens noised
    to it: summed over the steps, the KL between the two heads' whole denoising paths.

    That bounds what cspd-exact's acceptance loses (1 - acceptance is the paths' total variation, at
    most sqrt(KL / 2)). Its direction lets a draft widen a step it cannot match: at the step to x_1
    both heads' standard deviation is about 0.007 while their predictions of x_0 differ by about 0.017,
    and a wider draft covers the target there. The paper's rule scales acceptance by Sigma, the ratio
    of the two heads' variances, so a wider draft raises cspd's acceptance beyond what it gains in
    agreement; `bench-cspd --deviation` measures what that costs. Both models see the prompt and the
    null prefix, and their epsilons are mixed at the sampling guidance, as the heads sample."""
    batch, _, dim = tokens.shape
    unconditional = torch.arange(2 * batch, device=tokens.device) >= batch
    both_text, both_tokens = text.repeat(2, 1), tokens.repeat(2, 1, 1)
    x0 = tokens.reshape(-1, dim)
    t = torch.randint(sampling.count, (len(x0),), device=x0.device)
    xt, _ = noised(sampling, t, x0)
    timesteps = sampling.timesteps.to(x0.device)[t].repeat(2)

    def guided_step(model: ContinuousTextToImage) -> tuple[torch.Tensor, torch.Tensor]:
        conditions = model.conditions(both_text, unconditional, both_tokens).reshape(2 * len(x0), -1)
        eps, v = model.denoiser(xt.repeat(2, 1), timesteps, conditions)
        (eps_prompt, eps_null), v_prompt = eps.float().chunk(2), v.float().chunk(2)[0]
        return transition_moments(sampling, t, xt, torch.lerp(eps_null, eps_prompt, guidance), v_prompt)

    with torch.no_grad():
        target_step = guided_step(target)
    return gaussian_kl(*target_step, *guided_step(draft)).sum(-1).mean()


def load_role(folder: Path, role: str) -> tuple[ContinuousTextToImage, dict]:
    """A trained model of the pair and its training record, from `<role>.safetensors` and `<role>.json`."""
    summary = json.loads((folder / f"{role}.json").read_text())
    model = ContinuousTextToImage(ContinuousConfig(**summary["model"]))
    state = load_file(str(folder / f"{role}.safetensors"))
    model.load_state_dict({name: tensor.float() for name, tensor in state.items()})
    return model, summary


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--role", choices=tuple(ROLES), required=True)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--weight-decay", type=float, default=0.05)
    parser.add_argument("--eval-every", type=int, default=250)
    add_device_run_arguments(parser)
    parser.add_argument(
        "--init-from",
        type=Path,
        help="continue from this folder's <role>.safetensors and <role>.json (a fresh schedule over --steps more)",
    )
    parser.add_argument(
        "--distil-from",
        type=Path,
        help="a folder with a trained target.safetensors and target.json: the draft also learns its steps",
    )
    parser.add_argument("--distil-weight", type=float, default=1.0, help="the distillation loss's weight")
    parser.add_argument("--guidance", type=float, default=2.0, help="the guidance the distilled steps are mixed at")
    parser.add_argument(
        "--input-noise",
        type=float,
        default=0.05,
        help="the backbone reads its tokens with noise of a standard deviation drawn up to this per image",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoints", type=Path, help="write a resumable checkpoint here at every evaluation")
    parser.add_argument("--resume", type=Path, help="continue the run whose checkpoints are in this folder")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, default=ASSETS)
    parser.add_argument("--cache", type=Path, default=Path(".cache"))
    args = parser.parse_args(argv)
    if args.distil_from and args.role != "draft":
        parser.error("--distil-from trains a draft towards a target: use it with --role draft")
    if args.minutes and args.resume:
        parser.error("--resume continues a run of known length: give the --steps its first sitting printed")
    return args


@dataclass(frozen=True)
class Data(SplitDesigns):
    """Everything the pair's training reads: the designs as projected patches."""

    tokens: torch.Tensor  # (pictures, 256, dim)
    white: torch.Tensor  # the token of a white patch, which fills what a shift uncovers


def projection_for(args: argparse.Namespace, designs: DesignSet, held: torch.Tensor) -> PatchProjection:
    """The patch projection, written to --out: --init-from's, since a model keeps its token space, or one
    fitted to the training designs."""
    if args.init_from and (args.init_from / "projection.safetensors").exists():
        projection = PatchProjection.from_state(load_file(str(args.init_from / "projection.safetensors")))
    else:
        projection = PatchProjection.fit(torch.from_numpy(designs.images)[~held])
    save_file(projection.state(), str(args.out / "projection.safetensors"))
    return projection


def prepare_data(args: argparse.Namespace, designs: DesignSet, text: torch.Tensor, generator: torch.Generator) -> Data:
    """The designs' pictures as tokens and the training probe, drawn from `generator` before the data
    order, so both roles see the same data from the same seed."""
    device = torch.device(args.device)
    held, pictures, source = held_and_mirrors(designs)  # the originals come first
    args.out.mkdir(parents=True, exist_ok=True)
    projection = projection_for(args, designs, held)
    tokens = projection.encode(torch.from_numpy(pictures)).to(device)
    white = projection.encode(torch.full((1, 3, 3, 3), 255, dtype=torch.uint8))[0, 0].to(device)
    train_probe = (~held).nonzero().squeeze(1)[torch.randperm(int((~held).sum()), generator=generator)[:200]]
    return Data.of(designs, held, source, text, train_probe, device, tokens=tokens, white=white)


@dataclass(frozen=True)
class Distillation:
    """The trained target a draft also learns from (`--distil-from`), at the target's sampling schedule
    and the --guidance its steps are mixed at."""

    teacher: ContinuousTextToImage
    sampling: Schedule
    guidance: float
    weight: float
    kl_probe: torch.Tensor  # the held-out designs its evaluations measure

    @classmethod
    def load(cls, args: argparse.Namespace, held_ids: torch.Tensor) -> Distillation:
        teacher = load_role(args.distil_from, "target")[0].to(args.device).eval().requires_grad_(False)
        sampling = Schedule.respaced(teacher.config.sampling_steps)
        # 200 held-out images: on two CPU cores the target's pass over all 714 takes eight minutes
        kl_probe = held_ids[torch.randperm(len(held_ids), generator=torch.Generator().manual_seed(4))[:200]]
        return cls(teacher, sampling, args.guidance, args.distil_weight, kl_probe)

    def loss(self, draft: ContinuousTextToImage, text: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        return distillation_loss(draft, self.teacher, text, tokens, self.sampling, self.guidance)

    def held_out_kl(self, draft: ContinuousTextToImage, data: Data) -> float:
        """The distillation loss on the probe, at fixed draws (`fixed_draw_mean`)."""

        def loss(batch: slice) -> torch.Tensor:
            ids = self.kl_probe[batch]
            return self.loss(draft, data.text[0, ids], data.tokens[ids])

        return fixed_draw_mean(loss, len(self.kl_probe), draft, self.teacher)


def build_model(args: argparse.Namespace) -> tuple[ContinuousTextToImage, dict | None]:
    """The role's network, its weights drawn from the global seed even when --init-from replaces them (so
    the draws after it are the same), on the device; with the earlier training record it continues."""
    model, earlier = ContinuousTextToImage(ROLES[args.role]), None
    if args.init_from:
        model, summary = load_role(args.init_from, args.role)
        earlier = summary["training"]
    return model.to(args.device), earlier


def start_run(
    args: argparse.Namespace, model: torch.nn.Module, optimizer: torch.optim.Optimizer, generator: torch.Generator
) -> dict:
    """The run's record (next step, evaluations, earlier minutes): a fresh one, or the checkpoint's it
    resumes, with the diffusion draws' generators where the checkpoint left them. The resumed command is
    the same as the first sitting's, with --resume: it rebuilds the same data."""
    if not args.resume:
        return {"step": 0, "history": [], "minutes_before": 0.0}
    run = resumed(args.resume, model, optimizer, generator)
    torch.set_rng_state(run["torch_rng"])
    if "cuda_rng" in run:  # on a GPU the diffusion draws come from the device's generator
        torch.cuda.set_rng_state(run["cuda_rng"], torch.device(args.device))
    return run


@dataclass(frozen=True)
class Trainer:
    """What a training step and an evaluation read besides the step: the run's settings, data, networks
    (the model, and the target with --distil-from), diffusion schedule, optimiser and data generator."""

    args: argparse.Namespace
    data: Data
    model: ContinuousTextToImage
    distillation: Distillation | None
    schedule: Schedule
    optimizer: torch.optim.Optimizer
    generator: torch.Generator

    def training_step(self, step: int, steps: int) -> torch.Tensor:
        """One optimiser step on a fresh batch (drawn from the data generator; timesteps and noise from the
        global one), its loss returned; a loss that is not finite stops the run."""
        args, data, model, device = self.args, self.data, self.model, torch.device(self.args.device)
        draws = training_draws(data.train_pictures, args.batch_size, self.generator)
        picture, template, drop, dy, dx = (t.to(device) for t in draws)
        batch_tokens = shift_tokens(data.tokens[picture], model.config.rows, model.config.cols, dy, dx, data.white)
        set_learning_rate(self.optimizer, learning_rate(step, steps, args.lr))
        prompts = data.text[template, data.source[picture]]
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = model.training_loss(prompts, drop, batch_tokens, self.schedule, input_noise=args.input_noise)
            if self.distillation is not None:
                loss = loss + self.distillation.weight * self.distillation.loss(model, prompts, batch_tokens)
        descend(loss, model, self.optimizer)
        if not math.isfinite(loss.item()):
            raise SystemExit(f"loss is {loss.item()} at step {step}; stopping")
        return loss

    def evaluate(self, step: int, loss: torch.Tensor, run: dict, started: float) -> None:
        """Measure the probes at `step` (and the KL to the target when distilling), print and record it."""
        data, model = self.data, self.model
        train_loss = mean_loss(model, data.text[0, data.train_probe], data.tokens[data.train_probe], self.schedule)
        held_out_loss = mean_loss(model, data.text[0, data.held_ids], data.tokens[data.held_ids], self.schedule)
        record = evaluation(step, loss, train_loss, held_out_loss, started)
        if self.distillation is not None:
            record["held_out_kl_to_target"] = round(self.distillation.held_out_kl(model, data), 4)
            print(json.dumps({"step": step, "held_out_kl_to_target": record["held_out_kl_to_target"]}), flush=True)
        record["minutes"] = round(record["minutes"] + run["minutes_before"], 1)
        run["history"].append(record)

    def checkpoint(self, folder: Path, run: dict, step: int, started: float) -> None:
        """Write the run after `step`, to be resumed at the next one with every generator where it stands."""
        state = {"step": step + 1, "history": run["history"], "minutes_before": minutes_so_far(run, started)}
        state |= {"generator": self.generator.get_state(), "torch_rng": torch.get_rng_state()}
        device = torch.device(self.args.device)
        if device.type == "cuda":
            state["cuda_rng"] = torch.cuda.get_rng_state(device)
        save_checkpoint(folder, self.model, self.optimizer, state)

    def train(self, run: dict, started: float) -> int:
        """Train from the run's step to the end, evaluating (and checkpointing, with --checkpoints or
        --resume) every --eval-every steps and at the last; returns the step count, which --minutes sets."""
        args, pace = self.args, Pace(self.args.minutes, started, torch.device(self.args.device))
        checkpoints = args.resume or args.checkpoints
        steps, step = args.steps, run["step"]
        while step < steps:
            steps = pace.steps(step, steps)
            loss = self.training_step(step, steps)
            if step % args.eval_every == 0 or step == steps - 1:
                self.evaluate(step, loss, run, started)
                if checkpoints:
                    self.checkpoint(checkpoints, run, step, started)
            step += 1
        return steps


def training_record(
    args: argparse.Namespace,
    trainer: Trainer,
    run: dict,
    steps: int,
    earlier: dict | None,
    threads: int,
    started: float,
) -> dict:
    """How the weights were made: the settings, the data, what the run continued or distilled from, and
    its evaluations."""
    designs = trainer.data.designs
    return {
        "steps": steps,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "weight_decay": args.weight_decay,
        "input_noise": args.input_noise,
        "seed": args.seed,
        "torch_threads": threads,
        "device": device_name(torch.device(args.device)),
        "condition_drop": CONDITION_DROP,
        "data": {source.name: designs.designs.count(source.name) for source in SOURCES},
        "captions": len(set(designs.captions)),
        "training_images": len(trainer.data.train_pictures),
        "held_out_images": int(trainer.data.held.sum()),
        "ema": None,
        "continued_from": earlier,
        "distilled_from": None
        if trainer.distillation is None
        else {"target": str(args.distil_from), "weight": args.distil_weight, "guidance": args.guidance},
        "minutes": round(minutes_so_far(run, started), 1),
        "torch": torch.__version__,
        "history": run["history"],
    }


def write_role(args: argparse.Namespace, model: ContinuousTextToImage, record: dict) -> None:
    """Write the model's weights (bfloat16) and `<role>.json` (architecture, training record) into --out."""
    save_file(bfloat16(model.state_dict()), str(args.out / f"{args.role}.safetensors"))
    summary = {
        "model": model.config.to_dict(),
        "parameters": sum(p.numel() for p in model.parameters()),
        "training": record,
    }
    (args.out / f"{args.role}.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {args.out / args.role}.safetensors in {summary['training']['minutes']} min", flush=True)


def main(argv: list[str] | None = None) -> None:
    args = parse_arguments(argv)
    started = time.time()
    threads = configure_threads()
    torch.manual_seed(args.seed)  # the diffusion timesteps and noise
    generator = torch.Generator().manual_seed(args.seed)  # the data order, shifts and condition drops
    if args.prepare:
        prepare_cache(args.cache)
        return
    designs = build_design_set(args.cache / "designs")
    text = prompt_vectors(designs, args.cache, torch.device(args.device))
    data = prepare_data(args, designs, text, generator)
    model, earlier = build_model(args)
    distillation = Distillation.load(args, data.held_ids) if args.distil_from else None
    params = sum(p.numel() for p in model.parameters())
    print(f"{args.role}: {params / 1e6:.2f}M parameters, {len(data.train_pictures)} training images", flush=True)
    optimizer = adamw(model, args.lr, args.weight_decay)
    trainer = Trainer(args, data, model, distillation, Schedule.respaced(TRAINING_STEPS), optimizer, generator)
    run = start_run(args, model, optimizer, generator)
    steps = trainer.train(run, started)
    write_role(args, model, training_record(args, trainer, run, steps, earlier, threads, started))


if __name__ == "__main__":
    main()
