"""Speculative Coupled Decoding with maximal coupling (SCD, So et al., ICML 2026), lossless.

SJD's verification, but the drafts after the first rejection are not redrawn independently: each
runs the same accept-or-residual test against its own previous draft (maximal coupling), so it
keeps its token with probability min(1, p_new/p_old) and otherwise takes a residual draw. The new
draft is distributed exactly as p_new, so p_new (not the old distribution) is what the next
iteration verifies it against. The uniforms of the verification are reused for the coupling, so
drafting costs no extra randomness or pass.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from specviz.decoding.sampling import (
    acceptance_ratio,
    leading_true,
    maximal_coupling,
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
    state = JacobiWindow(session, sampling, generator, window, init)
    yield state.first_record()
    while not state.done:
        drafts, draft_probs = state.drafts, state.draft_probs
        w = len(drafts)
        p = state.forward()
        p_old, p_new = token_probs(draft_probs, drafts), token_probs(p[:w], drafts)
        ratio = acceptance_ratio(p_new, p_old)
        uniform = torch.rand(w, generator=generator, device=p.device)
        accepted = leading_true(uniform < ratio)
        head = next_exact_token(p, draft_probs, accepted, generator)
        rest = slice(accepted + 1, w)
        coupled = maximal_coupling(p[rest], draft_probs[rest], drafts[rest], uniform[rest], generator)
        yield state.advance(
            accepted, head, carried=coupled, carried_probs=p[rest], p_old=p_old, p_new=p_new, ratio=ratio
        )
