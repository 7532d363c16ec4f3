"""ZipAR (He et al., ICML 2025, arXiv 2412.04062): several image rows decoded at once, lossy.

Spatial locality: a token depends mostly on the tokens near it, so a row need not wait for the whole
row above. Once the row above has `window_size` tokens (the paper's s), the next row starts; every pass
then draws one token in each row in flight, so rows advance together, each s cells behind the one above
("next-set prediction"). Nothing is verified: each token is drawn once from the model's distribution
given the tokens decided before it in raster order, which lacks the unfinished end of the rows above.
The output therefore departs from raster AR; `check-lossless` measures by how much, as for LANTERN and
GSD. A window of at least the row's width is raster AR.

The schedule depends only on the grid and s, so it is computed before the run (`schedule`), and a run's
trace lists the positions in the order they were decided (`decision_geometry`): each pass commits the
cells it drew together, and the grid views show the rows in flight as a diagonal front.

A new row's first token is predicted by feeding the position just before it, the end of the row above.
On a grid with an end-of-row layout token (Lumina-mGPT, Emu3) that token is known and fed for real, as
the official Lumina-mGPT code does. On a plain grid (LlamaGen, Janus, the tiny models) the end of the
row above is not decided yet: as the official LlamaGen code does, the row above's latest token stands
in for it at that position, until the real token is fed and replaces it (`CachedSession.forward_at`).
A row's last token is fed once more, in the next pass, only to put it in the cache for the rows below.

Where this differs from the official code (`ThisisBillhe/ZipAR`):
- Attention. The official LlamaGen code masks by raster position over a static cache, so a token also
  attends to the zero-filled slots of cells not decided yet; the Lumina-mGPT code masks by the order
  tokens were appended. Here a token sees exactly the tokens decided before it in raster order (and the
  stand-in), which is what the paper describes.
- The first row. The official LlamaGen code decodes the first row whole before the second starts; the
  Lumina-mGPT code and the paper start the second row once the first has s tokens, as here.
- Sampling. One draw per row in flight from the method's sampling settings; the official code applies
  classifier-free guidance the same way and samples each row's token in turn.
- The window is fixed, as in the official code. The paper's ICML version (arXiv v3) adds an adaptive
  local window that tests each new row's first token with a rejection rule like speculative decoding's;
  its code is not published and it is not built here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from specviz.core.params import ZiparParameters
from specviz.core.settings import SamplingSettings
from specviz.decoding.passes import TokenLoop
from specviz.decoding.sampling import sample
from specviz.models.protocol import IMAGE_CELL, Geometry, Session
from specviz.models.syncing import intended_sync, read_to_host
from specviz.trace import RowsRecord


@dataclass(frozen=True)
class ZipPass:
    """One record of the schedule: the positions it decides (one per row in flight, top row first) and
    their grid rows; and the pass before it, which feeds the tokens at `fed` (their logits decide
    `decided`), each read from position `source` (itself, or for a stand-in the row above's latest
    token). The first record decides from the prefill and feeds nothing."""

    decided: tuple[int, ...]
    rows: tuple[int, ...]
    fed: tuple[int, ...]
    source: tuple[int, ...]
    predictor: tuple[int, ...]  # for each decided position, the index in `fed` whose logits decide it

    @property
    def stand_ins(self) -> int:
        return sum(1 for position, source in zip(self.fed, self.source, strict=True) if position != source)


def row_spans(geometry: Geometry) -> list[tuple[int, int]]:
    """[begin, end) sequence positions of each image row: from its first cell to the next row's first
    cell, so a row owns the layout slots after it (an end-of-row token); the first row also owns those
    before it and the last those after it."""
    cells = geometry.cell_of_position()
    first = {}
    for position, cell in enumerate(cells):
        if cell >= 0 and cell % geometry.cols == 0:
            first[cell // geometry.cols] = position
    begins = [0, *(first[row] for row in range(1, geometry.rows))]
    return list(zip(begins, [*begins[1:], geometry.seq_len], strict=True))


def schedule(geometry: Geometry, window_size: int) -> list[ZipPass]:
    """ZipAR's passes on this grid: row r + 1 starts once row r has `window_size` image cells decided (or
    is complete); each pass then decides the next position of every row in flight."""
    if geometry.order is not None:
        raise ValueError("ZipAR decodes a raster grid; this geometry already has its own order")
    spans = row_spans(geometry)
    cells = geometry.cell_of_position()
    known = [entry != IMAGE_CELL for entry in geometry.layout]  # a layout slot's token is known from the start
    fed_real = [False] * geometry.seq_len
    cursor = [begin for begin, _ in spans]
    drawn = [0] * len(spans)  # image cells decided per row
    started = [True] + [False] * (len(spans) - 1)
    passes: list[ZipPass] = []
    feeds: dict[int, int] = {}  # position -> source of the next pass's fed tokens
    while True:
        flight = [row for row, (_, end) in enumerate(spans) if started[row] and cursor[row] < end]
        if not flight:
            break
        decided = tuple(cursor[row] for row in flight)
        fed = tuple(feeds)
        index = {position: i for i, position in enumerate(fed)}
        predictor = tuple(index[position - 1] for position in decided) if passes else ()
        passes.append(ZipPass(decided, tuple(flight), fed, tuple(feeds.values()), predictor))
        for position, source in feeds.items():
            fed_real[position] = fed_real[position] or position == source
        for row in flight:
            drawn[row] += cells[cursor[row]] >= 0
            known[cursor[row]] = True
            cursor[row] += 1
        for row in range(1, len(spans)):
            above_done = cursor[row - 1] == spans[row - 1][1]
            if not started[row] and started[row - 1] and (drawn[row - 1] >= window_size or above_done):
                started[row] = True
        feeds = {}
        for row, (_, end) in enumerate(spans):
            if not started[row]:
                continue
            if cursor[row] < end:  # the row needs the logits of the position before its next one
                before = cursor[row] - 1
                if known[before]:
                    feeds[before] = before
                else:  # the end of the row above, not decided yet: its latest token stands in
                    feeds[before] = cursor[row - 1] - 1
            elif row < len(spans) - 1 and cursor[row] == end and not fed_real[end - 1]:
                feeds[end - 1] = end - 1  # a finished row's last token, for the rows below to see
        feeds = dict(sorted(feeds.items()))
    return passes


def decision_geometry(geometry: Geometry, params: ZiparParameters) -> Geometry:
    """The geometry of a ZipAR trace: the sequence positions in the order the schedule decides them,
    each with its grid cell (`order`, -1 for a layout slot) and its layout entry."""
    return geometry.in_decision_order(
        [position for step in schedule(geometry, params.window_size) for position in step.decided]
    )


def iterate(
    session: Session, sampling: SamplingSettings, generator: torch.Generator, params: ZiparParameters
) -> Iterator[RowsRecord]:
    """One record per pass: the tokens drawn together, one per row in flight, in the order of
    `decision_geometry`."""
    yield from RowsLoop(session, sampling, generator, params).records()


class RowsLoop(TokenLoop):
    """ZipAR's schedule run pass by pass: each pass feeds the tokens its rows need (stand-ins included)
    and draws one token in every row in flight."""

    def __init__(
        self, session: Session, sampling: SamplingSettings, generator: torch.Generator, params: ZiparParameters
    ):
        super().__init__(session, sampling, generator, params)
        self.passes = schedule(session.geometry, params.window_size)
        # every pass's fed positions, their sources and the positions decided, copied to the device once
        with intended_sync():
            steps, device = self.passes, self.device
            self.sources = torch.tensor([s for step in steps for s in step.source], dtype=torch.long, device=device)
            self.decided = torch.tensor([d for step in steps for d in step.decided], dtype=torch.long, device=device)
            self.predictors = torch.tensor(
                [p for step in steps for p in step.predictor], dtype=torch.long, device=device
            )
            # the tokens decided so far in raster order, the layout's known from the start
            self.raster = torch.tensor(session.geometry.layout, dtype=torch.long, device=device).clamp(min=0)
        self.next_pass = self.fed_at = self.decided_at = self.predicted_at = 0

    @property
    def done(self) -> bool:
        return self.next_pass == len(self.passes)

    def first_records(self) -> Iterator[RowsRecord]:
        """The first row's first token, from the prefill: the schedule's first record, no pass."""
        self.draw_first()
        yield self._record(self.passes[0], self.head)

    def step(self) -> RowsRecord:
        """Feed this pass's tokens and draw one token in every row in flight from the logits before it."""
        step, count = self.passes[self.next_pass], len(self.passes[self.next_pass].decided)
        started = self.clock.mark()
        fed = self.raster[self.sources[self.fed_at : self.fed_at + len(step.fed)]]
        logits = self.session.forward_at(fed, step.fed)
        logits = logits[self.predictors[self.predicted_at : self.predicted_at + count]]
        self.predicted_at += count
        self.fed_at += len(step.fed)
        tokens = sample(self.sampling.probabilities(logits), self.generator)
        drawn = self.clock.mark()
        record = self._record(step, tokens)
        record.forward_ms = self.clock.ms(started, drawn)  # read once the record's copy has waited for the pass
        return record

    def _record(self, step: ZipPass, tokens: torch.Tensor) -> RowsRecord:
        """Commit `tokens` at the positions `step` decides, and record them (the pass's one host copy)."""
        count = len(step.decided)
        self.raster[self.decided[self.decided_at : self.decided_at + count]] = tokens
        record = RowsRecord(
            start=self.decided_at,
            committed=read_to_host(tokens),
            rows=list(step.rows),
            fed=len(step.fed),
            stand_ins=step.stand_ins,
            forward_ms=0.0,
        )
        self.decided_at += count
        self.next_pass += 1
        return record
