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

Every toy's session is the real `CachedSession` (guidance combination, layout forcing, commit and
rollback). Greedy decoding has a single outcome: it passes when every sample is that outcome.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import torch
from scipy.stats import chi2
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from specviz.decoding.registry import get_method
from specviz.lossless_toys import TOY_DESCRIPTIONS
from specviz.models.draft_head import DraftHead
from specviz.models.protocol import IMAGE_CELL, Geometry
from specviz.models.session import CachedSession, PromptRows, image_head, transformers_mask
from specviz.models.settings import SamplingSettings

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
}


def rows_with_end_slots(rows: int, cols: int, image_tokens: int) -> Geometry:
    """A grid whose every row ends with a forced layout token (id `image_tokens`)."""
    return Geometry(rows, cols, image_tokens + 1, ((IMAGE_CELL,) * cols + (image_tokens,)) * rows)


class TokenCache:
    """Stands in for a KV cache: remembers the tokens of each row; `crop(-n)` drops the last n."""

    def __init__(self, rows: int):
        self.tokens: list[list[int]] = [[] for _ in range(rows)]

    def crop(self, count: int) -> None:
        for row in self.tokens:
            del row[len(row) + count :]

    def gather_path(self, start: int, source: list[int]) -> None:
        """Keep the tokens at `source` (a tree path) in the slots from `start` on, as a KV cache gathers."""
        for row in self.tokens:
            row[start : start + len(source)] = [row[index] for index in source]


class ToyModel:
    """A random 'model': independent logits for every (guidance row, prefix), fixed by a seed."""

    name = "toy"
    device = torch.device("cpu")
    reference_generate = None

    def __init__(
        self,
        seed: int = 0,
        sharpness: float = 1.5,
        geometry: Geometry | None = None,
        sampling: SamplingSettings | None = None,
        window: int = 3,
    ):
        self.seed, self.sharpness, self.window = seed, sharpness, window
        self.geometry = geometry or rows_with_end_slots(2, 2, 4)
        self.default_sampling = sampling or SamplingSettings(temperature=1.0, top_k=3, top_p=1.0, guidance_scale=2.0)
        self.layout_token = self.geometry.vocab_size - 1
        self._table: dict[tuple, torch.Tensor] = {}
        # a 1-D "codebook": image tokens on a line at uneven gaps, so each has near and far neighbours;
        # the layout token far away
        image = torch.tensor([0.0, 1.0, 2.5, 4.5, 7.0, 10.0])[: self.layout_token, None]
        self.token_vectors = torch.cat([image, torch.tensor([[1000.0]])])

    def raw_logits(self, row: int, prefix: tuple[int, ...]) -> torch.Tensor:
        key = (row, prefix)
        if key not in self._table:
            generator = torch.Generator().manual_seed(hash((self.seed, *key)) & 0x7FFFFFFF)
            logits = torch.randn(self.geometry.vocab_size, generator=generator) * self.sharpness
            logits[self.layout_token] = float("-inf")  # image positions never emit the layout token
            self._table[key] = logits
        return self._table[key]

    def session(self, prompt: str, guidance_scale: float) -> CachedSession:
        rows = 1 if guidance_scale == 1.0 else 2
        cache = TokenCache(rows)

        def run(tokens: torch.Tensor, cache: TokenCache, mask: torch.Tensor | None, positions) -> torch.Tensor:
            """A chain, or a draft tree (mask given): each new token continues the committed tokens and its
            ancestors among the new ones (the mask's last columns)."""
            count = tokens.shape[1]
            out = torch.empty(rows, count, self.geometry.vocab_size)
            for row in range(rows):
                committed, new = cache.tokens[row], tokens[row].tolist()
                for i in range(count):
                    seen = range(i + 1) if mask is None else mask[row, 0, i, -count:].nonzero().flatten().tolist()
                    out[row, i] = self.raw_logits(row, (*committed, *(new[j] for j in seen)))
                committed.extend(new)
            return out

        prefill = torch.stack([self.raw_logits(row, ()) for row in range(rows)])
        return CachedSession(
            self.geometry, cache, PromptRows(0), prefill, run, guidance_scale, token_vectors=self.token_vectors
        )


