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

from specviz.decoding.sampling import leading_true, sample, token_probs
from specviz.decoding.window import JacobiWindow
from specviz.models.protocol import Session
from specviz.models.sampling import SamplingSettings
from specviz.trace import Iteration


def decode(
    session: Session, sampling: SamplingSettings, generator: torch.Generator, window: int = 16, init: str = "random"
) -> Iterator[Iteration]:
    state = JacobiWindow(session, sampling, generator, window, init)
    yield state.first_record()
    while not state.done:
        drafts, draft_probs = state.drafts, state.draft_probs
        w = len(drafts)
        p = state.forward()
        redrawn = sample(p, generator)  # this iteration's value at every position
        accepted = leading_true(redrawn[:w] == drafts)
        head = sample(p[accepted : accepted + 1], generator)  # the first position with a final context
        p_new = token_probs(p[:w], drafts)
        yield state.advance(
            accepted,
            head,
            carried=redrawn[accepted + 1 : w],
            carried_probs=p[accepted + 1 : w],
            p_old=token_probs(draft_probs, drafts),
            p_new=p_new,
            ratio=p_new,  # the chance that a fresh draw repeats the draft
        )
