"""Toy models small enough to enumerate, behind the same session protocol as the real families.

`specviz.measure.lossless` samples them to prove a method exact. Each toy is a handful of image tokens on a
small grid with an end-of-row layout slot after each row, guidance on and top-k below the vocabulary:

- `ToyModel`: an independent random conditional for every (guidance row, prefix). Its cache is a real
  `DynamicCache` whose keys hold the token ids, so the session crops and gathers it exactly as it does
  a transformer's, and the logits of a pass depend on what the cache holds, not on what the session
  believes it holds.
- `LlamaToyModel`: a real transformers `LlamaForCausalLM` (random weights) with a real `DynamicCache`:
  cache cropping, path commits and tree masks go through real attention.

Both also give `reference_raw_logits(sequence)`: every position's raw logits for a whole sequence
without any cache or session (one uncached full forward per guidance row), so the exactness
reference does not run through the code it checks.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from specviz.core.settings import SamplingSettings
from specviz.models.networks.draft_head import DraftHead
from specviz.models.protocol import IMAGE_CELL, Geometry
from specviz.models.session import CachedSession, PromptRows, cache_keyword, image_head, transformers_mask
from specviz.models.toys import TOY_DESCRIPTIONS

GUIDANCE_ROWS = 2  # row 0 conditional, row 1 unconditional


def rows_with_end_slots(rows: int, cols: int, image_tokens: int) -> Geometry:
    """A grid whose every row ends with a forced layout token (id `image_tokens`)."""
    return Geometry(rows, cols, image_tokens + 1, ((IMAGE_CELL,) * cols + (image_tokens,)) * rows)


def cached_tokens(cache: DynamicCache, row: int) -> list[tuple[int, int]]:
    """(sequence position, token id) of every entry a `ToyModel` cache holds for `row`, in cache order:
    its keys hold the ids, its values the positions."""
    if not cache.layers or cache.layers[0].keys is None or cache.get_seq_length() == 0:
        return []
    layer = cache.layers[0]
    return list(zip(layer.values[row, 0, :, 0].long().tolist(), layer.keys[row, 0, :, 0].long().tolist(), strict=True))


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

    def reference_raw_logits(self, sequence: list[int]) -> torch.Tensor:
        """(2, len(sequence), V): each position's raw logits given the tokens before it, per row."""
        return torch.stack(
            [
                torch.stack([self.raw_logits(row, tuple(sequence[:i])) for i in range(len(sequence))])
                for row in range(GUIDANCE_ROWS)
            ]
        )

    def session(self, prompt: str, guidance_scale: float) -> CachedSession:
        rows = 1 if guidance_scale == 1.0 else GUIDANCE_ROWS

        def run(tokens: torch.Tensor, cache: DynamicCache, mask: torch.Tensor | None, positions) -> torch.Tensor:
            """Each new token sees what the mask lets it see (a chain without one: everything cached and the
            new tokens up to itself); its conditional is the one of the tokens it sees, in the order of their
            positions (a raster prefix: its tokens alone, as `reference_raw_logits` keys them; tokens out of
            raster order, as ZipAR feeds them: their positions too). The new tokens join the cache."""
            count = tokens.shape[1]
            held = cache.get_seq_length() if cache.layers and cache.layers[0].keys is not None else 0
            if positions is None:
                positions = torch.arange(held, held + count)[None].expand(rows, -1)
            out = torch.empty(rows, count, self.geometry.vocab_size)
            for row in range(rows):
                new = list(zip(positions[row].tolist(), tokens[row].tolist(), strict=True))
                entries = cached_tokens(cache, row) + new
                for i in range(count):
                    sees = range(held + i + 1) if mask is None else mask[row, 0, i].nonzero().flatten().tolist()
                    seen = sorted(entries[j] for j in sees)
                    in_raster = [position for position, _ in seen] == list(range(len(seen)))
                    out[row, i] = self.raw_logits(row, tuple(token for _, token in seen) if in_raster else tuple(seen))
            cache.update(tokens.float()[:, None, :, None], positions.float()[:, None, :, None], 0)
            return out

        prefill = torch.stack([self.raw_logits(row, ()) for row in range(rows)])
        return CachedSession(
            self.geometry, DynamicCache(), PromptRows(0), prefill, run, guidance_scale, token_vectors=self.token_vectors
        )


class LlamaToyModel:
    """The toy geometry over a real `LlamaForCausalLM` with random weights and a real `DynamicCache`.

    Its vocabulary is the image tokens, the layout token and two prompt tokens: the conditional row's
    prompt is one token, the unconditional row's the other. Deterministic for a seed.
    """

    name = "toy-llama"
    reference_generate = None
    window = 3

    def __init__(
        self,
        seed: int = 0,
        geometry: Geometry | None = None,
        sampling: SamplingSettings | None = None,
        device: torch.device | str = "cpu",
    ):
        """Weights drawn on the CPU for `seed`, then moved to `device`: the same network everywhere."""
        self.device = torch.device(device)
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
        self.lm.to(self.device)
        self.prompt_tokens = (vocab, vocab + 1)
        self.head = image_head(self.lm.lm_head.weight[: vocab - 1], layout_tokens=1)
        codes = torch.linspace(0.0, 1.0, vocab - 1)[:, None]
        self.token_vectors = torch.cat([codes, torch.tensor([[1000.0]])]).to(self.device)
        with torch.random.fork_rng(devices=[]):  # an untrained EAGLE head: poor drafts, still exact output
            torch.manual_seed(seed + 1)
            head = DraftHead.sized_for(self.lm.config, self.lm.model.embed_tokens, self.head)
        self.draft_head = head.eval().to(self.device)

    @torch.inference_mode()
    def reference_raw_logits(self, sequence: list[int]) -> torch.Tensor:
        """(2, len(sequence), V): each row's prompt token then the sequence, one uncached causal forward."""
        ids = torch.tensor([[prompt, *sequence[:-1]] for prompt in self.prompt_tokens], device=self.device)
        return self.head(self.lm.model(input_ids=ids, use_cache=False).last_hidden_state)

    @torch.inference_mode()
    def session(self, prompt: str, guidance_scale: float) -> CachedSession:
        decoder = self.lm.model
        rows = self.prompt_tokens[: 1 if guidance_scale == 1.0 else GUIDANCE_ROWS]
        cache = DynamicCache(config=self.lm.config)
        ids = torch.tensor(rows, device=self.device)[:, None]
        hidden = decoder(input_ids=ids, **cache_keyword(decoder, cache), use_cache=True).last_hidden_state

        def run(
            tokens: torch.Tensor, cache: DynamicCache, mask: torch.Tensor | None, positions
        ) -> tuple[torch.Tensor, torch.Tensor]:
            attention = transformers_mask(mask, self.lm.config, self.lm.dtype)
            out = decoder(
                input_ids=tokens,
                attention_mask=attention,
                position_ids=positions,
                **cache_keyword(decoder, cache),
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
