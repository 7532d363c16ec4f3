"""A MAR-style diffusion head: the per-token sampler of a continuous-token AR model.

The backbone gives each position a condition vector z; the head draws that position's token by
denoising Gaussian noise in a few tens of steps, each step conditioned on z. As in MAR (and
improved DDPM, which it builds on): a cosine noise schedule of 1000 training steps, sampling on an
evenly respaced subset of them, an MLP with adaptive layer norm on z and the timestep
(`SimpleMLPAdaLN`), epsilon prediction, and a learned variance per coordinate interpolated (in log
space) between the step's beta and its posterior variance. Classifier-free guidance mixes the
conditional and unconditional epsilon; the variance is the conditional row's, as MAR does.

What differs from MAR, on purpose: the last step (x_1 -> x_0) keeps its noise. MAR returns the last
mean, which makes a token's density a point mass; CSpD's acceptance needs the Gaussian density of
x_0 given x_1 (its Eq. 5), and the exact path test needs every transition to be a Gaussian. The
temperature tau scales every transition's standard deviation (variance tau^2 Sigma), so sampling
and the densities below agree at any temperature.

A token's *path* is its whole denoising trajectory x_T, ..., x_0 with the mean and log variance
of every transition; `sample` draws one from given noise (so two heads can share it: CSpD's
trajectory alignment) and `along` evaluates a head's transitions along any given path.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

TRAINING_STEPS = 1000
# the prediction of x_0 is clipped to this box, as image diffusion clips to [-1, 1]: at the noisiest step
# (alpha bar 2e-9) a small network's epsilon error would otherwise be amplified ten-thousandfold
X0_LIMIT = 4.0
LOG_2PI = math.log(2 * math.pi)


def cosine_alpha_bars(steps: int = TRAINING_STEPS, offset: float = 0.008) -> torch.Tensor:
    """(steps,) cumulative alpha products of the cosine schedule (Nichol and Dhariwal), float64,
    with each beta clipped at 0.999 as there."""
    t = torch.arange(steps + 1, dtype=torch.float64) / steps
    f = torch.cos((t + offset) / (1 + offset) * math.pi / 2) ** 2
    betas = (1 - f[1:] / f[:-1]).clamp(max=0.999)
    return torch.cumprod(1 - betas, 0)


@dataclass(frozen=True)
class Schedule:
    """The noise schedule on a chosen set of training timesteps, float64.

    `timesteps[k]` is the training step of sampling step k (ascending, the last one T - 1); beta,
    alpha bar and the posterior variance are those of the respaced chain, as improved DDPM respaces.
    Index 0 is the step that produces x_0.
    """

    timesteps: torch.Tensor
    betas: torch.Tensor
    alpha_bars: torch.Tensor
    posterior_log_var: torch.Tensor  # clipped at index 0, where the posterior variance is 0
    coef_x0: torch.Tensor
    coef_xt: torch.Tensor

    @classmethod
    def respaced(cls, count: int, steps: int = TRAINING_STEPS) -> Schedule:
        full = cosine_alpha_bars(steps)
        # improved DDPM's `space_timesteps` adds a float stride instead; the two agree at the step counts
        # used here (25, MAR's 100) and may differ by one timestep at some others (21, 23, 27, ...)
        timesteps = torch.linspace(0, steps - 1, count).round().long().unique()
        alpha_bars = full[timesteps]
        previous = torch.cat([torch.ones(1, dtype=torch.float64), alpha_bars[:-1]])
        betas = 1 - alpha_bars / previous
        posterior = betas * (1 - previous) / (1 - alpha_bars)
        log_var = torch.log(torch.cat([posterior[1:2], posterior[1:]]))
        coef_x0 = betas * previous.sqrt() / (1 - alpha_bars)
        coef_xt = (1 - previous) * (1 - betas).sqrt() / (1 - alpha_bars)
        return cls(timesteps, betas, alpha_bars, log_var, coef_x0, coef_xt)

    @property
    def count(self) -> int:
        return len(self.timesteps)


def timestep_embedding(t: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    """Sinusoidal embedding of (n,) timesteps, as DDPM and MAR."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    angles = t.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)


# (shift, 1 + scale, gate) of a block, or (shift, 1 + scale) of the final layer: functions of the timestep
# and the condition only, so a sampler computes them once for all its steps
Modulation = tuple[torch.Tensor, ...]


