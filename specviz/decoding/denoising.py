"""What every method on a continuous-token pair shares: feeding committed tokens to a session,
drawing tokens with a session's diffusion head, and recording trajectories for the trace."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from specviz.core.params import SpeculativeParameters
from specviz.core.settings import SamplingSettings
from specviz.decoding.passes import PassLoop
from specviz.models.continuous import ContinuousSession, PairSession, sample_noise
from specviz.models.networks.diffusion_head import Path
from specviz.trace import ContinuousRecord

PATH_DECIMALS = 4
RESAMPLE_BATCH = 32  # proposals drawn at once while resampling


def feed(session: ContinuousSession, pending: list[torch.Tensor]) -> torch.Tensor:
    """Commit `pending` tokens (decided, not yet seen by this session) in one pass; the condition
    (1, G, H) of the position after them. No pass when nothing is pending."""
    if pending:
        session.forward(torch.stack(pending))
        session.commit(len(pending))
        pending.clear()
    return session.next_condition


def span(first: int, count: int) -> torch.Tensor:
    """The positions first, ..., first + count - 1 (whose guidance a schedule may set)."""
    return torch.arange(first, first + count)


def draw(
    session: ContinuousSession,
    conditions: torch.Tensor,
    noise: torch.Tensor,
    sampling: SamplingSettings,
    positions: torch.Tensor,
) -> Path:
    """Denoise one token per condition (n, G, H) of `positions` (n,) from `noise` (n, S + 1, d) with
    the session's head."""
    return session.head.sample(conditions, noise, session.guidance_at(positions), sampling.temperature)


def draw_fresh(
    session: ContinuousSession,
    conditions: torch.Tensor,
    sampling: SamplingSettings,
    generator: torch.Generator,
    positions: torch.Tensor,
) -> Path:
    """Denoise one token per condition from fresh noise."""
    noise = sample_noise(len(conditions), session.head, session.token_dim, generator)
    return draw(session, conditions, noise, sampling, positions)


def along(
    session: ContinuousSession,
    conditions: torch.Tensor,
    states: torch.Tensor,
    sampling: SamplingSettings,
    positions: torch.Tensor,
) -> Path:
    """The session's head evaluated along given trajectories (n, S + 1, d) of tokens at `positions`."""
    return session.head.along(conditions, states, session.guidance_at(positions), sampling.temperature)


def points(states: torch.Tensor) -> list[list[tuple[float, float]]]:
    """The first two coordinates of each trajectory (n, S + 1, d), rounded for the trace."""
    plane = states[..., :2].round(decimals=PATH_DECIMALS).tolist()
    return [[(x, y) for x, y in trajectory] for trajectory in plane]


def alone(
    session: ContinuousSession,
    sampling: SamplingSettings,
    generator: torch.Generator,
    source: str,
    stop: int | None = None,
) -> Iterator[tuple[ContinuousRecord, torch.Tensor]]:
    """Each position (up to `stop`) sampled from the session's model given the tokens before it,
    yielded with the token (1, d). A token's pass feeds the previous token, so an image costs the
    prefill and one pass per token after the first; the last token is left unseen by the session."""
    pending: list[torch.Tensor] = []
    for position in range(session.geometry.seq_len if stop is None else stop):
        started = time.perf_counter()
        path = draw_fresh(session, feed(session, pending), sampling, generator, span(position, 1))
        pending.append(path.tokens[0])
        step_ms = (time.perf_counter() - started) * 1000
        draft_passes = 1 if source == "draft" else 0
        record = ContinuousRecord(
            start=position, committed=[0], source=[source], draft_passes=draft_passes, forward_ms=step_ms
        )
        yield record, path.tokens


def draft_tokens(
    draft: ContinuousSession,
    to_draft: list[torch.Tensor],
    noise: torch.Tensor,
    sampling: SamplingSettings,
) -> tuple[torch.Tensor, Path, int]:
    """The draft model's gamma = len(noise) tokens, one after another, each from its own noise; the
    draft commits each before drafting the next, except the last, left in `to_draft`. Returns the
    draft's conditions (gamma, G, H), the paths and the draft passes made."""
    conditions, paths, passes = [], [], 0
    for i in range(len(noise)):
        passes += bool(to_draft)
        condition = feed(draft, to_draft)
        path = draw(draft, condition, noise[i : i + 1], sampling, span(draft.position, 1))
        conditions.append(condition)
        paths.append(path)
        to_draft.append(path.tokens[0])
    joined = Path(*(torch.cat([getattr(p, name) for p in paths]) for name in ("states", "means", "log_vars")))
    return torch.cat(conditions), joined, passes


