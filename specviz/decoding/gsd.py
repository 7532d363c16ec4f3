"""Grouped speculative decoding (GSD, So et al., ICCV 2025) on the Jacobi window; lossy by design.

Many visual tokens are interchangeable, so GSD verifies a draft x as a member of a group G(x) of
visually valid tokens rather than alone. The group is dynamic, formed from the target p at that
position (the paper finds static groups by embedding distance ineffective): the tokens ranked just
above and below x in p (`ranks_above` 6 and `ranks_below` 7, as in the authors' code), kept when
their probability is within `prob_gap` (0.15) of p(x) and they are near x in latent space; x itself
always belongs. x is accepted with probability min(1, p(G) / q(G)), the speculative-sampling test on
group masses; a rejected position is resampled from the usual residual norm(max(0, p - q)), as in
the authors' code. Redraws, new slots and the fixed head are SJD's. Exact for groups, not for
tokens: `check-lossless --method gsd` measures the deviation.

Where ours differs from the authors' code: "near" means among x's `neighbours` (128) nearest VQ
codebook vectors, where theirs thresholds the squared L2 distance of the LM's input embeddings at
0.5 (a scale that does not transfer between models); and ranks come from two top-k selections in p
rather than a sort of the logits (the same order, ties aside).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from specviz.core.params import GsdParameters
from specviz.core.settings import SamplingSettings
from specviz.decoding.sampling import neighbour_table, sample, token_probs
from specviz.decoding.window import WindowPass, WindowVerdict, run_window
from specviz.models.protocol import Session, token_vectors
from specviz.trace import Iteration


def dynamic_groups(
    p: torch.Tensor, drafts: torch.Tensor, near: torch.Tensor, above: int, below: int, prob_gap: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each draft's group under its target row: (w, 1 + above + below) token ids, the draft first, and
    a membership mask.

    `p` (w, V) are the target rows, `near` (V, k) every token's nearest codebook neighbours. The
    candidates are the `above` tokens ranked just above the draft in p and the `below` just under it
    (two top-k selections, far cheaper than sorting the vocabulary); tokens tied with the draft's own
    probability are left out.
    """
    p_draft = token_probs(p, drafts)[:, None]
    higher = p.masked_fill(p <= p_draft, float("inf")).topk(min(above, p.shape[1] - 1), dim=1, largest=False)
    lower = p.masked_fill(p >= p_draft, float("-inf")).topk(min(below, p.shape[1] - 1), dim=1)
    candidates = torch.cat([drafts[:, None], higher.indices, lower.indices], dim=1)
    candidate_p = torch.cat([p_draft, higher.values, lower.values], dim=1)  # +-inf where there was none
    similar_mass = (candidate_p - p_draft).abs() < prob_gap
    latent_near = (candidates[:, :, None] == near[drafts][:, None, :]).any(-1)
    member = similar_mass & latent_near
    member[:, 0].fill_(True)  # fill_, not `= True`: on CUDA that reads a CPU scalar
    return candidates, member


def grouped_verify(near: torch.Tensor, params: GsdParameters):
    """The rule for a neighbour table (V, k): the speculative test on group masses."""

    def verify(step: WindowPass) -> WindowVerdict:
        w, p, q, drafts = step.w, step.p, step.q, step.drafts
        group, member = dynamic_groups(p[:w], drafts, near, params.ranks_above, params.ranks_below, params.prob_gap)
        group_new = (p[:w].gather(1, group) * member).sum(1)
        group_old = (q.gather(1, group) * member).sum(1)  # >= q(x) > 0: x is in its group
        ratio = (group_new / group_old.clamp(min=torch.finfo(group_old.dtype).tiny)).clamp(max=1.0)
        uniform, accepted = step.accept(ratio)
        return WindowVerdict(
            accepted=accepted,
            head=step.exact_head(accepted),
            next_drafts=sample(p[1:], step.generator),
            ratio=ratio,
            uniform=uniform,
            group_size=member.sum(1),
            group_mass_new=group_new.clamp(max=1.0),
            group_mass_old=group_old.clamp(max=1.0),
        )

    return verify


def iterate(
    session: Session, sampling: SamplingSettings, generator: torch.Generator, params: GsdParameters
) -> Iterator[Iteration]:
    near = neighbour_table(token_vectors(session, "gsd"), params.neighbours)
    return run_window(session, sampling, generator, params, grouped_verify(near, params))
