"""The sliding Jacobi window: the one loop every Jacobi-family method runs (SJD, section 4.1).

State between passes: a decided *head* token (an exact sample, not yet in the KV cache), then up to
W draft tokens for the positions after it, each with the distribution q it was drawn from. A pass
feeds [head, drafts] and gives the target p for every draft position plus the one after the window.
A method is its verification rule (`Rule`, a short function in the method's file): from p and q it
decides how many drafts to accept, the exact token that becomes the next head, and the next draft at
every later position. The window then commits, slides and fills its new slots: after a rejection
the first new slot takes the model's own row after the window (the "refined draft" of the official
SJD code; exact, since any draft is, as long as its draft distribution is the one recorded), the
others one of SJD's initialisations (section 4.2). Forced layout slots get their forced token, so
they always pass.

Everything a record needs is moved to the host in one copy per pass, together with the accepted
count, so a pass costs one host sync on a GPU; there the timings come from CUDA events.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from specviz.decoding.params import WindowParameters
from specviz.decoding.sampling import sample, token_probs
from specviz.models.protocol import IMAGE_CELL, Session
from specviz.models.settings import SamplingSettings
from specviz.trace import Iteration

RESIDUAL_TOP = 6  # tokens recorded at a rejected position, enough to draw its residual

# (draft distributions (m, V), their absolute positions (m,)) -> drafted tokens (m,)
Draw = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class WindowPass:
    """What a verification rule sees: this pass's drafts and the model's answer."""

    drafts: torch.Tensor  # (w,) tokens verified now
    q: torch.Tensor  # (w, V) the distribution each draft was drawn from
    p: torch.Tensor  # (w + 1, V) target rows: the draft positions, then the position after the window
    positions: torch.Tensor  # (w + 1,) absolute sequence positions of the rows of p
    generator: torch.Generator

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


@dataclass
class Verdict:
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


Rule = Callable[[WindowPass], Verdict]


class PassClock:
    """Times inside a pass without extra host syncs: CUDA events on a GPU (read once the pass's copy to
    the host has waited for them), perf_counter on a CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def mark(self) -> float | torch.cuda.Event:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def ms(self, start, end) -> float:
        return start.elapsed_time(end) if self.cuda else (end - start) * 1000


def run_window(
    session: Session,
    sampling: SamplingSettings,
    generator: torch.Generator,
    params: WindowParameters,
    rule: Rule,
    draw: Draw | None = None,
) -> Iterator[Iteration]:
    """Yield one Iteration per model pass until every position is fixed."""
    window = JacobiWindow(session, sampling, generator, params, draw)
    yield window.first_record()
    while not window.done:
        step = window.forward()
        yield window.advance(rule(step))


def neighbour_positions(session: Session) -> tuple[list[int], list[int]]:
    """For every position, the position of the cell to its left and above (-1 where none).

    A first-column cell has no left neighbour and uses the one above; a first-row cell has none
    above and uses the one to its left. Layout slots have none.
    """
    geometry = session.geometry
    cells = geometry.cell_of_position()
    position_of_cell = {cell: pos for pos, cell in enumerate(cells) if cell >= 0}
    left, above = [], []
    for cell in cells:
        row, col = divmod(cell, geometry.cols) if cell >= 0 else (-1, -1)
        to_left = position_of_cell[cell - 1] if col > 0 else -1
        to_above = position_of_cell[cell - geometry.cols] if row > 0 else -1
        left.append(to_left if to_left >= 0 else to_above)
        above.append(to_above if to_above >= 0 else to_left)
    return left, above