def target_pass(
    target: ContinuousSession, to_target: list[torch.Tensor], drafts: torch.Tensor, length: int
) -> tuple[torch.Tensor, int, int]:
    """One target pass over the tokens it has not seen and the drafts. Returns the target's
    conditions of every draft's position and of the one after the last (where the image continues),
    as rows (gamma or gamma + 1, G, H); how many undecided tokens preceded the drafts; and how many
    drafts the pass fed (the last is not fed at the image's end, where nothing follows it)."""
    first = target.position + len(to_target)
    fed = drafts if first + len(drafts) < length else drafts[:-1]
    inputs = list(to_target) + list(fed)
    before = len(to_target)
    to_target.clear()
    if not inputs:
        return target.next_condition, 0, 0
    every = torch.cat([target.next_condition, target.forward(torch.stack(inputs))])
    return every[before:], before, len(fed)


def keep_accepted(
    target: ContinuousSession, to_target: list[torch.Tensor], drafts: torch.Tensor, before: int, fed: int, accepted: int
) -> None:
    """Commit the target's pass up to the accepted drafts; an accepted draft the pass did not feed
    waits in `to_target`."""
    target.commit(before + min(accepted, fed))
    to_target.extend(drafts[fed:accepted])


def first_accepted(
    propose: Callable[[int], tuple[torch.Tensor, torch.Tensor]], max_tries: int, generator: torch.Generator
) -> tuple[torch.Tensor, int, bool]:
    """Acceptance-rejection sampling: `propose(count)` gives count proposals (count, d) and their
    acceptance probabilities (count,); the first accepted one, the number of proposals tried up to it,
    and whether the cap was reached instead (then the last proposal is returned, and the caller must
    record that it is not a draw of the residual). Proposals come in batches of 1, 1, 2, 4, ... up to
    RESAMPLE_BATCH (the first is usually accepted, and a proposal can cost a whole denoising path); they
    are i.i.d., so the first accepted of a batch is the one a one-at-a-time loop would have returned."""
    tries = 0
    while True:
        count = min(max(1, tries), RESAMPLE_BATCH, max_tries - tries)
        proposals, alpha = propose(count)
        hits = (torch.rand(count, generator=generator, device=generator.device) <= alpha).nonzero()
        if len(hits):
            index = int(hits[0])
            return proposals[index], tries + index + 1, False
        tries += count
        if tries >= max_tries:
            return proposals[-1], tries, True


@dataclass(frozen=True)
class DenoisingPass:
    """What a continuous speculative rule sees: gamma drafts (their paths `q`, drawn from `noise`), the draft's
    and the target's conditions of their `positions`, and the pair, settings and parameters of the run."""

    pair: PairSession
    sampling: SamplingSettings
    generator: torch.Generator
    params: SpeculativeParameters
    draft_conditions: torch.Tensor  # (gamma, G, H)
    q: Path
    conditions: torch.Tensor  # (gamma, G, H), the target's
    noise: torch.Tensor
    positions: torch.Tensor  # (gamma,)


@dataclass(frozen=True)
class DenoisingVerdict:
    """What a continuous speculative method makes of gamma drafts after the target's pass: the log
    of each draft's acceptance ratio, its parts for the trace (cspd's log Sigma, the target's aligned
    trajectories), and how to resample the position of a rejected draft: `resample(i)` gives the token,
    the proposals tried and whether the cap was reached."""

    log_ratio: torch.Tensor
    resample: Callable[[int], tuple[torch.Tensor, int, bool]]
    log_sigma: torch.Tensor | None = None
    target_states: torch.Tensor | None = None


Rule = Callable[[DenoisingPass], DenoisingVerdict]


def speculative_decoding(
    pair: PairSession,
    sampling: SamplingSettings,
    generator: torch.Generator,
    params: SpeculativeParameters,
    rule: Rule,
) -> Iterator[tuple[ContinuousRecord, torch.Tensor]]:
    """The loop both CSpD variants share (the paper's Algorithm 1 around its acceptance rule). Yields each
    iteration with its committed tokens (k, d)."""
    yield from DenoisingLoop(pair, sampling, generator, params, rule).records()


