"""`check-model`: our AR on a user's weights against the family's own reference, before anything else runs.

A model's adapter builds the prompt, the guidance rows and the cached passes every method relies on; a wrong
token id or a cache slip changes every image without failing anything. So, on the weights at hand:
- **greedy**: our AR's first image tokens against greedy decoding by the family's uncached full passes
  (`specviz.models.reference`: the network's own forward of the whole sequence, no cache, no session), and
  against transformers' `generate()` where the family has one (its whole image);
- **sampled**: our AR's first image tokens against the same seeded draws from the uncached reference's
  distributions (the same generator stream as `ar`, so any gap in the distributions that matters shows as
  another token), and the largest total variation between our cached passes' distributions and the
  reference's along that sampled sequence.
It prints the prompt's token ids and both sides' first tokens, writes a grid of our images (and generate()'s),
and fails on any mismatch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch
from PIL import Image, ImageDraw

from specviz.core.settings import SamplingSettings
from specviz.decoding.runner import run
from specviz.models.protocol import IMAGE_CELL, ImageModel
from specviz.models.reference import reference_of, uncached_greedy, uncached_logits

SHOWN_TOKENS = 32
FLOAT32_TOLERANCE = 1e-4  # largest TV between cached and uncached passes in float32 (rounding alone)
HALF_TOLERANCE = 2e-2  # in bfloat16 or float16, where a cache's rounding differs from a full pass's
GRID_SIDE = 256  # pixels per image in the grid


@dataclass(frozen=True)
class Comparison:
    """Our first tokens against a reference's, as method ids, over the same sequence positions."""

    name: str
    ours: list[int]
    reference: list[int]
    note: str = ""

    @property
    def first_mismatch(self) -> int | None:
        return next((i for i, (a, b) in enumerate(zip(self.ours, self.reference, strict=False)) if a != b), None)

    @property
    def matches(self) -> bool:
        return self.first_mismatch is None and len(self.ours) == len(self.reference)


@dataclass
class ModelCheck:
    """What `check_model` found: the prompt's ids, each comparison, the largest TV and its tolerance."""

    prompt_ids: list[int] | str
    comparisons: list[Comparison]
    largest_tv: float
    tolerance: float
    images: dict[str, Image.Image]

    @property
    def passed(self) -> bool:
        return all(comparison.matches for comparison in self.comparisons) and self.largest_tv <= self.tolerance


def positions_for(model: ImageModel, image_tokens: int) -> int:
    """Sequence positions up to and including the `image_tokens`-th image cell (layout slots between them)."""
    seen = 0
    for position, entry in enumerate(model.geometry.layout):
        seen += entry == IMAGE_CELL
        if seen == image_tokens:
            return position + 1
    return model.geometry.seq_len


def describe_prompt(model: ImageModel, prompt: str) -> list[int] | str:
    """The token ids the model is conditioned on, where its prompt is ids; else what conditions it."""
    prompt_ids = getattr(model, "prompt_ids", None)
    if callable(prompt_ids):
        return prompt_ids(prompt)[0].tolist()
    tokenizer = getattr(model, "tokenizer", None)
    if getattr(model, "t2i", False) and tokenizer is not None:  # LlamaGen-T2I: the caption T5 reads
        from specviz.models.llamagen.caption import clean_caption

        cleaned = clean_caption(clean_caption(prompt))
        return f"T5 ids {tokenizer(cleaned).input_ids} of the cleaned caption {cleaned!r}"
    return f"the prompt {prompt!r}, embedded by the model's own text encoder or class table"


def sampled_reference(model: ImageModel, prompt: str, sampling: SamplingSettings, seed: int, count: int) -> list[int]:
    """The first `count` positions drawn as `ar` draws them (one multinomial per position from a generator
    seeded with `seed`), from the uncached reference's distributions; layout slots one-hot."""
    generator = torch.Generator(device=model.device).manual_seed(seed)
    vocab = model.geometry.vocab_size
    tokens: list[int] = []
    for entry in model.geometry.layout[:count]:
        if entry == IMAGE_CELL:
            logits = uncached_logits(model, prompt, sampling.guidance_scale, torch.tensor(tokens, dtype=torch.long))
            probs = sampling.probabilities(logits[-1].float())
        else:
            probs = torch.nn.functional.one_hot(torch.tensor(entry, device=model.device), vocab).float()
        tokens.append(int(torch.multinomial(probs, 1, generator=generator)))
    return tokens


@torch.inference_mode()
def largest_tv(model: ImageModel, prompt: str, sampling: SamplingSettings, tokens: list[int]) -> float:
    """The largest total variation, over the image positions of `tokens` (and the one after them), between
    our cached session's distributions and the uncached reference's, given `tokens` before each."""
    fed = torch.tensor(tokens[:-1], dtype=torch.long, device=model.device)
    session = model.session(prompt, sampling.guidance_scale)
    ours = torch.cat([session.next_logits[None], session.forward(fed)]).float()
    theirs = uncached_logits(model, prompt, sampling.guidance_scale, fed.cpu()).float().to(ours.device)
    image = torch.tensor(model.geometry.layout[: len(ours)], device=ours.device) == IMAGE_CELL
    distance = 0.5 * (sampling.probabilities(ours[image]) - sampling.probabilities(theirs[image])).abs().sum(-1)
    return float(distance.max())


