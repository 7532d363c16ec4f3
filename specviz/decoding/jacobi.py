"""Plain Jacobi decoding with its deterministic criterion (Song et al. 2021; SJD section 3.2).

Every pass redraws all W drafts from the distributions it computes; drafts are accepted while they
are unchanged between two consecutive iterations. The first token of the window has a final
context, so it is fixed every pass (Jacobi's worst case equals AR: one token per pass).

Lossless only under greedy decoding (temperature 0). Under sampling, "unchanged" favours tokens
that are likely under both the old and the new distribution, so the output deviates from AR; the
deviation is measured by `python -m specviz check-lossless --method jacobi`.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from specviz.core.params import WindowParameters
from specviz.core.settings import SamplingSettings
from specviz.decoding.sampling import leading_true, sample
from specviz.decoding.window import WindowPass, WindowVerdict, run_window
from specviz.models.protocol import Session
from specviz.trace import Iteration


def verify(step: WindowPass) -> WindowVerdict:
    redrawn = sample(step.p, step.generator)  # this iteration's value at every position
    accepted = leading_true(redrawn[: step.w] == step.drafts)
    return WindowVerdict(
        accepted=accepted,
        head=sample(
            step.p.index_select(0, accepted.view(1)), step.generator
        ),  # the first position with a final context
        next_drafts=redrawn[1:],
        ratio=step.p_new,  # the chance that a fresh draw repeats the draft
    )


def iterate(
    session: Session, sampling: SamplingSettings, generator: torch.Generator, params: WindowParameters
) -> Iterator[Iteration]:
    return run_window(session, sampling, generator, params, verify)