class DenoisingLoop(PassLoop):
    """Speculative decoding on a continuous-token pair: the target alone draws the pre-filled share of
    tokens; then per pass the draft proposes gamma tokens, the target conditions them in one pass, `rule`
    rates them, the first rejection (uniform above the ratio) ends the pass and is resampled, and after a
    fully accepted draft the target draws the next token itself."""

    def __init__(
        self,
        pair: PairSession,
        sampling: SamplingSettings,
        generator: torch.Generator,
        params: SpeculativeParameters,
        rule: Rule,
    ):
        super().__init__(generator.device)
        self.pair, self.sampling, self.generator, self.params, self.rule = pair, sampling, generator, params, rule
        self.length = pair.target.geometry.seq_len
        self.prefill = min(self.length, math.ceil(params.prefill * self.length - 1e-9))
        self.to_target: list[torch.Tensor] = []  # decided tokens the target has not seen yet
        self.to_draft: list[torch.Tensor] = []  # and those the draft has not seen
        self.position = self.prefill

    @property
    def done(self) -> bool:
        return self.position >= self.length

    def first_records(self) -> Iterator[tuple[ContinuousRecord, torch.Tensor]]:
        """The pre-filled share, drawn by the target alone."""
        for iteration, token in alone(self.pair.target, self.sampling, self.generator, "target", stop=self.prefill):
            self.to_draft.append(token[0])
            yield iteration, token
        self.to_target.extend(self.to_draft[-1:])  # `alone` leaves its last token unseen by the target

    def step(self) -> tuple[ContinuousRecord, torch.Tensor]:
        """Draft gamma tokens, condition them in one target pass, test them with the rule, and commit the
        accepted ones and the token after them."""
        target, draft, position = self.pair.target, self.pair.draft, self.position
        gamma = min(self.params.gamma, self.length - position)
        started = self.clock.mark()
        noise = sample_noise(gamma, draft.head, target.token_dim, self.generator)
        draft_conditions, q, draft_passes = draft_tokens(draft, self.to_draft, noise, self.sampling)
        drafted = self.clock.mark()
        conditions, before, fed = target_pass(target, self.to_target, q.tokens, self.length)
        passed = self.clock.mark()
        run = (self.pair, self.sampling, self.generator, self.params)
        verdict = self.rule(DenoisingPass(*run, draft_conditions, q, conditions[:gamma], noise, span(position, gamma)))
        ratio = torch.exp(verdict.log_ratio.clamp(max=0.0))
        uniform = torch.rand(gamma, generator=self.generator, device=self.generator.device)
        rejected = (uniform > ratio).nonzero()
        accepted = int(rejected[0]) if len(rejected) else gamma
        keep_accepted(target, self.to_target, q.tokens, before, fed, accepted)
        committed, source, tries = self._after_test(q, conditions, verdict, accepted, gamma)
        tested = min(accepted + 1, gamma)
        ended = self.clock.mark()
        record = ContinuousRecord(
            start=position,
            committed=[0] * len(committed),
            accepted=accepted,
            log_ratio=verdict.log_ratio.tolist(),
            log_sigma=None if verdict.log_sigma is None else verdict.log_sigma.tolist(),
            ratio=ratio.tolist(),
            uniform=uniform.tolist()[:tested] + [None] * (gamma - tested),
            fate=["accepted"] * accepted + ["rejected"] * (accepted < gamma) + ["discarded"] * (gamma - tested),
            draft_path=points(q.states),
            target_path=None if verdict.target_states is None else points(verdict.target_states),
            source=source,
            tries=tries,
            draft_passes=draft_passes,
            draft_ms=self.clock.ms(started, drafted),
            forward_ms=self.clock.ms(drafted, passed),
            verify_ms=self.clock.ms(passed, ended),
        )
        self.position += len(committed)
        return record, torch.stack(committed)

    def _after_test(
        self, q: Path, conditions: torch.Tensor, verdict: DenoisingVerdict, accepted: int, gamma: int
    ) -> tuple[list[torch.Tensor], list[str], int]:
        """The committed tokens (the accepted drafts, then the rejected position resampled or, after a full
        acceptance, the target's own next token), where each came from, and the proposals tried."""
        committed, source, tries = list(q.tokens[:accepted]), ["draft"] * accepted, 0
        if accepted < gamma:
            token, tries, capped = verdict.resample(accepted)
            committed.append(token)
            source.append("capped" if capped else "resampled")
            self.pair.draft.truncate(self.position + accepted)
            self.to_draft[:] = [token]
        elif self.position + gamma < self.length:
            follows = span(self.position + gamma, 1)
            token = draw_fresh(self.pair.target, conditions[gamma:], self.sampling, self.generator, follows).tokens[0]
            committed.append(token)
            source.append("target")
            self.to_draft.append(token)
        self.to_target.extend(committed[accepted:])
        return committed, source, tries