def generate_comparison(model: ImageModel, prompt: str, sampling: SamplingSettings, seed: int):
    """Our greedy AR against transformers' generate() on the whole image, where the family has one: at the
    model's guidance, or without guidance where its generate() takes none. None where it has none."""
    reference = getattr(model, "reference_generate", None)
    if not callable(reference):
        return None, None
    for scale in dict.fromkeys((sampling.guidance_scale, 1.0, 2.0)):
        greedy = dataclasses.replace(sampling, temperature=0.0, guidance_scale=scale)
        try:
            theirs = reference(prompt, greedy, seed)
        except ValueError:  # this family's generate() refuses this guidance
            continue
        ours = run(model, "ar", prompt, seed, greedy).tokens
        note = f"whole image, guidance {scale:g}"
        return Comparison("greedy vs transformers generate()", ours, theirs, note), model.decode(theirs)
    return None, None


def check_model(model: ImageModel, prompt: str, seed: int = 0, shown: int = SHOWN_TOKENS) -> ModelCheck:
    """Run every comparison of the module's docstring on `model`; nothing is printed."""
    if reference_of(model) is None:
        raise ValueError(f"{model.name} has no uncached reference to check against")
    sampling = model.default_sampling
    greedy = dataclasses.replace(sampling, temperature=0.0)
    count = positions_for(model, shown)
    ours_greedy = run(model, "ar", prompt, seed, greedy)
    ours_sampled = run(model, "ar", prompt, seed, sampling)
    comparisons = [
        Comparison(
            "greedy vs uncached passes",
            ours_greedy.tokens[:count],
            uncached_greedy(model, prompt, greedy.guidance_scale, count),
        ),
        Comparison(
            "sampled vs uncached passes",
            ours_sampled.tokens[:count],
            sampled_reference(model, prompt, sampling, seed, count),
            f"seed {seed}",
        ),
    ]
    images = {"ours, greedy": model.decode(ours_greedy.tokens), "ours, sampled": model.decode(ours_sampled.tokens)}
    generated, picture = generate_comparison(model, prompt, sampling, seed)
    if generated is not None:
        comparisons.append(generated)
        images["generate(), greedy"] = picture
    tolerance = FLOAT32_TOLERANCE if model_dtype(model) == torch.float32 else HALF_TOLERANCE
    tv = largest_tv(model, prompt, sampling, ours_sampled.tokens[:count])
    return ModelCheck(describe_prompt(model, prompt), comparisons, tv, tolerance, images)


def model_dtype(model: ImageModel) -> torch.dtype:
    """The dtype of the model's main network (float32 where it has none to ask)."""
    for name in ("network", "gpt"):
        network = getattr(model, name, None)
        if isinstance(network, torch.nn.Module):
            return next(network.parameters()).dtype
    return torch.float32


def image_ids(model: ImageModel, tokens: list[int]) -> list[int]:
    """The tokens at image cells only (layout slots left out), as the report shows them."""
    return [token for token, entry in zip(tokens, model.geometry.layout, strict=False) if entry == IMAGE_CELL]


def report_lines(model: ImageModel, check: ModelCheck) -> list[str]:
    """What `check-model` prints: the prompt's ids, each comparison's first tokens and verdict, the TV."""
    lines = [f"model {model.name}, prompt ids: {check.prompt_ids}"]
    for comparison in check.comparisons:
        ours, theirs = image_ids(model, comparison.ours), image_ids(model, comparison.reference)
        at = comparison.first_mismatch
        verdict = "match" if comparison.matches else f"MISMATCH at sequence position {at}"
        note = f" ({comparison.note})" if comparison.note else ""
        lines += [
            f"{comparison.name}{note}: {verdict}",
            f"  ours      {ours[:SHOWN_TOKENS]}",
            f"  reference {theirs[:SHOWN_TOKENS]}",
        ]
    within = "within" if check.largest_tv <= check.tolerance else "ABOVE"
    lines.append(
        f"largest TV, cached against uncached passes along the sampled tokens: {check.largest_tv:.2e} "
        f"({within} the tolerance {check.tolerance:.0e} of {str(model_dtype(model)).removeprefix('torch.')})"
    )
    lines.append("PASSED" if check.passed else "FAILED: our AR does not reproduce the family's reference")
    return lines


def write_grid(images: dict[str, Image.Image], path: Path) -> None:
    """The images side by side, each labelled, nearest-neighbour scaled to GRID_SIDE pixels high."""
    scaled = {
        label: image.convert("RGB").resize((GRID_SIDE * image.width // image.height, GRID_SIDE), Image.NEAREST)
        for label, image in images.items()
    }
    label_height = 20
    grid = Image.new("RGB", (sum(image.width for image in scaled.values()), GRID_SIDE + label_height), "white")
    draw, x = ImageDraw.Draw(grid), 0
    for label, image in scaled.items():
        grid.paste(image, (x, label_height))
        draw.text((x + 4, 4), label, fill="black")
        x += image.width
    grid.save(path)
