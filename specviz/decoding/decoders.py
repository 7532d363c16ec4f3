"""A run's two kinds of tokens behind one interface: ids of a discrete model, vectors of a continuous pair.

A method's loop yields one record per pass. A decoder opens the model's session (the prefill, timed),
starts the loop on it and keeps what a trace needs besides the records: the image so far (token ids,
or a continuous pair's vectors), the geometry and the fields of its kind. The runner, the race and
the CLI hold a decoder and never ask which kind it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from specviz.core.params import Parameters
from specviz.core.settings import SamplingSettings
from specviz.models.continuous import check_continuous_sampling
from specviz.models.protocol import Geometry, ImageModel
from specviz.trace import ContinuousRecord, Iteration


class TokenDecoder:
    """A discrete model's run: the session is the model's, `prepare` does the method's per-model work
    (a neighbour table, a drafter's check) after the prefill and untimed, and each record's committed
    ids are the image's tokens, in the order of `geometry` (the model's, or the order a method decides
    positions in). A method whose order is known only as it runs (PJD) gives no geometry: its records name
    the positions they decide, and `geometry` lists those first, the rest after them in raster order."""

    def __init__(
        self,
        model: ImageModel,
        loop: Callable[..., Iterator[Iteration]],
        prompt: str,
        seed: int,
        sampling: SamplingSettings,
        params: Parameters,
        prepare: Callable[[Any, Parameters], None],
        geometry: Geometry | None,
    ):
        started = time.perf_counter()
        self.session = model.session(prompt, sampling.guidance_scale)
        self.prefill_ms = (time.perf_counter() - started) * 1000
        prepare(self.session, params)
        self._fixed, self._raster = geometry, model.geometry
        self._decided: Geometry | None = None  # the geometry of the positions named so far, made when asked
        self.positions: list[int] = []  # where the order is known only as the run goes: the positions decided
        self.tokens: list[int] = []
        generator = torch.Generator(device=model.device).manual_seed(seed)
        self._records = loop(self.session, sampling, generator, params)

    def next(self) -> Iteration | None:
        """The next pass's record; None once the image is complete."""
        record = next(self._records, None)
        if record is not None:
            self.tokens.extend(record.committed)
            if self._fixed is None:
                self.positions.extend(record.positions)
                self._decided = None
        return record

    @property
    def geometry(self) -> Geometry:
        """The run's geometry: the model's, a static decision order's, or the positions decided so far
        followed by the rest in raster order (complete once the run is)."""
        if self._fixed is not None:
            return self._fixed
        if self._decided is None:
            self._decided = self._raster.in_decision_order(self.positions)
        return self._decided

    @property
    def decodable(self) -> list[int]:
        """What `model.decode` takes for the image so far."""
        return self.tokens

    @property
    def order(self) -> tuple[int, ...] | None:
        """The cell of each position where the method decides them out of raster order (ZipAR)."""
        return self.geometry.order

    def trace_fields(self) -> dict:
        """The trace's fields of this kind of run: none beyond the records."""
        return {}


class VectorDecoder:
    """A continuous pair's run: the session opens draft and target on the prompt (a random-order pair
    draws its generation order from the seed), each pass yields its record with the token values it
    committed, and the trace keeps the values (`vectors`) and the draft model's passes."""

    def __init__(
        self,
        model: ImageModel,
        loop: Callable[..., Iterator[tuple[ContinuousRecord, torch.Tensor]]],
        prompt: str,
        seed: int,
        sampling: SamplingSettings,
        params: Parameters,
    ):
        check_continuous_sampling(sampling)
        started = time.perf_counter()
        self.session = model.session(prompt, sampling.guidance_scale, seed=seed)
        self.prefill_ms = (time.perf_counter() - started) * 1000
        self.geometry = self.session.geometry
        self.tokens: list[int] = []
        self.vectors: list[list[float]] = []
        generator = torch.Generator(device=model.device).manual_seed(seed)
        self._records = loop(self.session, sampling, generator, params)

    def next(self) -> ContinuousRecord | None:
        """The next pass's record; None once the image is complete."""
        item = next(self._records, None)
        if item is None:
            return None
        record, values = item
        self.vectors.extend(values.float().cpu().tolist())
        self.tokens.extend(record.committed)
        return record

    @property
    def decodable(self) -> list[list[float]]:
        """What `model.decode` takes for the image so far: the token values."""
        return self.vectors

    @property
    def order(self) -> tuple[int, ...] | None:
        """The cell of each position, for a random-order pair (`decode_in_order`)."""
        return self.geometry.order

    def trace_fields(self) -> dict:
        draft = self.session.draft
        return {"vectors": self.vectors, "draft_nfe": draft.nfe if draft else None}


Decoder = TokenDecoder | VectorDecoder