class AdaLNBlock(nn.Module):
    """A residual MLP block whose layer norm is shifted, scaled and gated by the condition."""

    def __init__(self, width: int, affine_norm: bool = False):
        super().__init__()
        self.norm = nn.LayerNorm(width, elementwise_affine=affine_norm, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(width, width), nn.SiLU(), nn.Linear(width, width))
        self.modulation = nn.Sequential(nn.SiLU(), nn.Linear(width, 3 * width))

    def modulate(self, y: torch.Tensor) -> Modulation:
        shift, scale, gate = self.modulation(y).chunk(3, dim=-1)
        return shift, scale + 1, gate

    def weights(self) -> BlockWeights:
        (first, _, second), norm = self.mlp, self.norm
        return BlockWeights(
            norm.normalized_shape,
            norm.weight,
            norm.bias,
            norm.eps,
            first.weight,
            first.bias,
            second.weight,
            second.bias,
        )


class BlockWeights(NamedTuple):
    """One AdaLN block's tensors, as `denoise_step` reads them."""

    norm_shape: tuple[int, ...]
    norm_weight: torch.Tensor | None
    norm_bias: torch.Tensor | None
    norm_eps: float
    first_weight: torch.Tensor
    first_bias: torch.Tensor
    second_weight: torch.Tensor
    second_bias: torch.Tensor


class DenoiserWeights(NamedTuple):
    """The tensors of a denoising step, gathered once per sampled token: a sampler runs the step on a
    few rows 25 times a token, where nn.Module's calls and attribute lookups cost as much as the
    arithmetic, so the step is functional calls on these."""

    input_weight: torch.Tensor
    input_bias: torch.Tensor
    blocks: list[BlockWeights]
    final_shape: tuple[int, ...]
    final_eps: float
    output_weight: torch.Tensor
    output_bias: torch.Tensor


def denoise_step(
    weights: DenoiserWeights, x: torch.Tensor, modulations: list[Modulation]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Epsilon and v from x_t and the modulations of its timestep and condition. The modulations
    may carry more leading dimensions than x: one state (n, d) denoised under (G, n, w) rows of
    guidance broadcasts, so the state is projected once, not once per row."""
    h = F.linear(x, weights.input_weight, weights.input_bias)
    for block, (shift, scale, gate) in zip(weights.blocks, modulations, strict=False):
        normed = F.layer_norm(h, block.norm_shape, block.norm_weight, block.norm_bias, block.norm_eps)
        hidden = F.silu(F.linear(torch.addcmul(shift, normed, scale), block.first_weight, block.first_bias))
        h = torch.addcmul(h, gate, F.linear(hidden, block.second_weight, block.second_bias))
    shift, scale = modulations[-1]
    h = torch.addcmul(shift, F.layer_norm(h, weights.final_shape, eps=weights.final_eps), scale)
    eps, v = F.linear(h, weights.output_weight, weights.output_bias).chunk(2, dim=-1)
    return eps, v


class DenoiserMLP(nn.Module):
    """MAR's SimpleMLPAdaLN: (x_t, t, z) -> epsilon and the variance interpolation v, per coordinate.
    MAR's own sizes: `frequency_dim` 256 and `affine_norm` (its blocks' layer norms have weights); the
    embedded pair was trained with 128 and none."""

    def __init__(
        self,
        token_dim: int,
        cond_dim: int,
        width: int,
        blocks: int,
        frequency_dim: int = 128,
        affine_norm: bool = False,
    ):
        super().__init__()
        self.frequency_dim = frequency_dim
        self.time_embed = nn.Sequential(nn.Linear(frequency_dim, width), nn.SiLU(), nn.Linear(width, width))
        self.cond_embed = nn.Linear(cond_dim, width)
        self.input_proj = nn.Linear(token_dim, width)
        self.blocks = nn.ModuleList(AdaLNBlock(width, affine_norm) for _ in range(blocks))
        self.final_norm = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.final_modulation = nn.Sequential(nn.SiLU(), nn.Linear(width, 2 * width))
        self.output = nn.Linear(width, 2 * token_dim)
        for module in [*(b.modulation[-1] for b in self.blocks), self.final_modulation[-1], self.output]:
            nn.init.zeros_(module.weight)  # every block starts as the identity, as MAR and DiT do
            nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor, t: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.denoise(x, self.embed_time(t) + self.cond_embed(z))

    def embed_time(self, t: torch.Tensor) -> torch.Tensor:
        return self.time_embed(timestep_embedding(t, self.frequency_dim))

    def denoise(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Epsilon and v from x_t and y, the sum of the timestep's and the condition's embeddings."""
        return denoise_step(self.weights(), x, self.modulations(y))

    def modulations(self, y: torch.Tensor) -> list[Modulation]:
        """Every block's modulation and the final layer's, from y (any leading shape)."""
        shift, scale = self.final_modulation(y).chunk(2, dim=-1)
        return [block.modulate(y) for block in self.blocks] + [(shift, scale + 1)]

    def weights(self) -> DenoiserWeights:
        """The tensors `denoise_step` reads (references, so they follow training)."""
        return DenoiserWeights(
            self.input_proj.weight, self.input_proj.bias, [block.weights() for block in self.blocks],
            self.final_norm.normalized_shape, self.final_norm.eps, self.output.weight, self.output.bias,
        )  # fmt: skip


