"""The sliding Jacobi window: the one loop every Jacobi-family method runs (SJD, section 4.1).

State between passes: a decided *head* token (an exact sample, not yet in the KV cache), then up to
W draft tokens for the positions after it, each with the distribution q it was drawn from. A pass
feeds [head, drafts] and gives the target p for every draft position plus the one after the window.
A method is its verification rule (`Rule`, a short function in the method's file): from p and q it
decides how many drafts to accept, the exact token that becomes the next head, and the next draft at
every later position. The window then commits, slides and fills its new slots: after a rejection
the first new slot takes the model's own row after the window (the "refined draft" of the official
SJD code; exact, since any draft is, as long as its draft distribution is the one recorded), the
others one of SJD's initialisations (section 4.2, `initialisers.py`). Forced layout slots get their forced token, so
they always pass.

Everything a record needs is moved to the host in one copy per pass, together with the accepted
count, so a pass costs one host sync on a GPU; there the timings come from CUDA events.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from specviz.core.params import WindowParameters
from specviz.core.settings import SamplingSettings
from specviz.decoding.initialisers import INITIALISERS, Draw, SlotContext
from specviz.decoding.passes import PassClock, TokenLoop
from specviz.decoding.sampling import acceptance_ratio, leading_true, next_exact_token, sample, token_probs
from specviz.models.protocol import IMAGE_CELL, Session
from specviz.models.syncing import read_to_host
from specviz.trace import GroupTest, Iteration, WindowRecord

RESIDUAL_TOP = 6  # tokens recorded at a rejected position, enough to draw its residual


@dataclass
class WindowPass:
    """What a verification rule sees: this pass's drafts and the model's answer."""

    drafts: torch.Tensor  # (w,) tokens verified now
    q: torch.Tensor  # (w, V) the distribution each draft was drawn from
    p: torch.Tensor  # (w + 1, V) target rows: the draft positions, then the position after the window
    positions: torch.Tensor  # (w + 1,) absolute sequence positions of the rows of p
    generator: torch.Generator
    started: Any = None  # the pass clock's marks before and after the model pass, for the record
    forwarded: Any = None

    @property
    def w(self) -> int:
        return len(self.drafts)

    @property
    def p_old(self) -> torch.Tensor:
        """q(x) of every draft x."""
        return token_probs(self.q, self.drafts)

    @property
    def p_new(self) -> torch.Tensor:
        """p(x) of every draft x."""
        return token_probs(self.p[: self.w], self.drafts)

    def uniforms(self) -> torch.Tensor:
        """One fresh uniform per draft."""
        return torch.rand(self.w, generator=self.generator, device=self.p.device)

    @property
    def speculative_ratio(self) -> torch.Tensor:
        """min(1, p_new(x) / p_old(x)) of every draft x: SJD's acceptance probability (Eq. 1)."""
        return acceptance_ratio(self.p_new, self.p_old)

    def accept(self, ratio: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The speculative test of every draft at `ratio`: a fresh uniform each, and the accepted count, the
        leading run of drafts whose uniform fell below their ratio. Returns (uniform, accepted)."""
        uniform = self.uniforms()
        return uniform, leading_true(uniform < ratio)

    def exact_head(self, accepted: torch.Tensor, target: torch.Tensor | None = None) -> torch.Tensor:
        """The exact token after the accepted drafts: a draw of the next row after a full acceptance, of the
        residual norm(max(0, target - q)) at a rejection (SJD Eq. 2; `target` p unless a rule relaxes it)."""
        return next_exact_token(self.p, self.q, accepted, self.generator, target=target)


@dataclass
class WindowVerdict:
    """A rule's decision, all on the device. Offsets are relative to the first draft."""

    accepted: torch.Tensor  # 0-d: drafts accepted, a leading run
    head: torch.Tensor  # (1,) the exact token after the accepted drafts
    next_drafts: torch.Tensor  # (w,) next draft of offsets 1..w (offset w, after the window: the refined draft)
    ratio: torch.Tensor  # (w,) probability with which each draft was (or would have been) accepted
    uniform: torch.Tensor | None = None  # (w,) the uniform that decided each draft's acceptance
    uniform_decides_carried: bool = False  # the uniforms after the rejection also decided the next drafts
    next_probs: torch.Tensor | None = None  # (w, V) distributions of next_drafts; default p[1:] (exact)
    group_size: torch.Tensor | None = None  # relaxed methods: (w,) tokens whose mass the test pooled
    group_mass_new: torch.Tensor | None = None  # (w,) pooled target mass
    group_mass_old: torch.Tensor | None = None  # (w,) pooled draft mass
    reused: torch.Tensor | None = None  # (w,) bool: the draft stays as the next one by a reuse rule (SJD++)


Rule = Callable[[WindowPass], WindowVerdict]


def run_window(
    session: Session,
    sampling: SamplingSettings,
    generator: torch.Generator,
    params: WindowParameters,
    rule: Rule,
    draw: Draw | None = None,
) -> Iterator[Iteration]:
    """Yield one Iteration per model pass until every position is fixed."""
    yield from JacobiWindow(session, sampling, generator, params, rule, draw).records()


class JacobiWindow(TokenLoop):
    """The window between passes: the head, the drafts after it with the q each was drawn from, and the
    initialisation that fills new slots. A step is a pass (`forward()`), the rule's verdict on it, and
    `advance(pass, verdict)`, which applies the verdict and returns the pass's record."""

    def __init__(
        self,
        session: Session,
        sampling: SamplingSettings,
        generator: torch.Generator,
        params: WindowParameters,
        rule: Rule,
        draw: Draw | None = None,
    ):
        super().__init__(session, sampling, generator, params)
        self.rule = rule
        geometry, device = session.geometry, self.device
        self.positions = torch.arange(self.seq_len + 1, device=device)  # index seq_len: past the end
        self.forced = torch.tensor([*geometry.layout, IMAGE_CELL], device=device)
        self.values = torch.zeros(self.seq_len + 1, dtype=torch.long, device=device)  # latest token everywhere
        draw = draw or (lambda q, positions: sample(q, generator))
        self.initialiser = INITIALISERS[params.init](SlotContext(session, params.window, self.values, generator, draw))

        self.initialiser.remember(0, self.first_probs)
        self.draw_first()
        self.values[0] = self.head[0]
        self.drafts = torch.empty(0, dtype=torch.long, device=device)
        self.q = torch.empty(0, self.vocab, device=device)
        self.new_init: list[str] = []  # origin of the drafts that the next pass verifies for the first time
        self.new_source: list[int] = []
        self.idle_passes = 0  # passes in a row that accepted no draft
        self._fill()

    def step(self) -> WindowRecord:
        step = self.forward()
        return self.advance(step, self.rule(step))

    def forward(self) -> WindowPass:
        """One model pass over [head, drafts]: the target rows of the draft positions and the next."""
        started = self.clock.mark()
        logits = self.session.forward(torch.cat([self.head, self.drafts]))
        p = self.sampling.probabilities(logits)
        self.initialiser.remember(self.head_position + 1, p)
        first = self.head_position + 1
        positions = self.positions[first : first + len(self.drafts) + 1]
        return WindowPass(self.drafts, self.q, p, positions, self.generator, started, self.clock.mark())

    def advance(self, step: WindowPass, verdict: WindowVerdict) -> Iteration:
        """Commit the accepted drafts and the new head, slide and fill the window, and record the pass."""
        host, verified = copy_to_host(step, verdict, self.vocab, self.clock)
        host_started = time.perf_counter()
        start, origins = self.head_position + 1, (self.new_init, self.new_source)
        reset = self._slide(step, verdict, host["accepted"])
        timing = (
            self.clock.ms(step.started, step.forwarded),
            self.clock.verify_ms(step.forwarded, verified, host_started),
        )
        return window_record(step, verdict, host, start, reset, self.head_position < self.seq_len, origins, timing)

    def _slide(self, step: WindowPass, verdict: WindowVerdict, accepted: int) -> bool:
        """Commit the accepted drafts and the head; carry the drafts after a rejection (and the refined
        draft from the row after the window) unless a stall resets them; fill the new slots. Returns
        whether the carried drafts were reset."""
        w, params = step.w, self.params
        start = self.head_position + 1
        self.session.commit(1 + accepted)
        self.head_position = start + accepted
        rejected = accepted < w
        if self.head_position < self.seq_len:
            self.head = verdict.head
            self.values[self.head_position] = verdict.head[0]
        next_probs = step.p[1:] if verdict.next_probs is None else verdict.next_probs
        self.idle_passes = self.idle_passes + 1 if accepted == 0 else 0
        reset = rejected and 0 < params.reset_in_stall <= self.idle_passes
        keep = 0
        if rejected and not reset:
            keep = w - 1 - accepted + (params.refine and start + w < self.seq_len)
        self.drafts = verdict.next_drafts[accepted : accepted + keep]
        self.q = next_probs[accepted : accepted + keep]
        self.values[self.head_position + 1 : self.head_position + 1 + keep] = self.drafts
        refined = keep > 0 and accepted + keep == w  # the last kept draft is the refined one
        self.new_init, self.new_source = (["refined"], [-1]) if refined else ([], [])
        self._fill()
        return reset

    def _fill(self) -> None:
        """Append newly initialised drafts so the window again holds up to W positions."""
        first = self.head_position + 1 + len(self.drafts)
        last = min(self.head_position + self.params.window, self.seq_len - 1)
        if last < first:
            return
        slots = self.initialiser.fill(first, last)
        forced = self.forced[first : last + 1]
        is_forced = forced != IMAGE_CELL
        tokens = torch.where(is_forced, forced, slots.tokens)
        one_hot = torch.nn.functional.one_hot(forced.clamp(min=0), self.vocab)
        self.drafts = torch.cat([self.drafts, tokens])
        self.q = torch.cat([self.q, torch.where(is_forced[:, None], one_hot, slots.probs)])
        self.values[first : last + 1] = tokens
        for position, source in zip(range(first, last + 1), slots.sources, strict=True):
            layout_slot = self.layout[position] != IMAGE_CELL
            self.new_init.append("forced" if layout_slot else self.params.init)
            self.new_source.append(-1 if layout_slot else source)


def window_record(
    step: WindowPass,
    verdict: WindowVerdict,
    host: dict,
    start: int,
    reset: bool,
    head_committed: bool,
    origins: tuple[list[str], list[int]],
    timing: tuple[float, float],
) -> WindowRecord:
    """The record of one window pass from its numbers on the host: fates, the committed tokens (the
    accepted drafts, and the head unless the image ended), the origins of the drafts verified for the
    first time, and the pass's forward and verify milliseconds."""
    record_started = time.perf_counter()
    w, accepted = step.w, host["accepted"]
    rejected = accepted < w
    committed = host["drafts"][:accepted] + ([host["head"]] if head_committed else [])
    fate = ["accepted"] * accepted
    if rejected:
        later = host["kept"][accepted + 1 :]
        fate += ["rejected"] + (["reset"] * len(later) if reset else ["kept" if k else "redrawn" for k in later])
    uniform = host.get("uniform")
    if uniform is not None:
        decided = w if verdict.uniform_decides_carried else min(accepted + 1, w)
        uniform = uniform[:decided] + [None] * (w - decided)
    record = WindowRecord.model_construct(
        start=start,
        drafts=host["drafts"],
        p_old=host["p_old"],
        p_new=host["p_new"],
        ratio=host["ratio"],
        uniform=uniform if uniform is not None else [None] * w,
        tv=host["tv"],
        fate=fate,
        accepted=accepted,
        rejected_at=accepted if rejected else None,
        resampled=committed[-1] if rejected else None,
        residual_top=host["residual_top"] if rejected else None,
        new_init=origins[0],
        new_source=origins[1],
        group=_group_test(host),
        reused=_reused(host, fate),
        committed=committed,
        forward_ms=timing[0],
        verify_ms=timing[1],
    )
    record.record_ms = (time.perf_counter() - record_started) * 1000
    return record


def _group_test(host: dict) -> GroupTest | None:
    """A relaxed rule's group sizes and masses as the record's own part; None for an exact rule."""
    if host.get("group_size") is None:
        return None
    return GroupTest.model_construct(
        size=host["group_size"], mass_new=host["group_mass_new"], mass_old=host["group_mass_old"]
    )


def _reused(host: dict, fate: list[str]) -> list[bool] | None:
    """A reuse rule's drafts kept for the next pass (carried on, not reset); None for a rule that reuses none."""
    if host.get("reused") is None:
        return None
    return [bool(reused) and outcome == "kept" for reused, outcome in zip(host["reused"], fate, strict=True)]


def copy_to_host(step: WindowPass, verdict: WindowVerdict, vocab: int, clock: PassClock) -> tuple[dict, object]:
    """Every number of the record, and the accepted count, in one copy to the host (the pass's one host
    sync): the integers and the per-draft rows of floats are each stacked, then packed as float64 (exact
    for token ids). Also the clock's mark taken just before the copy waits for the device."""
    w, drafts, p, q = step.w, step.drafts, step.p, step.q
    row = verdict.accepted.clamp(max=w - 1).view(1)  # a device index: p[0-d tensor] would read it on the host
    p_row, q_row = p.index_select(0, row)[0], q.index_select(0, row)[0]
    rival = torch.maximum(p_row, q_row)  # the rejected position's most likely tokens under either
    top = rival.topk(min(RESIDUAL_TOP, vocab)).indices
    kept = torch.cat([drafts.new_zeros(1), (verdict.next_drafts[: w - 1] == drafts[1:]).long()])
    integers = {"accepted": verdict.accepted.view(1), "head": verdict.head, "drafts": drafts, "kept": kept}
    integers["top"] = top
    if verdict.group_size is not None:
        integers["group_size"] = verdict.group_size
    if verdict.reused is not None:
        integers["reused"] = verdict.reused.long()
    rows = {
        "p_old": step.p_old,
        "p_new": step.p_new,
        "ratio": verdict.ratio.clamp(0, 1),
        "tv": (0.5 * (p[:w] - q).abs().sum(1)).clamp(0, 1),
        "uniform": verdict.uniform,
        "group_mass_new": verdict.group_mass_new,
        "group_mass_old": verdict.group_mass_old,
    }
    rows = {name: values for name, values in rows.items() if values is not None}
    floats = torch.cat([torch.stack(list(rows.values())).flatten(), q_row[top], p_row[top]])
    packed = torch.cat([torch.cat(list(integers.values())).to(torch.float64), floats.to(torch.float64)])
    verified = clock.mark()
    values = read_to_host(packed)  # the pass's one host sync
    host, at = {}, 0
    for name, tensor in integers.items():
        host[name], at = [int(v) for v in values[at : at + tensor.numel()]], at + tensor.numel()
    for name in rows:
        host[name], at = values[at : at + w], at + w
    top_old, top_new = values[at : at + len(top)], values[at + len(top) :]
    host["accepted"], host["head"] = host["accepted"][0], host["head"][0]
    host["residual_top"] = list(zip(host["top"], top_old, top_new, strict=True))
    return host, verified
