"""Grouped speculative decoding (So et al., 2025) on the Jacobi window; lossy by design.

Many visual tokens are interchangeable, so GSD verifies a draft x as a member of a group G(x) of
similar tokens rather than alone: G(x) is x and its `group_size - 1` nearest codebook neighbours,
and x is accepted with probability min(1, p(G) / q(G)), the speculative-sampling test on group
masses. On rejection the residual norm(max(0, p - q)) is drawn outside G(x). Redraws, new slots and
the fixed head are SJD's. Exact at the level of groups, not of tokens; `check-lossless` measures it.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from specviz.decoding.sampling import leading_true, nearest_tokens, residual, sample, token_probs
from specviz.decoding.window import JacobiWindow
from specviz.models.protocol import Session, token_vectors
from specviz.models.sampling import SamplingSettings, SettingsError
from specviz.trace import Iteration


def decode(
    session: Session,
    sampling: SamplingSettings,
    generator: torch.Generator,
    window: int = 16,
    init: str = "random",
    group_size: int = 10,
) -> Iterator[Iteration]:
    if int(group_size) != group_size or group_size < 1:
        raise SettingsError(f"gsd: group size must be a positive integer, got {group_size}")
    vectors = token_vectors(session, "gsd")
    neighbours = nearest_tokens(vectors, group_size - 1)
    groups = torch.cat([torch.arange(len(vectors), device=vectors.device)[:, None], neighbours], dim=1)  # (V, G)
    state = JacobiWindow(session, sampling, generator, window, init)
    yield state.first_record()
    while not state.done:
        drafts, draft_probs = state.drafts, state.draft_probs
        w = len(drafts)
        p = state.forward()
        group = groups[drafts]  # (w, G)
        group_new, group_old = p[:w].gather(1, group).sum(1), draft_probs.gather(1, group).sum(1)
        ratio = (group_new / group_old.clamp(min=torch.finfo(group_old.dtype).tiny)).clamp(max=1.0)
        accepted = leading_true(torch.rand(w, generator=generator, device=p.device) < ratio)
        if accepted < w:
            outside = p[accepted].clone()
            outside[group[accepted]] = 0.0
            if float(outside.sum()) == 0.0:  # all of p lies inside the group: fall back to p itself
                outside = p[accepted]
            head = sample(residual(outside[None], draft_probs[accepted : accepted + 1]), generator)
        else:
            head = sample(p[w:], generator)
        yield state.advance(
            accepted,
            head,
            carried=sample(p[accepted + 1 : w], generator),
            carried_probs=p[accepted + 1 : w],
            p_old=token_probs(draft_probs, drafts),
            p_new=token_probs(p[:w], drafts),
            ratio=ratio,
        )
