"""PEANUT: adjacency-adaptive dynamical draft trees (section 4 of the paper), lossless.

EAGLE-2's trees (`specviz.decoding.tree`), but each tree's depth and top-k are set from its neighbour's
tree, since neighbouring image regions are alike in how predictable they are:

1. Adjacent initialisation, horizontal repeat (section 4.1, the strategy the paper adopts): a tree
   starts from the depth d~ and top-k k~ of the tree that committed the cell to the left of its first
   drafted cell.
2. Bisectional dynamic adaptation (section 4.2, Eq. 2): with that tree's acceptance rate
   alpha = tau / d, a tree at or above the threshold beta (positive) makes this one deeper and
   narrower, d = d~ + l_d and k = k~ - l_k; below it (negative) shallower and wider, d = d~ - l_d and
   k = k~ + l_k. Both stay strictly inside their bounds, d_min < d < d_max and k_min < k < k_max.

Where the paper is silent, our choices:
- tau in alpha counts the accepted drafts, not the token drawn after them, and d is the depth asked of
  the tree (the paper's d-hat, the output of Eq. 2; fewer levels where the image ends): alpha = 1 then
  means every asked level was used, the paper's positive status "all tokens in each layer of the draft
  tree are fully utilized"; counting that token would call a tree that missed its last level positive
  at beta = 1. (Reported tau, as in the paper's tables, counts it: AR's is 1.) Keeping the
  `tree_tokens` most confident nodes can leave a tree shallower than asked; such a tree cannot be
  positive, and the next is asked shallower and wider, towards a shape its node budget fills.
- The first tree of a row has no cell to its left: it repeats the tree that committed the cell above
  (the paper's vertical repeat). A first drafted position that is a layout slot repeats the head's tree.
  The first tree of the image (the cell to its left was drawn from the prefill, by no tree) takes
  `tree_depth` and `tree_top_k`, by default the middle of the bounds, unadapted.
- "We only restrict the top-k when d~ +- l_d > 1", read after the depth bounds: a tree whose depth
  comes out at 1 has no top-k bound above but the tree's size (a depth-1 tree of k nodes costs k,
  not k^2), so a run of negative trees widens it past k_max; the first positive tree, two levels deep,
  brings k back inside the bounds. The lower bound k_min always holds.

`peanut-lantern` is the paper's PEANUT + LANTERN (lossy): each child x is tested against p(x) plus the
mass of its LANTERN neighbourhood B(x) (`specviz.decoding.lantern`), in EAGLE's rule with p~ for p, and
a refused child leaves the residual together with B(x).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from specviz.core.params import PeanutLanternParameters, PeanutParameters
from specviz.core.settings import SamplingSettings
from specviz.decoding.initialisers import neighbour_positions
from specviz.decoding.lantern import neighbourhood
from specviz.decoding.sampling import neighbour_table
from specviz.decoding.tree import Relaxation, TreeShape, run_tree
from specviz.models.protocol import Session, token_vectors
from specviz.trace import Iteration


class PeanutShape:
    """Horizontal repeat, then Eq. 2, clamped inside the bounds."""

    def __init__(self, params: PeanutParameters, session: Session):
        self.params = params
        left, _ = neighbour_positions(session)  # the cell to the left; in the first column the cell above
        self.neighbour = [source if source >= 0 else position - 1 for position, source in enumerate(left)]
        # the tree that committed each position: its shape and acceptance rate (None: drawn from the prefill)
        self.committed_by: list[tuple[TreeShape, float] | None] = [None] * len(left)

    @property
    def widest(self) -> int:
        return max(self.params.top_k_max - 1, self.params.tree_tokens)

    def shape(self, first_position: int) -> TreeShape:
        p = self.params
        origin = self.committed_by[self.neighbour[first_position]]
        if origin is None:
            return TreeShape(p.tree_depth, p.tree_top_k)
        previous, alpha = origin
        positive = alpha >= p.beta
        depth = previous.depth + (p.depth_step if positive else -p.depth_step)
        depth = min(max(depth, p.depth_min + 1), p.depth_max - 1)
        top_k = previous.top_k + (-p.top_k_step if positive else p.top_k_step)
        top_k_limit = p.top_k_max - 1 if depth > 1 else p.tree_tokens
        return TreeShape(depth=depth, top_k=max(min(top_k, top_k_limit), p.top_k_min + 1), alpha=alpha)

    def learn(self, first_position: int, shape: TreeShape, levels: int, accepted: int, committed: int) -> None:
        outcome = (shape, accepted / levels)
        for position in range(first_position, first_position + committed):
            self.committed_by[position] = outcome


def iterate(
    session: Session, sampling: SamplingSettings, generator: torch.Generator, params: PeanutParameters
) -> Iterator[Iteration]:
    return run_tree(session, sampling, generator, params, PeanutShape(params, session))


def lantern_relaxation(table: torch.Tensor, delta: float) -> Relaxation:
    """LANTERN's B(x) for a tree's nodes: the mass added to p(x), and the tokens pooled with x."""

    def relax(rows: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        neighbours, mass, in_budget = neighbourhood(rows, tokens, table, delta)
        return (mass * in_budget).sum(1), neighbours, in_budget

    return relax


def iterate_relaxed(
    session: Session, sampling: SamplingSettings, generator: torch.Generator, params: PeanutLanternParameters
) -> Iterator[Iteration]:
    table = neighbour_table(token_vectors(session, "peanut-lantern"), params.neighbours)
    relaxation = lantern_relaxation(table, params.delta)
    return run_tree(session, sampling, generator, params, PeanutShape(params, session), relaxation)
