"""LANTERN's relaxed acceptance (Jang et al., ICLR 2025) on the Jacobi window; lossy by design.

Visual tokens that are close in the tokenizer's latent space look alike, so LANTERN accepts a
draft x against p plus the mass of its nearest codebook neighbours: B(x) takes x's k nearest
neighbours, nearest first, while their summed probability stays within a total-variation budget
delta, and moves their mass onto x. The draft is accepted with probability
min(1, p~(x) / q(x)) where p~(x) = p(x) + p(B(x)); on rejection the residual of p~ excludes x and
B(x). Everything else (redraws, new slots, the fixed head) is SJD's. The relaxed target differs
from p by at most delta in total variation per position; `check-lossless` measures the result.
Defaults k = 1000 and delta = 0.1 are those of the authors' code.
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
    neighbours: int = 1000,
    delta: float = 0.1,
) -> Iterator[Iteration]:
    if int(neighbours) != neighbours or neighbours < 1:
        raise SettingsError(f"lantern: neighbours must be a positive integer, got {neighbours}")
    if not 0 <= delta <= 1:
        raise SettingsError(f"lantern: delta is a total-variation budget in [0, 1], got {delta}")
    table = nearest_tokens(token_vectors(session, "lantern"), neighbours)  # (V, k)
    state = JacobiWindow(session, sampling, generator, window, init)
    yield state.first_record()
    while not state.done:
        drafts, draft_probs = state.drafts, state.draft_probs
        w = len(drafts)
        p = state.forward()
        neighbour_ids = table[drafts]  # (w, k)
        neighbour_mass = p[:w].gather(1, neighbour_ids)
        in_budget = neighbour_mass.cumsum(1) <= delta  # B(x): nearest first, within the TV budget
        p_old, p_new = token_probs(draft_probs, drafts), token_probs(p[:w], drafts)
        relaxed = p_new + (neighbour_mass * in_budget).sum(1)
        ratio = (relaxed / p_old).clamp(max=1.0)
        accepted = leading_true(torch.rand(w, generator=generator, device=p.device) < ratio)
        if accepted < w:
            target = p[accepted].clone()
            target[neighbour_ids[accepted][in_budget[accepted]]] = 0.0  # their mass went to x ...
            target[drafts[accepted]] = relaxed[accepted]  # ... which is below q(x): no residual there
            head = sample(residual(target[None], draft_probs[accepted : accepted + 1]), generator)
        else:
            head = sample(p[w:], generator)
        yield state.advance(
            accepted,
            head,
            carried=sample(p[accepted + 1 : w], generator),
            carried_probs=p[accepted + 1 : w],
            p_old=p_old,
            p_new=p_new,
            ratio=ratio,
        )