Guidance = float | torch.Tensor  # one classifier-free guidance scale, or one per token (n,)


def per_row(guidance: Guidance) -> float | torch.Tensor:
    """A guidance scale ready to multiply (n, d) rows: a tensor of scales as a column."""
    return guidance[:, None] if isinstance(guidance, torch.Tensor) else guidance


def gaussian_log_density(x: torch.Tensor, mean: torch.Tensor, log_var: torch.Tensor) -> torch.Tensor:
    """log N(x; mean, diag(exp(log_var))), summed over the last dimension."""
    return -0.5 * (((x - mean) ** 2) * torch.exp(-log_var) + log_var + LOG_2PI).sum(-1)


@dataclass(frozen=True)
class Path:
    """Denoising trajectories of n tokens: `states` (n, S + 1, d) from x_T to x_0, and the mean and
    log variance (n, S, d) of each transition states[:, k] -> states[:, k + 1] under one head."""

    states: torch.Tensor
    means: torch.Tensor
    log_vars: torch.Tensor

    @property
    def tokens(self) -> torch.Tensor:
        return self.states[:, -1]

    def step_log_densities(self) -> torch.Tensor:
        """(n, S) log density of each transition, and in column 0 also that of x_T under N(0, I)."""
        logs = gaussian_log_density(self.states[:, 1:], self.means, self.log_vars)
        origin = torch.zeros_like(self.states[:, 0])
        start = gaussian_log_density(self.states[:, 0], origin, origin)  # N(x_T; 0, I)
        return torch.cat([logs[:, :1] + start[:, None], logs[:, 1:]], dim=1)

    def log_density(self) -> torch.Tensor:
        """(n,) log density of the whole path: N(x_T; 0, I) times every Gaussian transition."""
        return self.step_log_densities().sum(-1)


@dataclass(frozen=True)
class StepConstants:
    """One sampling step's coefficients: mean = coef_x0 clip(x_0) + coef_xt x with x_0 scaled by
    `x0_scale` = coef_x0 / sqrt(alpha bar), and log var = half v + offset (temperature included)."""

    sqrt_1mab: float
    x0_scale: torch.Tensor
    coef_x0: float
    coef_xt: float
    half: float
    offset: torch.Tensor


