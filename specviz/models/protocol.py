"""The small protocol every model family implements, so decoding methods never see model specifics.

A *sequence position* is one generated token. Most positions are image-grid cells; some families
(Emu3, Lumina-mGPT) put a layout token (end of row) at fixed positions. The adapter forces those
with a one-hot distribution, so every method treats them as slots that are always accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

import numpy as np
import torch
from PIL import Image

from specviz.core.errors import UnsupportedMethod
from specviz.core.settings import SamplingSettings

IMAGE_CELL = -1  # layout entry of a position that holds an image token
BLANK = 224  # grey of cells not generated yet, visible against the emoji's white background


@dataclass(frozen=True)
class Geometry:
    """The token grid and the layout of the generated sequence.

    `vocab_size` is the size of the token space methods sample in (image codes, plus layout tokens
    where the family has them). `layout[i]` is IMAGE_CELL or the token forced at position i.
    `order[i]`, where given, is the raster cell of position i: a model that generates the grid in a
    random order (MAR) draws one per image, so its sessions carry their own geometry.
    """

    rows: int
    cols: int
    vocab_size: int
    layout: tuple[int, ...]
    order: tuple[int, ...] | None = None

    @classmethod
    def plain_grid(cls, rows: int, cols: int, vocab_size: int) -> Geometry:
        return cls(rows, cols, vocab_size, (IMAGE_CELL,) * (rows * cols))

    @property
    def seq_len(self) -> int:
        return len(self.layout)

    def in_decision_order(self, positions: Sequence[int]) -> Geometry:
        """This raster geometry with its positions listed in the order a method decides them: `positions`
        first (all of them, or those decided so far), then the rest in raster order, each with its grid
        cell (`order`, -1 for a layout slot) and its layout entry."""
        if self.order is not None:
            raise ValueError("a decision order lists the positions of a raster grid; this one has its own order")
        listed = [*positions, *sorted(set(range(self.seq_len)) - set(positions))]
        cells = self.cell_of_position()
        return replace(
            self, layout=tuple(self.layout[position] for position in listed), order=tuple(cells[p] for p in listed)
        )

    def positions_in(self, order: Sequence[int]) -> list[int]:
        """The raster positions a decision order of this geometry lists (its cells, and -1 for each layout
        slot, taken in raster order): what `in_decision_order` was given."""
        cells = self.cell_of_position()
        position_of_cell = {cell: position for position, cell in enumerate(cells) if cell >= 0}
        slots = iter(position for position, cell in enumerate(cells) if cell < 0)
        return [position_of_cell[cell] if cell >= 0 else next(slots) for cell in order]

    def cell_of_position(self) -> list[int]:
        """Raster grid cell of each sequence position, or -1 for a layout slot."""
        if self.order is not None:
            return list(self.order)
        cells, next_cell = [], 0
        for entry in self.layout:
            if entry == IMAGE_CELL:
                cells.append(next_cell)
                next_cell += 1
            else:
                cells.append(-1)
        return cells


@runtime_checkable
class Session(Protocol):
    """One generation in progress: a prompt prefilled and a committed prefix of generated tokens.

    - `position`: number of committed generated tokens, i.e. the position `next_logits` predicts.
    - `next_logits`: (V,) logits for position `position`, given the committed prefix.
    - `forward(tokens)`: appends n tokens after the committed prefix (discarding anything appended
      earlier and not committed) and returns (n, V) logits: row i is the distribution of position
      `position + i + 1` given the prefix and tokens[: i + 1]. Guidance is already combined and layout
      slots are one-hot. One model pass.
    - `forward(tokens, parents)`: the same for a draft tree: `parents[i]` is the index of token i's
      parent in `tokens` (parents before children), or -1 for a child of the committed prefix. Token i
      at depth d (d = 0 when its parent is -1) sits at position `position + d`, sees the prefix and its
      ancestors only, and row i is the distribution of position `position + d + 1`.
    - `commit(keep)`: an int keeps the first `keep` tokens of the last `forward` (`commit(0)` is a
      rollback); a sequence of indices keeps that root-to-node path of its tree, in order. Everything
      else leaves the cache; `position` advances by the number kept and `next_logits` becomes the
      row of the last kept token.
    - `nfe`: model passes so far, the prefill included.
    - `token_vectors`: (V, D) codebook vectors, layout tokens far from every code, for LANTERN and
      GSD; None where the model has none.
    """

    geometry: Geometry
    position: int
    nfe: int
    token_vectors: torch.Tensor | None

    @property
    def next_logits(self) -> torch.Tensor: ...

    def forward(self, tokens: torch.Tensor, parents: Sequence[int] | torch.Tensor | None = None) -> torch.Tensor: ...

    def commit(self, keep: int | Sequence[int] | torch.Tensor) -> None: ...


def capabilities(session: Session) -> frozenset[str]:
    """What a session offers beyond the protocol's core, read from its declared fields: `token_vectors`
    (the codebook) and `draft_head` (a trained EAGLE head, with `prefill_features`, `features` after
    every forward, and `guidance_scale`). A drafter names the capabilities it needs; one a session
    lacks refuses the method."""
    offered = set()
    if session.token_vectors is not None:
        offered.add("token_vectors")
    if getattr(session, "draft_head", None) is not None:
        offered.add("draft_head")
    return frozenset(offered)


def token_vectors(session: Session, method: str) -> torch.Tensor:
    """(V, D) latent vector of every token (the VQ codebook), for methods that relax acceptance
    to similar tokens; layout tokens must sit far from every image token."""
    if session.token_vectors is None:
        raise UnsupportedMethod(f"{method} needs the tokenizer's codebook vectors, which this model does not expose")
    return session.token_vectors


@runtime_checkable
class ImageModel(Protocol):
    """A loaded model family: geometry, default sampling, sessions and a token decoder.

    `reference_generate(prompt, sampling, seed)` runs transformers' own `generate()` on the same
    network and returns the generated method ids: the speed bar for our AR loop. None where there is
    no such loop (the network is not a transformers model, or its `generate()` cannot draw images).
    """

    name: str
    geometry: Geometry
    default_sampling: SamplingSettings
    device: torch.device
    reference_generate: Callable[[str, SamplingSettings, int], list[int]] | None

    def session(self, prompt: str, guidance_scale: float) -> Session: ...

    def decode(self, tokens: list[int] | torch.Tensor) -> Image.Image:
        """Pixels of a possibly partial token sequence; cells not yet generated are left blank."""
        ...


def is_continuous(model: object) -> bool:
    """A model whose tokens are vectors declares their size, `token_dim`; discrete models have ids."""
    return isinstance(getattr(model, "token_dim", None), int)


def decode_in_order(model: ImageModel, tokens: list | torch.Tensor, order: Sequence[int] | None) -> Image.Image:
    """`model.decode` of tokens generated in a given cell order: a random-order model's run (its
    decoder takes the order), or a discrete run decided out of raster order (ZipAR); a raster run has
    none, and every model decodes it."""
    if order is None:
        return model.decode(tokens)
    if is_continuous(model):
        return model.decode(tokens, order=order)
    return _decode_out_of_order(model, tokens, order)


def in_raster_order(geometry: Geometry, tokens: Sequence[int], order: Sequence[int]) -> tuple[list[int], np.ndarray]:
    """The raster sequence of `geometry` holding the first tokens of a run that decided positions out of
    raster order (their cells `order`, -1 for a layout slot), code 0 in the cells not decided yet and the
    layout's tokens in its slots; and which (rows, cols) cells are decided."""
    sequence = [0 if entry == IMAGE_CELL else entry for entry in geometry.layout]
    position_of_cell = {cell: position for position, cell in enumerate(geometry.cell_of_position()) if cell >= 0}
    decided = np.zeros(geometry.rows * geometry.cols, dtype=bool)
    for token, cell in zip(tokens, order, strict=False):
        if cell >= 0:
            sequence[position_of_cell[cell]] = int(token)
            decided[cell] = True
    return sequence, decided.reshape(geometry.rows, geometry.cols)


def _decode_out_of_order(model: ImageModel, tokens: list[int], order: Sequence[int]) -> Image.Image:
    """The whole raster sequence decoded, the cells not decided yet blanked."""
    sequence, decided = in_raster_order(model.geometry, tokens, order)
    pixels = np.array(model.decode(sequence).convert("RGB"))
    scale_y, scale_x = pixels.shape[0] // decided.shape[0], pixels.shape[1] // decided.shape[1]
    mask = decided.repeat(scale_y, 0).repeat(scale_x, 1)
    pixels[: mask.shape[0], : mask.shape[1]][~mask] = BLANK
    return Image.fromarray(pixels)
