"""PJD, Parallel Jacobi Decoding (Liao, Li, Jian, Wang, CVPR 2026, arXiv 2606.05703): lossy.

ZipAR's rows in flight crossed with SJD's window, one window per row. A row starts once the row above
has `row_start` cells decided. Every pass feeds, for each row in flight (top row first), its head (the
row's latest decided token) and up to `window` - 1 drafts at their true raster positions, all in one
model pass, and verifies each row's drafts against the target p of that pass:

- the top row in flight by SJD's test: drafts accepted while a uniform falls below min(1, p/q); at the
  first rejection a token is drawn from the residual norm(max(0, p - q)) and committed; after a fully
  accepted window the model's draw after it is committed (the bonus token);
- every row below commits its accepted drafts only: no residual, no bonus token.

After a row's first rejection each later draft is kept for the next pass where min(1, p/q) exceeds
`reuse_threshold`, still recorded with its old q; any other slot (a lower row's rejected one included)
takes the model's draw from p, recorded with p, and so does the position after the window. New slots
get uniformly random image tokens, recorded one-hot. A row below keeps its drafts at least two columns
behind the decided cells of the row above: it feeds min(window, d_above - d_row) tokens, its head
included. The row-causal mask (`row_mask`) lets a token see the prompt, every decided token, the heads
of the rows above and its own row's head and earlier drafts, never the drafts of another row
(`CachedSession.forward_at` with `sees`); only decided tokens stay in the cache (`keep`): a row's
head is fed again every pass, so that its row of p sees what the rows above have decided since.

It is not lossless, for three reasons the exactness check measures together (`check-lossless`): a
row below is verified against p given the rows above as far as they are decided at that pass (ZipAR's
departure); a lower row's rejected slot gets a fresh draw y ~ p tested next pass against q = p instead
of a residual; a kept draft is one drawn from q conditioned on passing the reuse threshold, tested as if
drawn from q.

Its decision order depends on what each pass accepts, so each record names the positions it commits
(`RowsRecord.positions`, with every row's window in `windows`) and the trace's geometry is built from
them after the run (`TokenDecoder.geometry`).

From the official code (`boyaliao/PJD`, Lumina-mGPT only; the paper's body was not available), where
this departs:
- The row-causal mask applies to every pair of rows. The code's query offsets for rows from the second
  or third in flight on are a running total of the fed tokens, so there the mask misses its rows.
- Random drafts are image tokens. The code draws indices of the image vocabulary and forgets to map them
  to its ids (ids 0-3 are never accepted, the last four image codes never drafted).
- A grid without an end-of-row token (LlamaGen, Janus, the tiny models): a new row's first cell is
  predicted, as in ZipAR here, from the row above's latest token standing in at the position before the
  row (a reconstruction: the authors' LlamaGen code is not published); on Lumina-mGPT and Emu3 the
  row-end token is known and fed for real, as the code does. The stand-in is fed each pass with the
  row above's latest token and never kept.
- The cache holds the decided tokens by position behind a mask, not the code's row-grouped cache with
  insertions; what each token sees is the same. A finished row's last token is fed once more to enter
  it, as in the code, unless a row's head feeds it anyway.
- One generator for every draw (the code draws random drafts from the global RNG); an empty residual
  falls back to p (the code's gives NaN).
- `residual_all_rows` (off by default) gives every row the top row's residual and bonus token; the
  code's asymmetry has no stated reason. A lower row then feeds one draft fewer, so the token after its
  drafts also stays two columns behind the row above, and waits where it would have no room.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from specviz.core.params import PjdParameters
from specviz.core.settings import SamplingSettings
from specviz.decoding.passes import TokenLoop
from specviz.decoding.sampling import acceptance_ratio, residual, sample, token_probs
from specviz.decoding.zipar import row_spans
from specviz.models.protocol import IMAGE_CELL, Session
from specviz.models.syncing import intended_sync, read_to_host
from specviz.trace import RowsRecord, RowWindow


def iterate(
    session: Session, sampling: SamplingSettings, generator: torch.Generator, params: PjdParameters
) -> Iterator[RowsRecord]:
    """One record per pass: every row in flight's window, and the tokens committed at their positions."""
    yield from ParallelJacobi(session, sampling, generator, params).records()


@dataclass
class Row:
    """A started image row: the end of its span of sequence positions (its end-of-row slot included), the
    first position not decided (`frontier`; the head sits before it), its decided image cells, and the
    drafts for the positions from the frontier with the distribution each was recorded with."""

    index: int
    end: int
    frontier: int
    drafts: torch.Tensor
    q: torch.Tensor
    cells: int = 0

    @property
    def head(self) -> int:
        return self.frontier - 1