class DiffusionHead:
    """Sampling and density evaluation of a trained DenoiserMLP under a schedule of `steps` steps.

    Conditions are (n, G, H): G = 1, or G = 2 rows (conditional, unconditional) mixed with
    `guidance` as classifier-free guidance: one scale, or one per token (n,) where the scale follows
    a schedule over the positions (MAR's linear schedule). Every computation runs in float32.
    """

    def __init__(self, network: DenoiserMLP, steps: int, x0_limit: float = X0_LIMIT):
        self.network, self.x0_limit = network, x0_limit
        self.schedule = Schedule.respaced(steps)
        s = self.schedule
        # sampling step k of the loop runs from the noisiest index (S - 1) down to 0
        order = torch.arange(s.count - 1, -1, -1)
        as32 = lambda values: values[order].float()  # noqa: E731
        self._t = s.timesteps[order]
        self._log_beta, self._log_posterior = as32(torch.log(s.betas)), as32(s.posterior_log_var)
        self._coef_x0, self._coef_xt = as32(s.coef_x0), as32(s.coef_xt)
        self._sqrt_ab, self._sqrt_1mab = as32(s.alpha_bars.sqrt()), as32((1 - s.alpha_bars).sqrt())
        device = next(network.parameters()).device
        with torch.no_grad():  # the sampling timesteps are fixed: embed them once
            self._time_table = network.embed_time(self._t.to(device)).float()
        self._constants: dict[float, list[StepConstants]] = {}  # per temperature, made once

    @property
    def steps(self) -> int:
        return self.schedule.count

    def _step_constants(self, temperature: float) -> list[StepConstants]:
        """Per sampling step (a tensor index per constant and step would cost more than the
        arithmetic on a few tokens): the x_0 and mean coefficients, and log var = half v + offset."""
        if temperature not in self._constants:
            self._constants[temperature] = self._make_constants(temperature)
        return self._constants[temperature]

    def _make_constants(self, temperature: float) -> list[StepConstants]:
        log_temperature = 2 * math.log(max(temperature, 1e-6))
        half = (self._log_beta - self._log_posterior) / 2
        offset = self._log_posterior + half + log_temperature
        columns = (self._sqrt_1mab, self._sqrt_ab, self._coef_x0, self._coef_xt, half, offset)
        scalar = functools.partial(torch.tensor, device=self._time_table.device)
        return [
            StepConstants(sqrt_1mab, scalar(coef_x0 / sqrt_ab), coef_x0, coef_xt, half_k, scalar(offset_k))
            for sqrt_1mab, sqrt_ab, coef_x0, coef_xt, half_k, offset_k in zip(
                *(column.tolist() for column in columns), strict=True
            )
        ]

    def _transition(
        self, x: torch.Tensor, eps: torch.Tensor, v: torch.Tensor, constants: StepConstants, weight: Guidance
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and log variance (n, d) of one sampling step at states x (n, d), from the network's
        epsilon and v (G, n, d) and the step's constants. The one place this arithmetic is written,
        so that a path drawn by `sample` and evaluated by `along` agree to float32's last bit: at the
        noisiest steps x_0 is a difference of near-equal numbers divided by about 1e-4, where any
        reordering of the operations shows. (A Python float multiplying a tensor is wrapped in a
        tensor on every call; the multipliers are kept as 0-dim tensors, and additions take theirs as alpha.)"""
        mixed = torch.lerp(eps[1], eps[0], weight) if len(eps) == 2 else eps[0]
        # coef_x0 * clip(x_0), x_0 = (x - sqrt(1 - alpha bar) eps) / sqrt(alpha bar), scaled before the clip
        mean = torch.sub(x, mixed, alpha=constants.sqrt_1mab).mul_(constants.x0_scale)
        if math.isfinite(self.x0_limit):
            mean.clamp_(-self.x0_limit * constants.coef_x0, self.x0_limit * constants.coef_x0)
        log_var = torch.add(constants.offset, v[0], alpha=constants.half)
        return mean.add_(x, alpha=constants.coef_xt), log_var

    def _embedded(self, conditions: torch.Tensor) -> torch.Tensor:
        """The conditions (n, G, H) embedded with every sampling step's timestep: (S, G, n, width)."""
        return self.network.cond_embed(conditions.transpose(0, 1))[None] + self._time_table[:, None, None]

    def sample(self, conditions: torch.Tensor, noise: torch.Tensor, guidance: Guidance, temperature: float) -> Path:
        """Denoise n tokens from `noise` (n, S + 1, d): noise[:, 0] is x_T, noise[:, k + 1] the
        standard normal draw of step k. The same noise in two heads gives aligned trajectories.

        The loop runs a few tokens through a small MLP, so its cost is the number of tensor
        operations, not their size: the blocks' modulations (functions of the timestep and the
        condition only) are computed for all steps before it, the step reads its weights gathered
        once, and its arithmetic is a few fused operations."""
        y = self._embedded(conditions)  # (S, G, n, w): the conditional rows, then the others
        modulations = [[part.unbind(0) for part in parts] for parts in self.network.modulations(y)]
        draws = noise.float().unbind(1)
        weight, weights = per_row(guidance), self.network.weights()
        x, states, means, log_vars = draws[0], [draws[0]], [], []
        for k, constants in enumerate(self._step_constants(temperature)):
            # x (n, d) broadcasts over the G rows of the modulations
            eps, v = denoise_step(weights, x, [[part[k] for part in parts] for parts in modulations])
            mean, log_var = self._transition(x, eps, v, constants, weight)
            x = torch.addcmul(mean, log_var.exp().sqrt_(), draws[k + 1])  # sqrt, not * 0.5: no float to wrap
            states.append(x)
            means.append(mean)
            log_vars.append(log_var)
        return Path(torch.stack(states, 1), torch.stack(means, 1), torch.stack(log_vars, 1))

    def along(self, conditions: torch.Tensor, states: torch.Tensor, guidance: Guidance, temperature: float) -> Path:
        """This head's transitions evaluated along given trajectories `states` (n, S + 1, d): all
        steps in one batched network call, since every step's input state is known."""
        n, _, d = states.shape
        rows = conditions.shape[1]
        y = self._embedded(conditions).permute(1, 2, 0, 3)  # (G, n, S, w)
        x = states[:, :-1].float()
        eps, v = self.network.denoise(x.expand(rows, -1, -1, -1).reshape(-1, d), y.reshape(-1, y.shape[-1]))
        eps, v = eps.view(rows, n, self.steps, d), v.view(rows, n, self.steps, d)
        weight = per_row(guidance)
        steps = [
            self._transition(x[:, k], eps[:, :, k], v[:, :, k], constants, weight)
            for k, constants in enumerate(self._step_constants(temperature))
        ]
        means, log_vars = zip(*steps, strict=True)
        return Path(states, torch.stack(means, 1), torch.stack(log_vars, 1))


def diffusion_loss(
    network: DenoiserMLP, x0: torch.Tensor, z: torch.Tensor, schedule: Schedule, x0_limit: float = X0_LIMIT
) -> torch.Tensor:
    """Improved DDPM's hybrid loss on tokens x0 (N, d) with conditions z (N, H): epsilon MSE plus the
    variational bound with the mean held fixed (so the bound trains only the variance), on timesteps
    drawn uniformly from `schedule` (the full training schedule, `Schedule.respaced(TRAINING_STEPS)`)."""
    t = torch.randint(schedule.count, (x0.shape[0],), device=x0.device)
    xt, noise = noised(schedule, t, x0)
    eps, v = network(xt, schedule.timesteps.to(x0.device)[t], z)
    eps, v = eps.float(), v.float()
    mse = ((eps - noise) ** 2).mean()
    mean, log_var = transition_moments(schedule, t, xt, eps.detach(), v, x0_limit)
    true_mean, log_posterior = posterior_moments(schedule, t, xt, x0)
    kl = gaussian_kl(true_mean, log_posterior, mean, log_var)
    nll = 0.5 * ((x0 - mean) ** 2 * torch.exp(-log_var) + log_var + LOG_2PI)
    bound = torch.where((t > 0)[:, None], kl, nll).mean() / math.log(2.0)
    return mse + bound


def noised(schedule: Schedule, t: torch.Tensor, x0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens x0 (N, d) noised to the schedule's steps t (N,): x_t and the standard normal noise drawn."""
    ab = schedule.alpha_bars.to(x0.device)[t].float()[:, None]
    noise = torch.randn_like(x0)
    return ab.sqrt() * x0 + (1 - ab).sqrt() * noise, noise


def _at_steps(schedule: Schedule, t: torch.Tensor, like: torch.Tensor):
    """A function reading a schedule column at steps t (N,) as an (N, 1) float32 column on `like`'s device."""
    return lambda values: values.to(like.device)[t].float()[:, None]


def transition_moments(
    schedule: Schedule,
    t: torch.Tensor,
    xt: torch.Tensor,
    eps: torch.Tensor,
    v: torch.Tensor,
    x0_limit: float = X0_LIMIT,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and log variance (N, d) of a network's step x_t -> x_(t-1) at the schedule's steps t (N,),
    from its epsilon and variance interpolation v: `DiffusionHead`'s sampling arithmetic, per row
    rather than per step."""
    table = _at_steps(schedule, t, xt)
    ab, log_posterior = table(schedule.alpha_bars), table(schedule.posterior_log_var)
    fraction = (v + 1) / 2
    log_var = fraction * table(schedule.betas).log() + (1 - fraction) * log_posterior
    x0_pred = ((xt - (1 - ab).sqrt() * eps) / ab.sqrt()).clamp(-x0_limit, x0_limit)
    return table(schedule.coef_x0) * x0_pred + table(schedule.coef_xt) * xt, log_var


def posterior_moments(
    schedule: Schedule, t: torch.Tensor, xt: torch.Tensor, x0: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and log variance of q(x_(t-1) | x_t, x_0), the step a network is trained towards."""
    table = _at_steps(schedule, t, xt)
    return table(schedule.coef_x0) * x0 + table(schedule.coef_xt) * xt, table(schedule.posterior_log_var)


def gaussian_kl(
    mean_p: torch.Tensor, log_var_p: torch.Tensor, mean_q: torch.Tensor, log_var_q: torch.Tensor
) -> torch.Tensor:
    """KL(N_p || N_q) per coordinate of two diagonal Gaussians."""
    return 0.5 * (
        log_var_q - log_var_p - 1 + torch.exp(log_var_p - log_var_q) + (mean_p - mean_q) ** 2 * torch.exp(-log_var_q)
    )
