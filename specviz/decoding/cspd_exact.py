"""Exact continuous speculative decoding: speculative sampling on whole denoising paths.

A diffusion head defines a density on the path x_T, ..., x_0 (a standard normal x_T times Gaussian
transitions), and its token is the path's end. Speculative sampling on paths is ordinary speculative
sampling, so it is exact for the path and hence for the token: accept the draft's path with
min(1, p(path) / q(path)), where p evaluates the target head's transitions along the draft's own
trajectory (all steps in one batched head call, since every step's input is known); on rejection,
propose whole paths from the target and keep one with max(0, 1 - q(path) / p(path)), the residual
norm(max(0, p - q)) by acceptance-rejection with M = 1 / (1 - beta). The first rejection ends the
pass, the target draws the token after a fully accepted draft, pre-filling as in `cspd`.

The price: paths live in (S + 1) * d dimensions, where two heads overlap less than their tokens do,
so the acceptance rate can be lower than `cspd`'s; the benchmark measures it.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from specviz.core.params import SpeculativeParameters
from specviz.core.settings import SamplingSettings
from specviz.decoding.denoising import (
    DenoisingPass,
    DenoisingVerdict,
    along,
    draw_fresh,
    first_accepted,
    speculative_decoding,
)
from specviz.models.continuous import PairSession
from specviz.trace import ContinuousRecord


def iterate(
    pair: PairSession, sampling: SamplingSettings, generator: torch.Generator, params: SpeculativeParameters
) -> Iterator[tuple[ContinuousRecord, torch.Tensor]]:
    yield from speculative_decoding(pair, sampling, generator, params, verdict)


def verdict(drafted: DenoisingPass) -> DenoisingVerdict:
    """The path rule on drafts `q` with the target's `conditions` of their `positions` (`noise` unused:
    the target is evaluated along the draft's own paths)."""
    pair, q, conditions, positions = drafted.pair, drafted.q, drafted.conditions, drafted.positions
    p = along(pair.target, conditions, q.states, drafted.sampling, positions)  # the target's density of q's paths

    def resample(i: int) -> tuple[torch.Tensor, int, bool]:
        target_condition, draft_condition = conditions[i : i + 1], drafted.draft_conditions[i : i + 1]
        settings = (drafted.sampling, drafted.generator, drafted.params)
        return residual_sample(pair, target_condition, draft_condition, *settings, int(positions[i]))

    return DenoisingVerdict(p.log_density() - q.log_density(), resample)


def residual_sample(
    pair: PairSession,
    target_condition: torch.Tensor,
    draft_condition: torch.Tensor,
    sampling: SamplingSettings,
    generator: torch.Generator,
    params: SpeculativeParameters,
    position: int,
) -> tuple[torch.Tensor, int, bool]:
    """A token of norm(max(0, p - q)) at `position` on paths: whole target paths, each kept with
    max(0, 1 - q/p)."""

    def propose(count: int) -> tuple[torch.Tensor, torch.Tensor]:
        at = torch.full((count,), position)
        p = draw_fresh(pair.target, target_condition.expand(count, -1, -1), sampling, generator, at)
        q = along(pair.draft, draft_condition.expand(count, -1, -1), p.states, sampling, at)
        return p.tokens, 1 - torch.exp((q.log_density() - p.log_density()).clamp(max=0.0))

    return first_accepted(propose, params.max_tries, generator)
