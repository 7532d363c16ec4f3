"""Speculative Coupled Decoding with maximal coupling (SCD, So et al., ICML 2026), lossless.

SJD's verification, but the drafts after the first rejection are not redrawn independently: each
runs the same accept-or-residual test against its own previous draft (maximal coupling), so it
keeps its token with probability min(1, p_new/p_old) and otherwise takes a residual draw. The new
draft is distributed exactly as p_new, so p_new (not the old distribution) is what the next
iteration verifies it against. The uniforms of the verification are reused for the coupling, so
drafting costs no extra randomness or pass. The row after the window has no previous draft: its
draft is a plain draw.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from specviz.core.params import WindowParameters
from specviz.core.settings import SamplingSettings
from specviz.decoding.sampling import maximal_coupling, sample
from specviz.decoding.window import WindowPass, WindowVerdict, run_window
from specviz.models.protocol import Session
from specviz.trace import Iteration


def verify(step: WindowPass) -> WindowVerdict:
    ratio = step.speculative_ratio
    uniform, accepted = step.accept(ratio)
    p, q, drafts, generator = step.p, step.q, step.drafts, step.generator
    coupled = maximal_coupling(p[1 : step.w], q[1:], drafts[1:], uniform[1:], generator)
    return WindowVerdict(
        accepted=accepted,
        head=step.exact_head(accepted),
        next_drafts=torch.cat([coupled, sample(p[step.w :], generator)]),
        ratio=ratio,
        uniform=uniform,
        uniform_decides_carried=True,
    )


def iterate(
    session: Session, sampling: SamplingSettings, generator: torch.Generator, params: WindowParameters
) -> Iterator[Iteration]:
    return run_window(session, sampling, generator, params, verify)
