"""LANTERN's relaxed acceptance (Jang et al., ICLR 2025) on the Jacobi window; lossy by design.

Visual tokens that are close in the tokenizer's latent space look alike, so LANTERN accepts a
draft x against p plus the mass of its nearest codebook neighbours: B(x) takes x's k nearest
neighbours, nearest first, while their summed target probability stays within delta, and moves
their mass onto x. The draft is accepted with probability min(1, p~(x) / q(x)) where
p~(x) = p(x) + p(B(x)); on rejection the residual of p~ excludes x and B(x). Everything else
(redraws, new slots, the fixed head) is SJD's.

What delta bounds: the relaxed target p~ is within delta of p in total variation, at each position
taken alone. The output is not: acceptance compares p~ with the draft distribution q, and where q
puts mass on B(x) the accepted draft keeps it, so the output can drift further from p than delta
(p = (.2,.2,.3,.3), q = (.5,.5,0,0), neighbours 0-1 and 2-3, delta 0.2 gives an output at TV 0.4).
`check-lossless --method lantern` measures the deviation. Defaults k = 1000 and delta = 0.1 are
those of the authors' code; their code zeroes all k + 1 nearest neighbours in the residual after a
rejection, ours only B(x), as the paper describes.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from specviz.core.params import LanternParameters
from specviz.core.settings import SamplingSettings
from specviz.decoding.sampling import neighbour_table, sample
from specviz.decoding.window import WindowPass, WindowVerdict, run_window
from specviz.models.protocol import Session, token_vectors
from specviz.trace import Iteration


def neighbourhood(
    p: torch.Tensor, drafts: torch.Tensor, table: torch.Tensor, delta: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """B(x) of every draft x against its row of p (n, V): its neighbours in the table (n, k) nearest first,
    their target masses (n, k), and which of them B(x) takes (n, k): nearest first while their summed
    mass stays within delta."""
    neighbours = table[drafts]
    neighbour_mass = p.gather(1, neighbours)
    return neighbours, neighbour_mass, neighbour_mass.cumsum(1) <= delta


def relaxed_verify(table: torch.Tensor, delta: float):
    """The rule for a neighbour table (V, k): SJD's test and residual against p~."""

    def verify(step: WindowPass) -> WindowVerdict:
        w, p, drafts = step.w, step.p, step.drafts
        neighbours, neighbour_mass, in_budget = neighbourhood(p[:w], drafts, table, delta)
        pooled = (neighbour_mass * in_budget).sum(1)
        relaxed = step.p_new + pooled
        p_old = step.p_old
        ratio = (relaxed / p_old).clamp(max=1.0)
        uniform, accepted = step.accept(ratio)
        target = p[:w].scatter(1, neighbours, neighbour_mass * ~in_budget)  # B(x)'s mass went to x ...
        target = target.scatter(1, drafts[:, None], relaxed[:, None])  # ... which stays below q(x): no residual
        return WindowVerdict(
            accepted=accepted,
            head=step.exact_head(accepted, target=target),
            next_drafts=sample(p[1:], step.generator),
            ratio=ratio,
            uniform=uniform,
            group_size=1 + in_budget.sum(1),
            group_mass_new=relaxed.clamp(max=1.0),
            group_mass_old=p_old,
        )

    return verify


def iterate(
    session: Session, sampling: SamplingSettings, generator: torch.Generator, params: LanternParameters
) -> Iterator[Iteration]:
    table = neighbour_table(token_vectors(session, "lantern"), params.neighbours)
    return run_window(session, sampling, generator, params, relaxed_verify(table, params.delta))
