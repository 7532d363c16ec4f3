"""Speculative Jacobi Decoding (Teng et al., ICLR 2025), lossless.

Each pass verifies the window's drafts left to right: draft x at position i is accepted with
probability min(1, p_new(x) / p_old(x)) (Eq. 1), where p_old is the distribution it was drawn from
and p_new the one computed now. The first rejected position is resampled from
norm(max(0, p_new - p_old)) (Eq. 2), which makes it an exact sample, so it is fixed. Every later
position is redrawn independently from p_new (Eq. 3, the "refinement" that appendix H shows to be
the source of the speedup), and p_new becomes its draft distribution. New slots at the end of the
window are initialised by a strategy (section 4.2): `random` (uniform, treated as a one-hot draft
distribution, so acceptance is p(x)), `repeat-left`, `repeat-above` (one-hot as well),
`sample-left`, `sample-above` (drawn from the neighbour's predicted distribution).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from specviz.decoding.sampling import acceptance_ratio, leading_true, next_exact_token, sample, token_probs
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
        p_old, p_new = token_probs(draft_probs, drafts), token_probs(p[:w], drafts)
        ratio = acceptance_ratio(p_new, p_old)
        accepted = leading_true(torch.rand(w, generator=generator, device=p.device) < ratio)
        head = next_exact_token(p, draft_probs, accepted, generator)
        yield state.advance(
            accepted,
            head,
            carried=sample(p[accepted + 1 : w], generator),
            carried_probs=p[accepted + 1 : w],
            p_old=p_old,
            p_new=p_new,
            ratio=ratio,
        )
