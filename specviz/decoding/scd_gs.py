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

from specviz.core.params import WindowParameters
from specviz.core.settings import SamplingSettings
from specviz.decoding.sampling import gumbel_argmax, gumbel_noise
from specviz.decoding.window import WindowPass, WindowVerdict, run_window
from specviz.models.protocol import Session
from specviz.trace import Iteration


def iterate(
    session: Session, sampling: SamplingSettings, generator: torch.Generator, params: WindowParameters
) -> Iterator[Iteration]:
    key = int(torch.randint(2**62, (1,), generator=generator, device=session.next_logits.device))
    vocab = session.geometry.vocab_size

    def shared_gumbel_draw(probs: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return gumbel_argmax(probs, gumbel_noise(key, positions, vocab))

    def verify(step: WindowPass) -> WindowVerdict:
        ratio = step.speculative_ratio
        uniform, accepted = step.accept(ratio)
        return WindowVerdict(
            accepted=accepted,
            head=step.exact_head(accepted),
            next_drafts=shared_gumbel_draw(step.p[1:], step.positions[1:]),
            ratio=ratio,
            uniform=uniform,
        )

    return run_window(session, sampling, generator, params, verify, draw=shared_gumbel_draw)
