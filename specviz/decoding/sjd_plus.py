"""SJD++ (Teng et al., arXiv 2512.07503, TPAMI 2026; the SJD authors), made exact: lossless.

What SJD++ is: SJD (`sjd.py`) plus the reuse of high-confidence drafts after each verification, instead of
redrawing every draft after the first rejection; the authors report 2-3x latency and 2-7x step compression on
Lumina-mGPT, Emu3 and LlamaGen. Sources read: the paper's abstract and second-hand summaries only (its body
could not be read, and the authors published no code), and a third-party port for text, not by the authors
(`phymhan/nanochat`, scripts/demo_sjd_nanochat.py `generate_sjd` and scripts/dev_sjd.md), which cites the
paper's Eq. 6: at each unaccepted position after the first rejection keep the old draft x_j where its
confidence C_j = p_new(x_j) / p_old(x_j) exceeds tau, else redraw it from p_new.

The rule here. Verification is SJD's: draft x accepted with probability min(1, p_new(x)/q(x)), the first
rejection resampled from norm(max(0, p_new - q)). Then at every position j after the first rejection the
next draft is the old x_j where min(1, p_new_j(x_j)/q_j(x_j)) > tau, else a fresh draw from p_new_j; the
position after the window (the refined draft) has no old draft and is a fresh draw from p_new there.

Why it stays exact. SJD's test is exact for any draft whose recorded distribution is the law it was drawn
from, given what the target at its position depends on. The old x_j was drawn from q_j, and neither p_new_j
(a row of the pass that sees only the tokens before j) nor anything decided at the positions before j
depends on it, so the new draft's law is the mixture

    q'_j(x) = q_j(x) 1[x passes] + (1 - sum_y q_j(y) 1[y passes]) p_new_j(x),

"y passes" meaning q_j(y) > 0 and min(1, p_new_j(y)/q_j(y)) > tau (the keep test at every token, not only
the draft's). q' is what is recorded as the next draft distribution (`WindowVerdict.next_probs`), so the next
pass verifies the draft against its true law and the residual there is norm(max(0, p - q')). Where no token
passes, q' is p_new exactly, and the rule is SJD's.

Departures:
- the port records p_new as the next draft distribution for a reused draft too; a reused draft is then
  tested as if drawn from p_new, which it is not: not exact (`tests/test_lossless.py` catches it);
- the confidence is compared capped at 1, min(1, C_j), as SJD's acceptance ratio is: the same test for every
  tau below 1, and tau = 1 reuses nothing (plain SJD, token for token). The port's tau above 1 (reuse only
  drafts whose probability grew tau-fold; its own sweep on text found them worse) is not offered;
- tau's default is the port's 0.5; the paper's own default could not be read (the port's sweep on text found
  0.1 best).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import torch

from specviz.core.params import SjdPlusParameters
from specviz.core.settings import SamplingSettings
from specviz.decoding.sampling import acceptance_ratio, sample
from specviz.decoding.window import WindowPass, WindowVerdict, run_window
from specviz.models.protocol import Session
from specviz.trace import Iteration


def reuse(p_new: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, tau: float) -> tuple[torch.Tensor, torch.Tensor]:
    """SJD++'s reuse test at every row: (n,) whether each draft (drawn from its row of q) is kept, and the
    (n, V) law of the next draft, the mixture q' of the kept draft and a fresh draw from p_new. The test is
    made at every token and the draft's own entry read from it, so the two always agree."""
    passes = (q > 0) & (acceptance_ratio(p_new, q) > tau)
    keep = passes.gather(1, drafts[:, None]).squeeze(1)
    kept_mass = q * passes
    passed = kept_mass.sum(-1, keepdim=True)
    redrawn = (q * ~passes).sum(-1, keepdim=True)  # the chance of a redraw: the mass of the tokens that fail
    total = (passed + redrawn).clamp(min=torch.finfo(q.dtype).tiny)  # q's own sum, about 1
    return keep, kept_mass / total + (redrawn / total) * p_new  # where nothing passes: p_new exactly


def verify(step: WindowPass, tau: float) -> WindowVerdict:
    ratio = step.speculative_ratio
    uniform, accepted = step.accept(ratio)
    head = step.exact_head(accepted)
    w, p = step.w, step.p
    keep, mixture = reuse(p[1:w], step.q[1:], step.drafts[1:], tau)
    fresh = sample(p[1:], step.generator)  # SJD's redraws, in SJD's order: offsets 1..w (w: the refined draft)
    return WindowVerdict(
        accepted=accepted,
        head=head,
        next_drafts=torch.cat([torch.where(keep, step.drafts[1:], fresh[: w - 1]), fresh[w - 1 :]]),
        ratio=ratio,
        uniform=uniform,
        next_probs=torch.cat([mixture, p[w:]]),
        reused=torch.cat([keep.new_zeros(1), keep]),
    )


def iterate(
    session: Session, sampling: SamplingSettings, generator: torch.Generator, params: SjdPlusParameters
) -> Iterator[Iteration]:
    return run_window(session, sampling, generator, params, partial(verify, tau=params.reuse_threshold))
