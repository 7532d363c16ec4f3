"""Grouped speculative decoding (GSD, So et al., ICCV 2025) on the Jacobi window; lossy by design.

Many visual tokens are interchangeable, so GSD verifies a draft x as a member of a group G(x) of
visually valid tokens rather than alone. The group is dynamic, formed from the target p at that
position (the paper finds static groups by embedding distance ineffective), as in the authors'
code: the tokens ranked within `group_size` places of x in p, kept when their probability is within
`prob_gap` of p(x) and they are among x's `neighbours` nearest codebook vectors (x itself always
belongs). x is accepted with probability min(1, p(G) / q(G)), the speculative-sampling test on group
masses; a rejected position is resampled from the usual residual norm(max(0, p - q)). Redraws, new
slots and the fixed head are SJD's. Exact for groups, not for tokens: `check-lossless` measures it.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from specviz.decoding.sampling import leading_true, nearest_tokens, next_exact_token, sample, token_probs
from specviz.decoding.window import JacobiWindow
from specviz.models.protocol import Session, token_vectors
from specviz.models.sampling import SamplingSettings, SettingsError
from specviz.trace import Iteration


def dynamic_groups(
    p: torch.Tensor, drafts: torch.Tensor, near: torch.Tensor, group_size: int, prob_gap: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each draft's group under its target row: (w, 1 + 2 * group_size) token ids, the draft first,
    and a membership mask.

    `p` (w, V) are the target rows, `near` (V, k) every token's nearest codebook neighbours. The
    candidates are the `group_size` tokens ranked just above the draft in p and those just below
    (two top-k selections, far cheaper than sorting the vocabulary); tokens tied with the draft's
    own probability are left out.
    """
    count = min(group_size, p.shape[1] - 1)
    p_draft = token_probs(p, drafts)[:, None]
    above = p.masked_fill(p <= p_draft, float("inf")).topk(count, dim=1, largest=False)
    below = p.masked_fill(p >= p_draft, float("-inf")).topk(count, dim=1)
    candidates = torch.cat([drafts[:, None], above.indices, below.indices], dim=1)
    candidate_p = torch.cat([p_draft, above.values, below.values], dim=1)  # +-inf where there was none
    similar_mass = (candidate_p - p_draft).abs() < prob_gap
    latent_near = (candidates[:, :, None] == near[drafts][:, None, :]).any(-1)
    member = similar_mass & latent_near
    member[:, 0] = True
    return candidates, member


def decode(
    session: Session,
    sampling: SamplingSettings,
    generator: torch.Generator,
    window: int = 16,
    init: str = "random",
    group_size: int = 10,
    prob_gap: float = 0.15,
    neighbours: int = 128,
) -> Iterator[Iteration]:
    if int(group_size) != group_size or group_size < 0:
        raise SettingsError(f"gsd: group size must be a non-negative integer (0 = plain SJD), got {group_size}")
    if not 0 <= prob_gap <= 1:
        raise SettingsError(f"gsd: prob_gap is a difference of probabilities in [0, 1], got {prob_gap}")
    if int(neighbours) != neighbours or neighbours < 1:
        raise SettingsError(f"gsd: neighbours must be a positive integer, got {neighbours}")
    near = nearest_tokens(token_vectors(session, "gsd"), neighbours)
    state = JacobiWindow(session, sampling, generator, window, init)
    yield state.first_record()
    while not state.done:
        drafts, draft_probs = state.drafts, state.draft_probs
        w = len(drafts)
        p = state.forward()
        group, member = dynamic_groups(p[:w], drafts, near, int(group_size), prob_gap)  # the draft is in its group
        group_new = (p[:w].gather(1, group) * member).sum(1)
        group_old = (draft_probs.gather(1, group) * member).sum(1)  # >= q(x) > 0: x is in its group
        ratio = (group_new / group_old.clamp(min=torch.finfo(group_old.dtype).tiny)).clamp(max=1.0)
        accepted = leading_true(torch.rand(w, generator=generator, device=p.device) < ratio)
        yield state.advance(
            accepted,
            next_exact_token(p, draft_probs, accepted, generator),
            carried=sample(p[accepted + 1 : w], generator),
            carried_probs=p[accepted + 1 : w],
            p_old=token_probs(draft_probs, drafts),
            p_new=token_probs(p[:w], drafts),
            ratio=ratio,
        )
