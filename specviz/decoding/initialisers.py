"""SJD's initialisations of new Jacobi-window slots (section 4.2), one strategy object each, by name.

A new slot is a position that enters the window without a draft. `random` draws a uniform image
token; `repeat-left` / `repeat-above` copy the latest token of the neighbouring cell (a neighbour
inside the same new block passes on its own copy); `sample-left` / `sample-above` draw from the
neighbour's latest computed distribution. A uniform or copied draft is recorded with a one-hot draft
distribution, as the official SJD code records them (`scores_of_rand_tokens`): tested as a fixed
draft it is accepted with p(x), where a uniform q would accept it with min(1, V p(x)). Everything
runs on the device: filling slots copies nothing from the host.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from specviz.core.params import INIT_STRATEGIES
from specviz.models.protocol import IMAGE_CELL, Session

# (draft distributions (m, V), their absolute positions (m,)) -> drafted tokens (m,)
Draw = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def neighbour_positions(session: Session) -> tuple[list[int], list[int]]:
    """For every position, the position of the cell to its left and above (-1 where none).

    A first-column cell has no left neighbour and uses the one above; a first-row cell has none
    above and uses the one to its left. Layout slots have none.
    """
    geometry = session.geometry
    cells = geometry.cell_of_position()
    position_of_cell = {cell: pos for pos, cell in enumerate(cells) if cell >= 0}
    left, above = [], []
    for cell in cells:
        row, col = divmod(cell, geometry.cols) if cell >= 0 else (-1, -1)
        to_left = position_of_cell[cell - 1] if col > 0 else -1
        to_above = position_of_cell[cell - geometry.cols] if row > 0 else -1
        left.append(to_left if to_left >= 0 else to_above)
        above.append(to_above if to_above >= 0 else to_left)
    return left, above


@dataclass
class NewSlots:
    """The drafts of new slots: tokens (n,), the distribution each was drawn from (n, V), and the
    position each came from (-1 for none)."""

    tokens: torch.Tensor
    probs: torch.Tensor
    sources: list[int]


@dataclass
class SlotContext:
    """What every initialisation reads: the grid, the window's latest token at every position (`values`,
    kept up to date by the window) and the run's random draws. Index `seq_len` of the position tensors
    is a sentinel: "no source", and the row after the last position."""

    session: Session
    window: int
    values: torch.Tensor  # (seq_len + 1,) the latest token at every position
    generator: torch.Generator
    draw: Draw

    def __post_init__(self) -> None:
        geometry = self.session.geometry
        self.seq_len, self.vocab = geometry.seq_len, geometry.vocab_size
        layout_tokens = [t for t in geometry.layout if t != IMAGE_CELL]
        self.image_vocab = min(layout_tokens) if layout_tokens else self.vocab
        self.device = self.values.device
        self.positions = torch.arange(self.seq_len + 1, device=self.device)


class RandomInit:
    """Uniform image tokens."""

    def __init__(self, context: SlotContext):
        self.context = context
        self.source_of = [-1] * context.seq_len

    def remember(self, first_position: int, probs: torch.Tensor) -> None:
        """The model's latest distributions from `first_position` on; only sample-* reads them."""

    def fill(self, first: int, last: int) -> NewSlots:
        tokens = self._tokens(first, last)
        return NewSlots(
            tokens, torch.nn.functional.one_hot(tokens, self.context.vocab).float(), self.source_of[first : last + 1]
        )

    def _tokens(self, first: int, last: int) -> torch.Tensor:
        c = self.context
        return torch.randint(c.image_vocab, (last - first + 1,), generator=c.generator, device=c.device)


class RepeatInit(RandomInit):
    """Copies of the neighbour's latest token; a neighbour inside the new block passes on its own copy,
    resolved by pointer jumping (each round doubles the distance followed); uniform without a neighbour."""

    def __init__(self, context: SlotContext, side: str):
        super().__init__(context)
        self.source_of = dict(zip(("left", "above"), neighbour_positions(context.session), strict=True))[side]
        sentinel = [s if s >= 0 else context.seq_len for s in self.source_of]
        self.sources = torch.tensor([*sentinel, context.seq_len], device=context.device)
        self.jumps = math.ceil(math.log2(context.window + 1)) + 1

    def _tokens(self, first: int, last: int) -> torch.Tensor:
        c = self.context
        uniform = super()._tokens(first, last)
        in_block = (c.positions >= first) & (c.positions <= last)
        table = torch.where(in_block, self.sources, c.positions)
        for _ in range(self.jumps):
            table = table[table]
        resolved = table[first : last + 1]
        return torch.where(resolved == c.seq_len, uniform, c.values[resolved])


class SampleInit(RepeatInit):
    """Draws from the neighbour's latest distribution; a slot without a neighbour, or whose neighbour has
    no distribution yet, reads the latest computed position before it. The distributions are kept in a
    ring: a new slot reads at most a row and a layout slot behind the window."""

    def __init__(self, context: SlotContext, side: str):
        super().__init__(context, side)
        self.ring_rows = min(context.seq_len, context.window + context.session.geometry.cols + 4)
        self.ring = torch.zeros(self.ring_rows, context.vocab, device=context.device)
        self.known_upto = -1  # every position up to here has a computed distribution

    def remember(self, first_position: int, probs: torch.Tensor) -> None:
        c = self.context
        count = min(len(probs), c.seq_len - first_position)
        rows = c.positions[first_position : first_position + count] % self.ring_rows
        self.ring.index_copy_(0, rows, probs[:count])
        self.known_upto = max(self.known_upto, first_position + count - 1)

    def fill(self, first: int, last: int) -> NewSlots:
        c = self.context
        positions = c.positions[first : last + 1]
        rows = self.sources[positions]
        rows = torch.where(rows == c.seq_len, self.known_upto, rows.clamp(max=self.known_upto))
        probs = self.ring[rows % self.ring_rows]
        tokens = c.draw(probs, positions)
        known = self.known_upto
        return NewSlots(tokens, probs, [min(s, known) if s >= 0 else known for s in self.source_of[first : last + 1]])


# by the names the parameters offer (`params.INIT_STRATEGIES`, light for the command line), in their order
INITIALISERS: dict[str, Callable[[SlotContext], RandomInit]] = dict(
    zip(
        INIT_STRATEGIES,
        (
            RandomInit,
            lambda context: RepeatInit(context, "left"),
            lambda context: RepeatInit(context, "above"),
            lambda context: SampleInit(context, "left"),
            lambda context: SampleInit(context, "above"),
        ),
        strict=True,
    )
)
