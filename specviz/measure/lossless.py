"""Proof by measurement that a method samples exactly the AR distribution.

Toy models small enough to enumerate: a handful of image tokens on a small grid with an end-of-row
layout slot after each row, guidance on and top-k below the vocabulary. Their exact joint
distribution over every image is computed by enumeration; a method is run many times and the
empirical joint distribution is compared with a chi-square test (cells with small expected counts
pooled) and by total-variation distance. Three toys (`TOYS`):

- `short`: 4 image tokens on a 2 x 2 grid (6 positions), an independent random conditional for every
  prefix; the window of 3 slides over it. The power tests run here.
- `long`: 3 image tokens on a 2 x 3 grid (8 positions) at top-k 2 and a window of 4, so drafts are
  carried through two or more passes before they are fixed (about one per run; with a window of 3
  the row-end slots, always accepted, make that all but impossible).
- `llama`: the short toy's geometry over a real transformers `LlamaForCausalLM` (random weights) with
  a real `DynamicCache`, sampled at temperature 0.8, top-p 0.9 and guidance 2: cache cropping, path
  commits and tree masks go through real attention.

The toys (`specviz.models.toys.discrete`) run methods through the real `CachedSession` (guidance combination,
layout forcing, commit, rollback, cache cropping and path gathers). The reference does not: it takes
each sequence's raw logits from one uncached full forward per guidance row, and guidance, layout
forcing, temperature, top-k and top-p are written out once here, in float64, so a bug in the session
or in `SamplingSettings` shows up as a difference instead of cancelling on both sides. Greedy
decoding has a single outcome: it passes when every sample is that outcome.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import torch
from scipy.stats import chi2

from specviz.core.settings import SamplingSettings
from specviz.decoding.registry import get_method
from specviz.models.protocol import IMAGE_CELL, in_raster_order
from specviz.models.toys.discrete import TOYS

SIGNIFICANCE = 1e-3
MIN_EXPECTED = 5.0
# groups, neighbourhoods and trees that fit the toys (trees reach depth 3 and width 2, PEANUT's
# controller moves between depth 1-3 and top-k 1-3); each toy sets a window shorter than its sequence
TOY_PARAMETERS = {
    "neighbours": 2,
    "ranks_above": 1,
    "ranks_below": 1,
    "tree_depth": 3,
    "tree_top_k": 2,
    "tree_tokens": 6,
    "depth_max": 4,
    "top_k_min": 0,
    "top_k_max": 4,
    "top_k_step": 1,
    "window_size": 1,  # ZipAR: a row starts after the first cell of the row above (2 and 3 cells a row here)
}


def reference_guidance(raw: torch.Tensor, scale: float) -> torch.Tensor:
    """Classifier-free guidance on (2, V) raw logits: uncond + scale (cond - uncond); a token masked in
    either row stays masked. Scale 1 is the conditional row alone."""
    cond, uncond = raw[0].double(), raw[1].double()
    if scale == 1.0:
        return cond
    masked = torch.isinf(cond) | torch.isinf(uncond)
    return torch.where(masked, float("-inf"), uncond + scale * (cond - uncond))


def reference_probabilities(logits: torch.Tensor, sampling: SamplingSettings) -> torch.Tensor:
    """(V,) float64 probabilities of one position: greedy, or temperature, then the top-k largest, then
    the smallest set of most likely tokens whose mass reaches top-p."""
    order = logits.argsort(descending=True)
    keep = torch.zeros(len(logits), dtype=torch.bool)
    if sampling.greedy:
        keep[order[0]] = True
        return keep.double()
    scaled = logits / sampling.temperature
    ranked = order[: sampling.top_k] if sampling.top_k is not None else order
    weights = torch.exp(scaled[ranked] - scaled[ranked[0]])
    mass = weights / weights.sum()
    kept = 0
    while kept < len(ranked) and (kept == 0 or mass[:kept].sum() < sampling.top_p):
        kept += 1
    keep[ranked[:kept]] = True
    weights = torch.where(keep, torch.exp(scaled - scaled[order[0]]), 0.0)
    return weights / weights.sum()


def exact_distribution(model, sampling: SamplingSettings) -> dict[tuple[int, ...], float]:
    """P(sequence) under AR for every sequence the sampling settings allow, by enumeration, from the
    model's uncached raw logits (`reference_raw_logits`), never its session."""
    layout = model.geometry.layout
    cells = [i for i, entry in enumerate(layout) if entry == IMAGE_CELL]
    image_tokens = min(entry for entry in layout if entry != IMAGE_CELL)
    exact = {}
    with torch.inference_mode():
        for image in itertools.product(range(image_tokens), repeat=len(cells)):
            sequence = list(layout)
            for position, token in zip(cells, image, strict=True):
                sequence[position] = token
            raw = model.reference_raw_logits(sequence).cpu()  # the reference is computed on the CPU, in float64
            probability = 1.0  # layout slots are forced: their token has probability one
            for position in cells:
                guided = reference_guidance(raw[:, position], sampling.guidance_scale)
                probability *= float(reference_probabilities(guided, sampling)[sequence[position]])
            if probability > 0:
                exact[tuple(sequence)] = probability
    return exact


