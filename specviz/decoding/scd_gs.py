"""Speculative Coupled Decoding with Gumbel sharing (SCD, So et al., ICML 2026), lossless.

Every draft is argmax(log q + g) with one Gumbel vector g per absolute sequence position, the same
vector in every iteration, so a position whose distribution barely moves keeps its token. The noise
is a pure function of a key drawn from the run's generator and the position (no positions x
vocabulary table). Verification, residual and fixed head are SJD's; a position's noise only ever
shapes its own drafts, and it is verified once, so each verified draft is an exact sample of its q.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from specviz.decoding.sampling import (
    acceptance_ratio,
    gumbel_argmax,
    gumbel_noise,
    leading_true,
    next_exact_token,
    token_probs,
)
from specviz.decoding.window import JacobiWindow
from specviz.models.protocol import Session
from specviz.models.sampling import SamplingSettings
from specviz.trace import Iteration


def decode(
    session: Session, sampling: SamplingSettings, generator: torch.Generator, window: int = 16, init: str = "random"
) -> Iterator[Iteration]:
    key = int(torch.randint(2**62, (1,), generator=generator, device=session.next_logits.device))
    vocab = session.geometry.vocab_size

    def shared_gumbel_draw(probs: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return gumbel_argmax(probs, gumbel_noise(key, positions, vocab))

    state = JacobiWindow(session, sampling, generator, window, init, draw=shared_gumbel_draw)
    yield state.first_record()
    while not state.done:
        drafts, draft_probs = state.drafts, state.draft_probs
        w = len(drafts)
        p = state.forward()
        p_old, p_new = token_probs(draft_probs, drafts), token_probs(p[:w], drafts)
        ratio = acceptance_ratio(p_new, p_old)
        accepted = leading_true(torch.rand(w, generator=generator, device=p.device) < ratio)
        head = next_exact_token(p, draft_probs, accepted, generator)
        first_carried = state.head_position + 1 + min(accepted + 1, w)
        positions = torch.arange(first_carried, state.head_position + 1 + w, device=p.device)
        yield state.advance(
            accepted,
            head,
            carried=shared_gumbel_draw(p[accepted + 1 : w], positions),
            carried_probs=p[accepted + 1 : w],
            p_old=p_old,
            p_new=p_new,
            ratio=ratio,
        )