class JacobiWindow:
    def __init__(
        self,
        session: Session,
        sampling: SamplingSettings,
        generator: torch.Generator,
        params: WindowParameters,
        draw: Draw | None = None,
    ):
        self.session, self.sampling, self.generator, self.params = session, sampling, generator, params
        geometry = session.geometry
        self.seq_len, self.vocab = geometry.seq_len, geometry.vocab_size
        self.device = device = session.next_logits.device
        self.layout = geometry.layout
        layout_tokens = [t for t in geometry.layout if t != IMAGE_CELL]
        self.image_vocab = min(layout_tokens) if layout_tokens else self.vocab
        self.draw = draw or (lambda q, positions: sample(q, generator))
        self.clock = PassClock(device)

        # precomputed on the device, so filling slots copies nothing from the host; index seq_len is a
        # sentinel ("no source", and the row after the last position)
        self.positions = torch.arange(self.seq_len + 1, device=device)
        self.forced = torch.tensor([*geometry.layout, IMAGE_CELL], device=device)
        left, above = neighbour_positions(session)
        self.source_of = {"left": left, "above": above}.get(params.init.split("-")[-1], [-1] * self.seq_len)
        sentinel = [s if s >= 0 else self.seq_len for s in self.source_of]
        self.sources = torch.tensor([*sentinel, self.seq_len], device=device)
        self.jumps = math.ceil(math.log2(params.window + 1)) + 1  # pointer-jumping rounds for repeat-*
        self.values = torch.zeros(self.seq_len + 1, dtype=torch.long, device=device)  # latest token everywhere
        # sample-*: the latest distribution of every position that a new slot can still read, in a ring
        # (a new slot reads at most a row and a layout slot behind the window)
        self.ring_rows = min(self.seq_len, params.window + geometry.cols + 4)
        sampled = params.init.startswith("sample")
        self.ring = torch.zeros(self.ring_rows, self.vocab, device=device) if sampled else None
        self.known_upto = -1  # every position up to here has a computed distribution

        first = sampling.probabilities(session.next_logits)[None]
        self._remember(0, first)
        self.head = sample(first, generator)
        self.head_position = 0
        self.values[0] = self.head[0]
        self.drafts = torch.empty(0, dtype=torch.long, device=device)
        self.q = torch.empty(0, self.vocab, device=device)
        self.new_init: list[str] = []  # origin of the drafts that the next pass verifies for the first time
        self.new_source: list[int] = []
        self._step: WindowPass | None = None
        self.idle_passes = 0  # passes in a row that accepted no draft
        self._fill()

    @property
    def done(self) -> bool:
        return self.head_position >= self.seq_len - 1

    def first_record(self) -> Iteration:
        """Position 0 is drawn from the prefill's distribution: exact, and no extra pass."""
        return Iteration(start=0, committed=[int(self.head[0])], forward_ms=0.0)

    def forward(self) -> WindowPass:
        """One model pass over [head, drafts]: the target rows of the draft positions and the next."""
        self._started = self.clock.mark()
        logits = self.session.forward(torch.cat([self.head, self.drafts]))
        p = self.sampling.probabilities(logits)
        self._remember(self.head_position + 1, p)
        self._forwarded = self.clock.mark()
        first = self.head_position + 1
        self._step = WindowPass(
            self.drafts, self.q, p, self.positions[first : first + len(self.drafts) + 1], self.generator
        )
        return self._step

    def advance(self, verdict: Verdict) -> Iteration:
        """Commit the accepted drafts and the new head, keep the next drafts, fill new slots, record."""
        step, params = self._step, self.params
        w, p = step.w, step.p
        host = self._to_host(step, verdict)
        host_started = time.perf_counter()
        accepted = host["accepted"]
        start = self.head_position + 1
        self.session.commit(1 + accepted)
        self.head_position = start + accepted
        rejected = accepted < w
        new_init, new_source = self.new_init, self.new_source
        if self.head_position < self.seq_len:
            self.head = verdict.head
            self.values[self.head_position] = verdict.head[0]
        next_probs = p[1:] if verdict.next_probs is None else verdict.next_probs
        self.idle_passes = self.idle_passes + 1 if accepted == 0 else 0
        reset = rejected and 0 < params.reset_in_stall <= self.idle_passes
        keep = 0
        if rejected and not reset:
            # the drafts after the rejection, and the refined draft from the row after the window
            keep = w - 1 - accepted + (params.refine and start + w < self.seq_len)
        self.drafts = verdict.next_drafts[accepted : accepted + keep]
        self.q = next_probs[accepted : accepted + keep]
        self.values[self.head_position + 1 : self.head_position + 1 + keep] = self.drafts
        refined = keep > 0 and accepted + keep == w  # the last kept draft is the refined one
        self.new_init, self.new_source = (["refined"], [-1]) if refined else ([], [])
        self._fill()
        verify_ms = self.clock.ms(self._forwarded, self._verified) + (time.perf_counter() - host_started) * 1000

        record_started = time.perf_counter()
        committed = host["drafts"][:accepted]
        if self.head_position < self.seq_len:
            committed.append(host["head"])
        fate = ["accepted"] * accepted
        if rejected:
            later = host["kept"][accepted + 1 :]
            fate += ["rejected"] + (["reset"] * len(later) if reset else ["kept" if k else "redrawn" for k in later])
        uniform = host.get("uniform")
        if uniform is not None:
            decided = w if verdict.uniform_decides_carried else min(accepted + 1, w)
            uniform = uniform[:decided] + [None] * (w - decided)
        record = Iteration.model_construct(
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
            new_init=new_init,
            new_source=new_source,
            group_size=host.get("group_size"),
            group_mass_new=host.get("group_mass_new"),
            group_mass_old=host.get("group_mass_old"),
            committed=committed,
            forward_ms=self.clock.ms(self._started, self._forwarded),
            verify_ms=verify_ms,
        )
        record.record_ms = (time.perf_counter() - record_started) * 1000
        return record

    def _to_host(self, step: WindowPass, verdict: Verdict) -> dict:
        """Every number of the record, and the accepted count, in one copy to the host: the integers and
        the per-draft rows of floats are each stacked, then packed as float64 (exact for token ids)."""
        w, drafts, p, q = step.w, step.drafts, step.p, step.q
        row = verdict.accepted.clamp(max=w - 1)
        rival = torch.maximum(p[row], q[row])  # the rejected position's most likely tokens under either
        top = rival.topk(min(RESIDUAL_TOP, self.vocab)).indices
        kept = torch.cat([drafts.new_zeros(1), (verdict.next_drafts[: w - 1] == drafts[1:]).long()])
        integers = {"accepted": verdict.accepted.view(1), "head": verdict.head, "drafts": drafts, "kept": kept}
        integers["top"] = top
        if verdict.group_size is not None:
            integers["group_size"] = verdict.group_size
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
        floats = torch.cat([torch.stack(list(rows.values())).flatten(), q[row, top], p[row, top]])
        packed = torch.cat([torch.cat(list(integers.values())).to(torch.float64), floats.to(torch.float64)])
        self._verified = self.clock.mark()
        values = packed.tolist()  # the pass's one host sync
        host, at = {}, 0
        for name, tensor in integers.items():
            host[name], at = [int(v) for v in values[at : at + tensor.numel()]], at + tensor.numel()
        for name in rows:
            host[name], at = values[at : at + w], at + w
        top_old, top_new = values[at : at + len(top)], values[at + len(top) :]
        host["accepted"], host["head"] = host["accepted"][0], host["head"][0]
        host["residual_top"] = list(zip(host["top"], top_old, top_new, strict=True))
        return host

    def _remember(self, first_position: int, probs: torch.Tensor) -> None:
        """Keep the latest distribution of positions a sample-* initialisation may read."""
        if self.ring is None:
            return
        count = min(len(probs), self.seq_len - first_position)
        rows = self.positions[first_position : first_position + count] % self.ring_rows
        self.ring.index_copy_(0, rows, probs[:count])
        self.known_upto = max(self.known_upto, first_position + count - 1)

    def _fill(self) -> None:
        """Append newly initialised drafts so the window again holds up to W positions."""
        first = self.head_position + 1 + len(self.drafts)
        last = min(self.head_position + self.params.window, self.seq_len - 1)
        if last < first:
            return
        positions = self.positions[first : last + 1]
        if self.ring is not None:
            # the neighbour's latest distribution; a slot without a neighbour, or whose neighbour has no
            # distribution yet, uses the latest computed position before it
            rows = self.sources[positions]
            rows = torch.where(rows == self.seq_len, self.known_upto, rows.clamp(max=self.known_upto))
            probs = self.ring[rows % self.ring_rows]
            tokens = self.draw(probs, positions)
            sources = [min(s, self.known_upto) if s >= 0 else self.known_upto for s in self.source_of[first : last + 1]]
        else:
            tokens = self._repeat_or_random(first, last)
            # q one-hot, as the official SJD code records new drafts (`scores_of_rand_tokens`): tested as a
            # fixed draft, accepted with p(x); recording a uniform q would accept with min(1, V p(x))
            probs = torch.nn.functional.one_hot(tokens, self.vocab).float()
            sources = self.source_of[first : last + 1]
        forced = self.forced[positions]
        is_forced = forced != IMAGE_CELL
        tokens = torch.where(is_forced, forced, tokens)
        probs = torch.where(is_forced[:, None], torch.nn.functional.one_hot(forced.clamp(min=0), self.vocab), probs)
        self.drafts = torch.cat([self.drafts, tokens])
        self.q = torch.cat([self.q, probs])
        self.values[first : last + 1] = tokens
        for position, source in zip(range(first, last + 1), sources, strict=True):
            layout_slot = self.layout[position] != IMAGE_CELL
            self.new_init.append("forced" if layout_slot else self.params.init)
            self.new_source.append(-1 if layout_slot else source)

    def _repeat_or_random(self, first: int, last: int) -> torch.Tensor:
        """Tokens of new slots first..last: uniform image tokens, or copies of the neighbour's latest
        token. A neighbour inside the new block passes on its own copy, resolved on the device by
        pointer jumping (each round doubles the distance followed)."""
        count = last - first + 1
        tokens = torch.randint(self.image_vocab, (count,), generator=self.generator, device=self.device)
        if self.params.init == "random":
            return tokens
        in_block = (self.positions >= first) & (self.positions <= last)
        table = torch.where(in_block, self.sources, self.positions)
        for _ in range(self.jumps):
            table = table[table]
        resolved = table[first : last + 1]
        return torch.where(resolved == self.seq_len, tokens, self.values[resolved])