class LlamaToyModel:
    """The toy geometry over a real `LlamaForCausalLM` with random weights and a real `DynamicCache`.

    Its vocabulary is the image tokens, the layout token and two prompt tokens: the conditional row's
    prompt is one token, the unconditional row's the other. Deterministic for a seed.
    """

    name = "toy-llama"
    device = torch.device("cpu")
    reference_generate = None
    window = 3

    def __init__(self, seed: int = 0, geometry: Geometry | None = None, sampling: SamplingSettings | None = None):
        self.geometry = geometry or rows_with_end_slots(2, 2, 4)
        self.default_sampling = sampling or SamplingSettings(temperature=0.8, top_k=None, top_p=0.9, guidance_scale=2.0)
        vocab = self.geometry.vocab_size
        config = LlamaConfig(
            vocab_size=vocab + 2,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=64,
            tie_word_embeddings=False,
            attn_implementation="sdpa",
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.lm = LlamaForCausalLM(config).eval().requires_grad_(False)
            for parameter in self.lm.parameters():  # far from uniform, so the test has something to find
                if parameter.dim() == 2:
                    parameter.normal_(0.0, 0.2)
        self.prompt_tokens = (vocab, vocab + 1)
        self.head = image_head(self.lm.lm_head.weight[: vocab - 1], layout_tokens=1)
        codes = torch.linspace(0.0, 1.0, vocab - 1)[:, None]
        self.token_vectors = torch.cat([codes, torch.tensor([[1000.0]])])
        with torch.random.fork_rng(devices=[]):  # an untrained EAGLE head: poor drafts, still exact output
            torch.manual_seed(seed + 1)
            self.draft_head = DraftHead.sized_for(self.lm.config, self.lm.model.embed_tokens, self.head).eval()

    @torch.inference_mode()
    def session(self, prompt: str, guidance_scale: float) -> CachedSession:
        decoder = self.lm.model
        rows = self.prompt_tokens[: 1 if guidance_scale == 1.0 else 2]
        cache = DynamicCache(config=self.lm.config)
        ids = torch.tensor(rows)[:, None]
        hidden = decoder(input_ids=ids, past_key_values=cache, use_cache=True).last_hidden_state

        def run(
            tokens: torch.Tensor, cache: DynamicCache, mask: torch.Tensor | None, positions
        ) -> tuple[torch.Tensor, torch.Tensor]:
            attention = transformers_mask(mask, self.lm.config, self.lm.dtype)
            out = decoder(
                input_ids=tokens,
                attention_mask=attention,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
            )
            return self.head(out.last_hidden_state), out.last_hidden_state

        return CachedSession(
            self.geometry,
            cache,
            PromptRows(1),
            self.head(hidden[:, -1]),
            run,
            guidance_scale,
            token_vectors=self.token_vectors,
            draft_head=self.draft_head,
            prefill_features=hidden[:, -1],
        )


_BUILDERS: dict[str, Callable[[], ToyModel | LlamaToyModel]] = {
    "short": ToyModel,
    "long": lambda: ToyModel(
        sharpness=1.0,
        geometry=rows_with_end_slots(2, 3, 3),
        sampling=SamplingSettings(temperature=1.0, top_k=2, top_p=1.0, guidance_scale=2.0),
        window=4,
    ),
    "llama": LlamaToyModel,
}
TOYS = {name: _BUILDERS[name] for name in TOY_DESCRIPTIONS}  # the toys the command line offers, each built here


def exact_distribution(model, sampling: SamplingSettings) -> dict[tuple[int, ...], float]:
    """P(sequence) under AR for every sequence the sampling settings allow, by enumeration: one pass of
    the model's own session over each whole sequence gives every position's distribution."""
    layout = model.geometry.layout
    cells = [i for i, entry in enumerate(layout) if entry == IMAGE_CELL]
    image_tokens = min(entry for entry in layout if entry != IMAGE_CELL)
    exact = {}
    with torch.inference_mode():
        for image in itertools.product(range(image_tokens), repeat=len(cells)):
            sequence = list(layout)
            for position, token in zip(cells, image, strict=True):
                sequence[position] = token
            session = model.session("", sampling.guidance_scale)
            logits = torch.cat([session.next_logits[None], session.forward(torch.tensor(sequence[:-1]))])
            probs = sampling.probabilities(logits)
            probability = float(probs[torch.arange(len(sequence)), torch.tensor(sequence)].prod())
            if probability > 0:
                exact[tuple(sequence)] = probability
    return exact


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
    generator = torch.Generator().manual_seed(seed)
    sequences = []
    with torch.inference_mode():
        for _ in range(samples):
            session = model.session("", sampling.guidance_scale)
            spec.prepare(session, params)
            tokens = [t for it in spec.iterate(session, sampling, generator, params) for t in it.committed]
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
) -> LosslessReport:
    """Sample `samples` sequences with `method` from a toy (at its own sampling settings, or greedy)
    and compare them with the toy's exact AR distribution."""
    if toy not in TOYS:
        raise ValueError(f"unknown toy {toy!r}; choose one of {', '.join(TOYS)}")
    model = TOYS[toy]()
    sampling = model.default_sampling
    if greedy:
        sampling = SamplingSettings(**{**sampling.to_dict(), "temperature": 0.0})
    spec = get_method(method)
    known = {name for name, _, _ in spec.parameters.fields()}
    toy_defaults = {k: v for k, v in {**TOY_PARAMETERS, "window": model.window}.items() if k in known}
    params = spec.resolve({**toy_defaults, **(params or {})})
    sequences = sample_sequences(model, method, params, sampling, samples, seed)
    statistic, dof, p_value, tv, outside = compare(exact_distribution(model, sampling), sequences)
    return LosslessReport(method, toy, params.to_dict(), samples, statistic, dof, p_value, tv, outside)