@functools.cache
def _exact_for_toy(toy: str, device: str, sampling: tuple) -> dict[tuple[int, ...], float]:
    """A toy's exact distribution, enumerated once per process for each setting: the toys are fixed by their
    seed, and a suite checks dozens of methods against the same few distributions."""
    model = TOYS[toy](device=device) if toy == "llama" else TOYS[toy]()
    return exact_distribution(model, SamplingSettings(**dict(sampling)))


@dataclass
class LosslessReport:
    method: str
    toy: str
    params: dict
    samples: int
    statistic: float
    dof: int
    p_value: float
    tv_distance: float
    outside_support: int

    @property
    def matches(self) -> bool:
        return self.outside_support == 0 and self.p_value >= SIGNIFICANCE

    def summary(self) -> str:
        verdict = "matches AR" if self.matches else "DIFFERS from AR"
        return (
            f"method={self.method} toy={self.toy} params={self.params} samples={self.samples} "
            f"chi2={self.statistic:.1f} dof={self.dof} p={self.p_value:.3g} tv={self.tv_distance:.4f} "
            f"outside_support={self.outside_support}: {verdict} at significance {SIGNIFICANCE}"
        )


def sample_sequences(
    model, method: str, params: dict, sampling: SamplingSettings, samples: int, seed: int
) -> list[tuple[int, ...]]:
    spec = get_method(method)
    params = spec.resolve(params)
    generator = torch.Generator(device=model.device).manual_seed(seed)  # the device's own random stream
    # a method that decides positions out of raster order commits them in its own order: ZipAR's is fixed, PJD's
    # records name theirs
    order = None if spec.reorder is None else spec.reorder(model.geometry, params).order
    sequences = []
    with torch.inference_mode():
        for _ in range(samples):
            session = model.session("", sampling.guidance_scale)
            spec.prepare(session, params)
            records = list(spec.iterate(session, sampling, generator, params))
            tokens = [t for it in records for t in it.committed]
            if spec.order_as_it_runs:
                order = model.geometry.in_decision_order([p for it in records for p in it.positions]).order
            if order is not None:
                tokens, _ = in_raster_order(model.geometry, tokens, order)
            sequences.append(tuple(tokens))
    return sequences


def compare(
    exact: dict[tuple[int, ...], float], sequences: list[tuple[int, ...]]
) -> tuple[float, int, float, float, int]:
    """Chi-square statistic, degrees of freedom, p-value, TV distance, samples outside the support.

    With a single outcome (greedy) or a single pooled cell there is nothing to test but the support:
    the p-value is 1 when every sample lies in it, else 0.
    """
    n = len(sequences)
    counts: dict[tuple[int, ...], int] = {}
    for sequence in sequences:
        counts[sequence] = counts.get(sequence, 0) + 1
    outside = sum(c for s, c in counts.items() if s not in exact)
    tv = 0.5 * (sum(abs(counts.get(s, 0) / n - p) for s, p in exact.items()) + outside / n)
    observed, expected, pooled_observed, pooled_expected = [], [], 0.0, 0.0
    for sequence, probability in exact.items():
        if probability * n >= MIN_EXPECTED:
            observed.append(counts.get(sequence, 0))
            expected.append(probability * n)
        else:
            pooled_observed += counts.get(sequence, 0)
            pooled_expected += probability * n
    if pooled_expected > 0:
        observed.append(pooled_observed)
        expected.append(pooled_expected)
    dof = len(observed) - 1
    if dof == 0:
        return 0.0, 0, 1.0 if outside == 0 else 0.0, tv, outside
    statistic = sum((o - e) ** 2 / e for o, e in zip(observed, expected, strict=True))
    return statistic, dof, float(chi2.sf(statistic, dof)), tv, outside


def check_lossless(
    method: str,
    samples: int = 20_000,
    seed: int = 0,
    params: dict | None = None,
    toy: str = "short",
    greedy: bool = False,
    device: str = "cpu",
) -> LosslessReport:
    """Sample `samples` sequences with `method` from a toy (at its own sampling settings, or greedy)
    and compare them with the toy's exact AR distribution. `device` (the `llama` toy only) runs the
    network and draws every random number on that device."""
    if toy not in TOYS:
        raise ValueError(f"unknown toy {toy!r}; choose one of {', '.join(TOYS)}")
    if device != "cpu" and toy != "llama":
        raise ValueError(f"the {toy} toy runs on the CPU; the llama toy runs on any device")
    model = TOYS[toy](device=device) if toy == "llama" else TOYS[toy]()
    sampling = model.default_sampling
    if greedy:
        sampling = SamplingSettings(**{**sampling.to_dict(), "temperature": 0.0})
    spec = get_method(method)
    known = {name for name, _, _ in spec.parameters.fields()}
    toy_defaults = {k: v for k, v in {**TOY_PARAMETERS, "window": model.window}.items() if k in known}
    params = spec.resolve({**toy_defaults, **(params or {})})
    sequences = sample_sequences(model, method, params, sampling, samples, seed)
    exact = _exact_for_toy(toy, device, tuple(sampling.to_dict().items()))
    statistic, dof, p_value, tv, outside = compare(exact, sequences)
    return LosslessReport(method, toy, params.to_dict(), samples, statistic, dof, p_value, tv, outside)
