"""Speculative Jacobi Decoding (Teng et al., ICLR 2025), lossless.

Each pass verifies the window's drafts left to right: draft x at position i is accepted with
probability min(1, p_new(x) / p_old(x)) (Eq. 1), where p_old is the distribution it was drawn from
and p_new the one computed now. The first rejected position is resampled from
norm(max(0, p_new - p_old)) (Eq. 2), which makes it an exact sample, so it is fixed. Every later
position is redrawn independently from p_new (Eq. 3, the "refinement" that appendix H shows to be
the source of the speedup), and p_new becomes its draft distribution; so is the row after the
window, as in the official code. New slots are initialised by a strategy (section 4.2): `random`
(uniform, a one-hot draft distribution, so acceptance is p(x)), `repeat-left`, `repeat-above`
(one-hot as well), `sample-left`, `sample-above` (drawn from the neighbour's latest distribution).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from specviz.core.params import WindowParameters
from specviz.core.settings import SamplingSettings
from specviz.decoding.sampling import sample
from specviz.decoding.window import WindowPass, WindowVerdict, run_window
from specviz.models.protocol import Session
from specviz.trace import Iteration


def verify(step: WindowPass) -> WindowVerdict:
    ratio = step.speculative_ratio
    uniform, accepted = step.accept(ratio)
    return WindowVerdict(
        accepted=accepted,
        head=step.exact_head(accepted),
        next_drafts=sample(step.p[1:], step.generator),  # independent redraws from p_new
        ratio=ratio,
        uniform=uniform,
    )


def iterate(
    session: Session, sampling: SamplingSettings, generator: torch.Generator, params: WindowParameters
) -> Iterator[Iteration]:
    return run_window(session, sampling, generator, params, verify)
