"""Continuous speculative decoding (CSpD, Wang et al. 2025), as the paper writes it (Algorithm 1).

Per pass: the draft model proposes gamma tokens one after another; the target verifies them in one
pass. Both diffusion heads denoise each token from the same noise (x_T and every step's eps_t:
trajectory alignment, section 3.2), so the target's path to x_1^p runs beside the draft's to x_1^q.
A draft x_0 is accepted with min(1, Sigma * p(x_0 | x_1^p) / q(x_0 | x_1^q)) (Eq. 5), Sigma the
ratio of the two heads' variance products over the steps before the last (Eq. 4); the first
rejection ends the pass. The rejected position is resampled by acceptance-rejection (section 3.3):
proposals from the target's last step p(x | x_1^p), each kept with
alpha_s = max(0, Sigma p(x | x_1^p) - q(x | x_1^q)) / (Sigma p(x | x_1^p)) (Eq. 11). When every
draft is accepted, the target draws the next token from its condition after the last draft, as
speculative sampling does (Algorithm 1 leaves that case implicit). The first `prefill` share of the
tokens is drawn by the target alone (token pre-filling, 5% in the paper).

Not exact: Eq. 5 divides densities along two different trajectories, not the two models'
densities of the same token, so the output is only close to the target's; `cspd-exact` is the exact
variant, and `check-lossless` measures the gap. Differences from the authors' released code, on
purpose: no `inner_temperature` on the Gaussian term, Sigma as Eq. 4 (draft over target), a cut at
the first rejection, the target sees every draft it verifies, resampling stops at `max_tries` and
counts it (never a silent zero token), and pre-fill 5% rather than 15%.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from specviz.core.params import SpeculativeParameters
from specviz.core.settings import SamplingSettings
from specviz.decoding.denoising import DenoisingPass, DenoisingVerdict, draw, first_accepted, speculative_decoding
from specviz.models.continuous import PairSession
from specviz.models.networks.diffusion_head import gaussian_log_density
from specviz.trace import ContinuousRecord


def iterate(
    pair: PairSession, sampling: SamplingSettings, generator: torch.Generator, params: SpeculativeParameters
) -> Iterator[tuple[ContinuousRecord, torch.Tensor]]:
    yield from speculative_decoding(pair, sampling, generator, params, verdict)


def verdict(drafted: DenoisingPass) -> DenoisingVerdict:
    """The paper's rule on drafts `q` (drawn from `noise`) with the target's `conditions` of their
    `positions`."""
    q, sampling, generator = drafted.q, drafted.sampling, drafted.generator
    p = draw(
        drafted.pair.target, drafted.conditions, drafted.noise, sampling, drafted.positions
    )  # the target's paths on the drafts' noise
    log_sigma = 0.5 * (q.log_vars[:, :-1] - p.log_vars[:, :-1]).sum((1, 2))  # Eq. 4: steps T .. 2
    last_p, last_q = (p.means[:, -1], p.log_vars[:, -1]), (q.means[:, -1], q.log_vars[:, -1])
    log_ratio = log_sigma + gaussian_log_density(q.tokens, *last_p) - gaussian_log_density(q.tokens, *last_q)

    def resample(i: int) -> tuple[torch.Tensor, int, bool]:
        mean_p, log_var_p, mean_q, log_var_q = last_p[0][i], last_p[1][i], last_q[0][i], last_q[1][i]

        def propose(count: int) -> tuple[torch.Tensor, torch.Tensor]:
            step = torch.randn(count, mean_p.shape[-1], generator=generator, device=generator.device)
            x = mean_p + torch.exp(0.5 * log_var_p) * step  # the target's last step from x_1^p
            log_p, log_q = gaussian_log_density(x, mean_p, log_var_p), gaussian_log_density(x, mean_q, log_var_q)
            return x, 1 - torch.exp((log_q - log_sigma[i] - log_p).clamp(max=0.0))  # Eq. 11

        return first_accepted(propose, drafted.params.max_tries, generator)

    return DenoisingVerdict(log_ratio, resample, log_sigma, p.states)
