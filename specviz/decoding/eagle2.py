"""EAGLE-2's dynamic draft tree (Li et al., EMNLP 2024), lossless.

Every tree has the same shape: `tree_depth` levels, the `tree_top_k` most confident nodes of a level
each expanded into their `tree_top_k` most confident children, the `tree_tokens` nodes of highest
cumulative confidence kept. The tree is dynamic in which nodes it keeps, not in its depth or width.
Growing, verifying (EAGLE's rule: child x accepted with probability p(x), a refused sibling removed
from p before the next is tested) and committing are shared with PEANUT (`specviz.decoding.tree`).
Defaults are those of the authors' code (59 drafts on 8 levels, top-k 10).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from specviz.core.params import TreeParameters
from specviz.core.settings import SamplingSettings
from specviz.decoding.tree import FixedShape, TreeShape, run_tree
from specviz.models.protocol import Session
from specviz.trace import Iteration


def iterate(
    session: Session, sampling: SamplingSettings, generator: torch.Generator, params: TreeParameters
) -> Iterator[Iteration]:
    return run_tree(session, sampling, generator, params, FixedShape(TreeShape(params.tree_depth, params.tree_top_k)))