@dataclass
class Window:
    """A row's part of a pass: its head's index among the fed tokens, its drafts (`first` among all the
    pass's drafts), how many were drawn at random now, whether its head stands in for the unfinished end
    of the row above, and whether it commits the token after its accepted drafts."""

    row: Row
    at: int
    count: int
    first: int
    new: int
    stand_in: bool
    resamples: bool


class ParallelJacobi(TokenLoop):
    """The rows in flight and their windows between passes; a step is a pass over every row's head and
    drafts, its verification, and the record."""

    def __init__(self, session: Session, sampling: SamplingSettings, generator: torch.Generator, params: PjdParameters):
        super().__init__(session, sampling, generator, params)
        geometry, device = session.geometry, self.device
        self.spans = row_spans(geometry)
        self.cell = geometry.cell_of_position()
        layout_tokens = [token for token in geometry.layout if token != IMAGE_CELL]
        self.image_vocab = min(layout_tokens) if layout_tokens else self.vocab
        self.forced = torch.tensor(geometry.layout, device=device)
        self.raster = self.forced.clamp(min=0)  # every decided token at its position, the layout's from the start
        self.known = [entry != IMAGE_CELL for entry in geometry.layout]  # decided (or forced) positions
        self.cached: set[int] = set()  # positions whose decided token the session holds
        self.tails: set[int] = set()  # last positions of finished rows, fed once more to enter the cache
        self.started: list[Row] = []
        self.active: list[Row] = []  # the rows in flight, top row first
        self.decided = 0  # positions committed, the trace's start of the next record

    @property
    def done(self) -> bool:
        return self.decided == self.seq_len

    def first_records(self) -> Iterator[RowsRecord]:
        """Position 0 from the prefill's distribution (exact, no pass): the first row's first head."""
        self.draw_first()
        self._start_row()
        self._commit(self.active[0], 1)
        self.raster[0] = self.head[0]
        self._start_rows()
        yield RowsRecord(start=0, committed=read_to_host(self.head[:1]), rows=[0], positions=[0], forward_ms=0.0)

    def step(self) -> RowsRecord:
        """One pass over every row in flight, its verification, and its record."""
        started = self.clock.mark()
        windows, fed, positions, sees = self._plan()
        p = self.sampling.probabilities(self.session.forward_at(fed, positions, sees))
        forwarded = self.clock.mark()
        verdict = self._verify(windows, p)
        verified = self.clock.mark()
        host = read_to_host(verdict["packed"])  # the pass's one host sync
        host_started = time.perf_counter()
        record = self._advance(windows, verdict, host, positions)
        record.forward_ms = self.clock.ms(started, forwarded)
        record.verify_ms = self.clock.verify_ms(forwarded, verified, host_started)
        return record

    # ---- the rows in flight ------------------------------------------------------------------------

    def _start_row(self) -> None:
        begin, end = self.spans[len(self.started)]
        row = Row(len(self.started), end, begin, self.forced[:0], torch.empty(0, self.vocab, device=self.device))
        self.started.append(row)
        self.active.append(row)

    def _start_rows(self) -> None:
        """The next row starts once the last one started has `row_start` cells decided, or is complete."""
        last = self.started[-1]
        if len(self.started) < len(self.spans) and (last.cells >= self.params.row_start or last.frontier == last.end):
            self._start_row()

    def _commit(self, row: Row, count: int) -> None:
        """The next `count` positions of `row` are decided."""
        for position in range(row.frontier, row.frontier + count):
            self.known[position] = True
            row.cells += self.cell[position] >= 0
        row.frontier += count
        self.decided += count

    def _room(self, index: int, row: Row, resamples: bool) -> int:
        """Drafts the row feeds this pass: the top row leaves room in its span for the token after them; a
        row below stays two columns behind the decided cells of the row above (one more where it also
        commits a token after its drafts). Negative: no room, the row waits."""
        if index == 0:
            return min(self.params.window - 1, row.end - row.frontier - 1)
        return min(self.params.window - 1, self.active[index - 1].cells - row.cells - 1 - resamples)

    # ---- a pass ------------------------------------------------------------------------------------

    def _plan(self) -> tuple[list[Window], torch.Tensor, list[int], torch.Tensor]:
        """What the pass feeds: every row's head and drafts, then the finished rows' last tokens that are
        not cached yet and no head feeds; their positions, and what each token sees."""
        pieces: list[torch.Tensor] = []
        positions: list[int] = []
        owner: list[int] = []  # the row of each fed token (a finished row's token: a row of its own)
        seen_below: list[bool] = []  # heads and decided tokens, which the rows below see
        windows: list[Window] = []
        drafted = 0
        for index, row in enumerate(self.active):
            resamples = index == 0 or self.params.residual_all_rows
            count = self._room(index, row, resamples)
            if count < 0:
                continue
            new = self._fill(row, count)
            head = row.head
            stand_in = not self.known[head]  # the unfinished end of the row above: its latest token stands in
            source = self.active[index - 1].head if stand_in else head
            windows.append(Window(row, len(positions), count, drafted, new, stand_in, resamples))
            pieces += [self.raster[source : source + 1], row.drafts]
            positions += [head, *range(row.frontier, row.frontier + count)]
            owner += [row.index] * (count + 1)
            seen_below += [True] + [False] * count
            drafted += count
        for position in sorted(self.tails - {window.row.head for window in windows}):
            pieces.append(self.raster[position : position + 1])
            positions.append(position)
            owner.append(-1 - position)
            seen_below.append(True)
        at = torch.tensor(positions)
        sees = at[None, :] < at[:, None]
        if self.params.row_mask:  # another row's drafts are hidden; heads and decided tokens are not
            rows = torch.tensor(owner)
            sees &= (rows[None, :] == rows[:, None]) | torch.tensor(seen_below)[None, :]
        return windows, torch.cat(pieces), positions, sees

    def _fill(self, row: Row, count: int) -> int:
        """The row's carried drafts cut to `count`, new slots filled with random image tokens recorded
        one-hot (a layout slot's forced token). Returns how many were drawn now."""
        row.drafts, row.q = row.drafts[:count], row.q[:count]
        first, new = row.frontier + len(row.drafts), count - len(row.drafts)
        if new > 0:
            drawn = torch.randint(0, self.image_vocab, (new,), generator=self.generator, device=self.device)
            forced = self.forced[first : first + new]
            tokens = torch.where(forced == IMAGE_CELL, drawn, forced)
            row.drafts = torch.cat([row.drafts, tokens])
            row.q = torch.cat([row.q, F.one_hot(tokens, self.vocab).to(row.q.dtype)])
        return max(new, 0)

    def _verify(self, windows: list[Window], p: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every row's drafts tested at once: the accepted run of each window, the token after it where
        the row resamples (the residual at its first rejection, else the model's draw after the window),
        and each draft slot's next draft: the draft itself, kept with its old q where min(1, p/q) passes
        the reuse threshold, else the model's draw, recorded with p."""
        drafts = torch.cat([window.row.drafts for window in windows])
        q = torch.cat([window.row.q for window in windows])
        resampling = [g for g, window in enumerate(windows) if window.resamples]
        tested = [r for r, g in enumerate(resampling) if windows[g].count > 0]  # of those, the ones with drafts
        parts = [
            [window.at + j for window in windows for j in range(window.count)],  # the token predicting each draft
            [g for g, window in enumerate(windows) for _ in range(window.count)],  # each draft's window
            [window.first for window in windows],
            [window.count for window in windows],
            [windows[g].at + windows[g].count for g in resampling],  # the token predicting the slot after them
            [resampling[r] for r in tested],
            tested,
        ]
        with intended_sync():  # the pass's indices, in one copy to the device
            indices = torch.tensor([value for part in parts for value in part], device=self.device)
        predictor, group, first, count, after, tested_windows, tested_at = indices.split([len(part) for part in parts])
        target = p[predictor]
        ratio = acceptance_ratio(token_probs(target, drafts), token_probs(q, drafts))
        uniform = torch.rand(len(drafts), generator=self.generator, device=self.device)
        refused = (uniform >= ratio).long()
        through = refused.cumsum(0)
        in_window = through - (through - refused)[first[group]]  # refusals in the draft's window up to it
        accepted = torch.zeros(len(windows), dtype=torch.long, device=self.device)
        accepted.index_add_(0, group, (in_window == 0).long())
        drawn = sample(p, self.generator)  # the model's draw at every position fed
        after_drafts = drawn[after]  # the bonus token, where a window is accepted whole
        if tested:
            runs, counts = accepted[tested_windows], count[tested_windows]
            at = first[tested_windows] + torch.minimum(runs, counts - 1)
            from_residual = sample(residual(target[at], q[at]), self.generator)
            after_drafts[tested_at] = torch.where(runs < counts, from_residual, after_drafts[tested_at])
        kept = ratio > self.params.reuse_threshold
        record = torch.cat([accepted, after_drafts, drafts, kept.long()]).double()
        return {
            "after": after_drafts,
            "drafts": drafts,
            "drawn": drawn,
            "p": p,
            "next": torch.where(kept, drafts, drawn[predictor]),
            "next_q": torch.where(kept[:, None], q, target),
            "packed": torch.cat([record, ratio.double()]),
        }

    def _advance(self, windows: list[Window], verdict: dict, host: list[float], positions: list[int]) -> RowsRecord:
        """Commit each row's accepted drafts (and the token after them where it resamples), keep the
        decided tokens fed in the cache, carry the next drafts, retire finished rows and start the next."""
        drafted = sum(window.count for window in windows)
        resampling = sum(window.resamples for window in windows)
        sizes = [len(windows), resampling, drafted, drafted, drafted]
        at = 0
        accepted, after, drafts, kept, ratio = [], [], [], [], []
        for values, size in zip((accepted, after, drafts, kept, ratio), sizes, strict=True):
            values += host[at : at + size]
            at += size
        start = self.decided
        committed: list[int] = []
        rows: list[int] = []
        placed: list[int] = []
        shown: list[RowWindow] = []
        keep = {i for i, position in enumerate(positions) if position in self.tails}  # finished rows' last tokens
        resampled = 0
        for g, window in enumerate(windows):
            row, count, run = window.row, window.count, int(accepted[g])
            mine = [int(token) for token in drafts[window.first : window.first + count]]
            tokens = mine[:run]
            if run:
                self.raster[row.frontier : row.frontier + run] = verdict["drafts"][window.first : window.first + run]
            if window.resamples:
                tokens.append(int(after[resampled]))
                self.raster[row.frontier + run] = verdict["after"][resampled]
                resampled += 1
            # the decided tokens fed stay: the head (not a stand-in) and the accepted drafts, but the row's
            # new head, the last of them where the row commits nothing after them (fed again next pass)
            decided_fed = range(window.at + window.stand_in, window.at + run + window.resamples)
            keep |= {i for i in decided_fed if positions[i] not in self.cached}
            self._carry(window, run, verdict)
            fate = ["accepted"] * run + (["rejected"] if run < count else [])
            fate += ["kept" if kept[window.first + j] else "redrawn" for j in range(run + 1, count)]
            shown.append(
                RowWindow(
                    row=row.index,
                    head=row.head,
                    drafts=mine,
                    ratio=ratio[window.first : window.first + count],
                    fate=fate,
                    new=window.new,
                    committed=len(tokens),
                )
            )
            placed += range(row.frontier, row.frontier + len(tokens))
            rows += [row.index] * len(tokens)
            committed += tokens
            self._commit(row, len(tokens))
        self.session.keep(sorted(keep))
        self.cached |= {positions[i] for i in keep}
        self.tails = {row.end - 1 for row in self.active if row.frontier == row.end} - self.cached
        self.tails.discard(self.seq_len - 1)  # no row below needs the last row's end
        self.active = [row for row in self.active if row.frontier < row.end]
        self._start_rows()
        record_started = time.perf_counter()
        record = RowsRecord(
            start=start,
            committed=committed,
            rows=rows,
            positions=placed,
            fed=len(positions),
            stand_ins=sum(window.stand_in for window in windows),
            accepted=sum(int(run) for run in accepted),
            windows=shown,
            forward_ms=0.0,
        )
        record.record_ms = (time.perf_counter() - record_started) * 1000
        return record

    def _carry(self, window: Window, run: int, verdict: dict) -> None:
        """The row's drafts for the next pass, from the slot after what it committed: a row that does not
        resample gets the model's draw at its rejected slot; then each later draft's next draft; then
        the model's draw after the window (none after a window a resampling row accepted whole)."""
        row, count, at, first = window.row, window.count, window.at, window.first
        tokens, q = [], []
        if run < count and not window.resamples:
            tokens.append(verdict["drawn"][at + run : at + run + 1])
            q.append(verdict["p"][at + run : at + run + 1])
        if run + 1 < count:
            tokens.append(verdict["next"][first + run + 1 : first + count])
            q.append(verdict["next_q"][first + run + 1 : first + count])
        if run < count or not window.resamples:
            tokens.append(verdict["drawn"][at + count : at + count + 1])
            q.append(verdict["p"][at + count : at + count + 1])
        row.drafts = torch.cat(tokens) if tokens else row.drafts[:0]
        row.q = torch.cat(q) if q else row.q[:0]
