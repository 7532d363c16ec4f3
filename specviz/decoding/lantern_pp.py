"""LANTERN++ (Park et al., arXiv 2502.06352): a static draft tree with LANTERN's relaxed acceptance, lossy.

LANTERN's code runs it with `--static_tree` (`jadohu/LANTERN`, `models/ea_model_*.py`): EAGLE-1's
static tree `mc_sim_7b_63` (25 drafts on 5 levels: the head's 4 most confident children, then fewer
further down, 5 deep along the most confident path), the drafts from an EAGLE head, each node tested
against p plus the mass of its nearest codebook neighbours within delta (`specviz.decoding.lantern`).
A static tree spends no drafter time choosing nodes and keeps every pass the same size.

Here the tree is grown by the shared tree loop (`specviz.decoding.tree.grow_static`) from either
drafter (`--drafter head` on `tiny`, as the paper runs it; `training-free` elsewhere), and each node is
tested by the tree loop's rule with LANTERN's pooled mass added to p(x), as PEANUT + LANTERN is
(`specviz.decoding.peanut`). Where this differs from the authors' code: their static-tree verification
is EAGLE-1's, which tests a child against the draft head's probability (min(1, p~(x) / q(x))); the tree
loop tests a picked candidate as a deterministic draft (accepted with p~(x), renormalised over what the
refused siblings left), the rule that is exact for top-k candidates when delta is 0. The deviation this
relaxation costs is measured, as LANTERN's and GSD's are (`check-lossless`).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from specviz.core.params import StaticTreeLanternParameters
from specviz.core.settings import SamplingSettings
from specviz.decoding.peanut import lantern_relaxation
from specviz.decoding.sampling import neighbour_table
from specviz.decoding.tree import FixedShape, TreeShape, run_tree
from specviz.models.protocol import Session, token_vectors
from specviz.trace import Iteration

# EAGLE-1's `mc_sim_7b_63`, the LANTERN code's default `--tree_choices`: each node by the ranks down to it
MC_SIM_7B_63 = (
    (0,), (1,), (2,), (3,), (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0),
    (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (0, 1, 1), (0, 2, 0), (0, 2, 1), (1, 0, 0),
    (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2), (0, 0, 0, 0, 0), (0, 0, 0, 0, 1),
)  # fmt: skip


def iterate(
    session: Session, sampling: SamplingSettings, generator: torch.Generator, params: StaticTreeLanternParameters
) -> Iterator[Iteration]:
    table = neighbour_table(token_vectors(session, "lantern++"), params.neighbours)
    relaxation = lantern_relaxation(table, params.delta)
    shape = TreeShape(max(map(len, MC_SIM_7B_63)), 1 + max(path[-1] for path in MC_SIM_7B_63), paths=MC_SIM_7B_63)
    return run_tree(session, sampling, generator, params, FixedShape(shape), relaxation)
