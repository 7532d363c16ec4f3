"""Proof by measurement that a method samples exactly the AR distribution.

A toy model small enough to enumerate: 4 image tokens on a 2x2 grid with an end-of-row layout
slot after each row (5 positions), a random conditional distribution for every prefix, guidance
on and top-k below the vocabulary. Its exact joint distribution over all 4^4 images is computed
by enumeration; a method is run many times and the empirical joint distribution is compared with
a chi-square test (cells with small expected counts pooled) and by total-variation distance.
The toy session is the real `CachedSession` (guidance combination, layout forcing, commit and
rollback), over a cache that stores tokens instead of keys and values.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
from scipy.stats import chi2

from specviz.decoding.registry import get_method
from specviz.models.protocol import IMAGE_CELL, Geometry
from specviz.models.session import CachedSession, PromptRows
from specviz.models.settings import SamplingSettings

END_OF_ROW = 4
TOY_GEOMETRY = Geometry(rows=2, cols=2, vocab_size=5, layout=(IMAGE_CELL, IMAGE_CELL, END_OF_ROW) * 2)
TOY_SAMPLING = SamplingSettings(temperature=1.0, top_k=3, top_p=1.0, guidance_scale=2.0)
SIGNIFICANCE = 1e-3
# a window shorter than the sequence, so windows slide; groups and neighbourhoods that fit 4 tokens
TOY_PARAMETERS = {"window": 3, "neighbours": 2, "ranks_above": 1, "ranks_below": 1}
MIN_EXPECTED = 5.0


class TokenCache:
    """Stands in for a KV cache: remembers the tokens of each row; `crop(-n)` drops the last n."""

    def __init__(self, rows: int):
        self.tokens: list[list[int]] = [[] for _ in range(rows)]

    def crop(self, count: int) -> None:
        for row in self.tokens:
            del row[len(row) + count :]


class ToyModel:
    """A random 'model': independent logits for every (guidance row, prefix), fixed by a seed."""

    name = "toy"
    geometry = TOY_GEOMETRY
    default_sampling = TOY_SAMPLING
    device = torch.device("cpu")
    reference_generate = None

    def __init__(self, seed: int = 0, sharpness: float = 1.5):
        self.seed, self.sharpness = seed, sharpness
        self._table: dict[tuple, torch.Tensor] = {}
        # a 1-D "codebook": tokens 0-3 on a line, so each has near and far neighbours; the layout token far away
        self.token_vectors = torch.tensor([[0.0], [1.0], [2.5], [4.5], [1000.0]])

    def raw_logits(self, row: int, prefix: tuple[int, ...]) -> torch.Tensor:
        key = (row, prefix)
        if key not in self._table:
            generator = torch.Generator().manual_seed(hash((self.seed, *key)) & 0x7FFFFFFF)
            logits = torch.randn(self.geometry.vocab_size, generator=generator) * self.sharpness
            logits[END_OF_ROW] = float("-inf")  # image positions never emit the layout token
            self._table[key] = logits
        return self._table[key]

    def session(self, prompt: str, guidance_scale: float) -> CachedSession:
        rows = 1 if guidance_scale == 1.0 else 2
        cache = TokenCache(rows)

        def run(tokens: torch.Tensor, cache: TokenCache, mask: torch.Tensor | None, positions) -> torch.Tensor:
            if mask is not None:
                raise NotImplementedError("the toy model's token cache holds chains only, not draft trees")
            out = torch.empty(rows, tokens.shape[1], self.geometry.vocab_size)
            for row in range(rows):
                for i, token in enumerate(tokens[row].tolist()):
                    cache.tokens[row].append(token)
                    out[row, i] = self.raw_logits(row, tuple(cache.tokens[row]))
            return out

        prefill = torch.stack([self.raw_logits(row, ()) for row in range(rows)])
        return CachedSession(
            self.geometry, cache, PromptRows(0), prefill, run, guidance_scale, token_vectors=self.token_vectors
        )

    def exact_distribution(self, sampling: SamplingSettings) -> dict[tuple[int, ...], float]:
        """P(sequence) for every sequence the sampling settings allow, by enumeration."""
        cells = [i for i, entry in enumerate(self.geometry.layout) if entry == IMAGE_CELL]
        exact = {}
        for image in itertools.product(range(END_OF_ROW), repeat=len(cells)):
            sequence = list(self.geometry.layout)
            for position, token in zip(cells, image, strict=True):
                sequence[position] = token
            session = self.session("", sampling.guidance_scale)
            logits = torch.cat([session.next_logits[None], session.forward(torch.tensor(sequence[:-1]))])
            probs = sampling.probabilities(logits)
            probability = float(probs[torch.arange(len(sequence)), torch.tensor(sequence)].prod())
            if probability > 0:
                exact[tuple(sequence)] = probability
        return exact


@dataclass
class LosslessReport:
    method: str
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
            f"method={self.method} params={self.params} samples={self.samples} chi2={self.statistic:.1f} "
            f"dof={self.dof} p={self.p_value:.3g} tv={self.tv_distance:.4f} "
            f"outside_support={self.outside_support}: {verdict} at significance {SIGNIFICANCE}"
        )


def sample_sequences(
    model: ToyModel, method: str, params: dict, sampling: SamplingSettings, samples: int, seed: int
) -> list[tuple[int, ...]]:
    spec = get_method(method)
    params = spec.resolve(params)
    generator = torch.Generator().manual_seed(seed)
    sequences = []
    for _ in range(samples):
        session = model.session("", sampling.guidance_scale)
        tokens = [t for it in spec.iterate(session, sampling, generator, params) for t in it.committed]
        sequences.append(tuple(tokens))
    return sequences


def compare(
    exact: dict[tuple[int, ...], float], sequences: list[tuple[int, ...]]
) -> tuple[float, int, float, float, int]:
    """Chi-square statistic, degrees of freedom, p-value, TV distance, samples outside the support."""
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
    statistic = sum((o - e) ** 2 / e for o, e in zip(observed, expected, strict=True))
    dof = len(observed) - 1
    return statistic, dof, float(chi2.sf(statistic, dof)), tv, outside


def check_lossless(
    method: str,
    samples: int = 20_000,
    seed: int = 0,
    params: dict | None = None,
    sampling: SamplingSettings = TOY_SAMPLING,
    model: ToyModel | None = None,
) -> LosslessReport:
    model = model or ToyModel()
    spec = get_method(method)
    known = {name for name, _, _ in spec.parameters.fields()}
    toy_defaults = {k: v for k, v in TOY_PARAMETERS.items() if k in known}
    params = spec.resolve({**toy_defaults, **(params or {})})
    sequences = sample_sequences(model, method, params, sampling, samples, seed)
    statistic, dof, p_value, tv, outside = compare(model.exact_distribution(sampling), sequences)
    return LosslessReport(method, params.to_dict(), samples, statistic, dof, p_value, tv, outside)
