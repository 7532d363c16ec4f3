"""The sliding Jacobi window shared by the Jacobi-family methods (SJD, section 4.1).

State after every pass: a decided *head* token that is not yet in the KV cache, then up to W draft
tokens for the positions after it, each with the distribution q it was drawn from. A pass feeds
[head, drafts] and returns p for every draft position plus the one after the window. The method
decides how many drafts to accept and which token becomes the next head (always an exact sample
from p given the accepted prefix: a residual draw at the first rejection, or a draw from the row
after the window when everything was accepted), and how the remaining drafts are redrawn. The
window then slides and new slots are initialised by one of SJD's strategies (section 4.2).

Forced layout slots (one-hot p) are initialised with their forced token, so they always pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from specviz.decoding.sampling import sample
from specviz.models.protocol import IMAGE_CELL, Session
from specviz.models.sampling import SamplingSettings, SettingsError
from specviz.trace import Iteration

INIT_STRATEGIES = ("random", "repeat-left", "repeat-above", "sample-left", "sample-above")
MAX_WINDOW = 128

# (draft distributions (m, V), their absolute positions (m,)) -> drafted tokens (m,)
Draw = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def check_window(window: int, init: str) -> None:
    if isinstance(window, bool) or int(window) != window or not 1 <= window <= MAX_WINDOW:
        raise SettingsError(f"window must be an integer from 1 to {MAX_WINDOW}, got {window}")
    if init not in INIT_STRATEGIES:
        raise SettingsError(f"unknown initialisation {init!r}; choose one of {', '.join(INIT_STRATEGIES)}")


def _neighbour_positions(session: Session) -> tuple[list[int], list[int]]:
    """For every position, the position of the cell to its left and above (-1 where none).

    A first-column cell has no left neighbour and uses the one above; a first-row cell has none
    above and uses the one to its left.
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
        window: int,
        init: str,
        draw: Draw | None = None,
    ):
        check_window(window, init)
        self.session, self.sampling, self.generator = session, sampling, generator
        self.window, self.init = window, init
        geometry = session.geometry
        self.length, self.vocab = geometry.seq_len, geometry.vocab_size
        layout_tokens = [t for t in geometry.layout if t != IMAGE_CELL]
        self.image_vocab = min(layout_tokens) if layout_tokens else self.vocab
        self.forced = geometry.layout
        self.left, self.above = _neighbour_positions(session)
        self.draw = draw or (lambda q, positions: sample(q, generator))
        device = session.next_logits.device
        self.device = device
        self.values = torch.zeros(self.length, dtype=torch.long, device=device)  # latest token everywhere
        self.dists = torch.zeros(self.length, self.vocab, device=device) if init.startswith("sample") else None
        self.known_upto = -1  # every position up to here has a computed distribution
        self._sync = device.type == "cuda"

        first = sampling.probabilities(session.next_logits)[None]
        self._remember(0, first)
        self.head = sample(first, generator)
        self.head_position = 0
        self.values[0] = self.head[0]
        self.drafts = torch.empty(0, dtype=torch.long, device=device)
        self.draft_probs = torch.empty(0, self.vocab, device=device)
        self.new_drafts = 0
        self.changed = torch.zeros((), dtype=torch.long, device=device)
        self._forward_ms = 0.0
        self._forward_end = 0.0
        self._fill()

    @property
    def done(self) -> bool:
        return self.head_position >= self.length - 1

    def first_record(self) -> Iteration:
        """Position 0 is drawn from the prefill's distribution: exact, and no extra pass."""
        return Iteration(start=0, committed=[int(self.head[0])], forward_ms=0.0)

    def _now(self) -> float:
        if self._sync:
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def forward(self) -> torch.Tensor:
        """One model pass over [head, drafts]: p (w + 1, V) for the draft positions and the next."""
        started = self._now()
        logits = self.session.forward(torch.cat([self.head, self.drafts]))
        probs = self.sampling.probabilities(logits)
        self._remember(self.head_position + 1, probs)
        self._forward_end = self._now()
        self._forward_ms = (self._forward_end - started) * 1000
        return probs

    def _remember(self, first_position: int, probs: torch.Tensor) -> None:
        if self.dists is None:
            return
        count = min(len(probs), self.length - first_position)
        self.dists[first_position : first_position + count] = probs[:count]
        self.known_upto = max(self.known_upto, first_position + count - 1)

    def advance(
        self,
        accepted: int,
        head: torch.Tensor,
        carried: torch.Tensor,
        carried_probs: torch.Tensor,
        p_old: torch.Tensor,
        p_new: torch.Tensor,
        ratio: torch.Tensor,
    ) -> Iteration:
        """Commit `accepted` drafts and the new head, keep the redrawn drafts, fill new slots.

        `p_old`, `p_new` and `ratio` describe the verified drafts, for the trace.
        """
        verify_started = self._now()
        verify_ms = (verify_started - self._forward_end) * 1000
        verified, new_drafts, changed = self.drafts, self.new_drafts, self.changed
        start = self.head_position + 1
        self.session.commit(1 + accepted)
        self.head_position = start + accepted
        rejected = accepted < len(verified)
        if self.head_position < self.length:
            self.head = head
            self.values[self.head_position] = head[0]
        self.changed = (carried != verified[accepted + 1 :]).sum()
        self.drafts, self.draft_probs = carried, carried_probs
        self.values[self.head_position + 1 : self.head_position + 1 + len(carried)] = carried
        self._fill()
        record_started = self._now()
        verify_ms += (record_started - verify_started) * 1000

        drafts = verified.tolist()
        committed = drafts[:accepted]
        if self.head_position < self.length:
            committed.append(int(head[0]))
        record = Iteration.model_construct(
            start=start,
            drafts=drafts,
            p_old=p_old.tolist(),
            p_new=p_new.tolist(),
            ratio=ratio.tolist(),
            accepted=accepted,
            rejected_at=accepted if rejected else None,
            resampled=committed[-1] if rejected else None,
            new_drafts=new_drafts,
            changed=int(changed),
            committed=committed,
            forward_ms=self._forward_ms,
            verify_ms=verify_ms,
            record_ms=(time.perf_counter() - record_started) * 1000,
        )
        return record

    def _fill(self) -> None:
        """Append newly initialised drafts so the window again holds up to W positions."""
        first = self.head_position + 1 + len(self.drafts)
        last = min(self.head_position + self.window, self.length - 1)
        self.new_drafts = max(0, last - first + 1)
        if self.new_drafts == 0:
            return
        positions = list(range(first, last + 1))
        position_tensor = torch.tensor(positions, device=self.device)
        if self.init.startswith("sample"):
            sources = self.left if self.init == "sample-left" else self.above
            # the neighbour's latest distribution; a slot without a neighbour (or whose neighbour has not
            # been computed yet) uses the latest computed position before it
            rows = [min(sources[pos], self.known_upto) if sources[pos] >= 0 else self.known_upto for pos in positions]
            probs = self.dists[torch.tensor(rows, device=self.device)]
            tokens = self.draw(probs, position_tensor)
        else:
            tokens, probs = self._repeat_or_random(positions)
        forced = [(i, self.forced[pos]) for i, pos in enumerate(positions) if self.forced[pos] != IMAGE_CELL]
        if forced:
            index = torch.tensor([i for i, _ in forced], device=self.device)
            tokens[index] = torch.tensor([t for _, t in forced], device=self.device)
            probs = probs.clone()
            probs[index] = torch.nn.functional.one_hot(tokens[index], self.vocab).float()
        self.drafts = torch.cat([self.drafts, tokens])
        self.draft_probs = torch.cat([self.draft_probs, probs])
        self.values[first : last + 1] = tokens

    def _repeat_or_random(self, positions: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Drafts whose draft distribution is one-hot, so their acceptance ratio is p(x) itself."""
        count = len(positions)
        tokens = torch.randint(self.image_vocab, (count,), generator=self.generator, device=self.device)
        if self.init != "random":
            sources = self.left if self.init == "repeat-left" else self.above
            first = positions[0]
            resolved = []  # a source inside the new block points to that slot's own source
            for pos in positions:
                source = sources[pos]
                resolved.append(resolved[source - first] if source >= first else source)
            copy = torch.tensor([s >= 0 for s in resolved], device=self.device)
            copied = self.values[torch.tensor([max(s, 0) for s in resolved], device=self.device)]
            tokens = torch.where(copy, copied, tokens)
        return tokens, torch.nn.functional.one_hot(tokens, self.vocab).float()
