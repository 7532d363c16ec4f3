"""What every loop of passes shares: the clock, when to stop, and the records in order.

`PassLoop` is the base of every loop but vanilla AR's (kept as the model family's own loop, so that
ratios against it are honest): the records made before the first pass (a token from the prefill, a
pre-filled share of a continuous image), then one record per `step()` until the loop is `done`.
`TokenLoop` adds what the loops over discrete tokens share (the Jacobi window, the draft trees, SJD-PAC's
candidate trees, ZipAR's rows): position 0 drawn from the prefill's distribution (exact, and no extra
pass), the head and its position. Inside a pass the clock marks the drafting, the model pass and the
verification without a host sync of its own; the pass's one copy to the host (`read_to_host`) waits for
the device, after which the marks are read.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import torch

from specviz.core.params import Parameters
from specviz.core.settings import SamplingSettings
from specviz.decoding.sampling import sample
from specviz.models.protocol import Session
from specviz.models.syncing import read_to_host
from specviz.trace import Iteration, TokenRecord


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

    def verify_ms(self, forwarded, verified, host_started: float) -> float:
        """The verification's device time (after the model pass, to the host copy) and its host work since."""
        return self.ms(forwarded, verified) + (time.perf_counter() - host_started) * 1000


class PassLoop:
    """A loop of passes: its clock, the records it makes before its first pass, and one record per
    `step()` until it is `done`."""

    def __init__(self, device: torch.device):
        self.device = device
        self.clock = PassClock(device)

    def first_records(self) -> Iterator[Any]:
        """The records made before the first pass (none unless a loop says so)."""
        return iter(())

    @property
    def done(self) -> bool:
        raise NotImplementedError

    def step(self) -> Any:
        raise NotImplementedError

    def records(self) -> Iterator[Any]:
        """The first records, then one per pass until the loop is done."""
        yield from self.first_records()
        while not self.done:
            yield self.step()


class TokenLoop(PassLoop):
    """A loop over a discrete-token session: the session and settings, the head (the decided token not yet
    in the cache) and its position. Position 0 is drawn from the prefill's distribution."""

    def __init__(self, session: Session, sampling: SamplingSettings, generator: torch.Generator, params: Parameters):
        super().__init__(session.next_logits.device)
        self.session, self.sampling, self.generator, self.params = session, sampling, generator, params
        geometry = session.geometry
        self.layout, self.seq_len, self.vocab = geometry.layout, geometry.seq_len, geometry.vocab_size
        self.first_probs = sampling.probabilities(session.next_logits)[None]  # (1, V): position 0's distribution
        self.head_position = 0

    def draw_first(self) -> None:
        """Position 0, drawn from the prefill's distribution; a loop calls this where its draws begin."""
        self.head = sample(self.first_probs, self.generator)

    @property
    def done(self) -> bool:
        return self.head_position >= self.seq_len - 1

    def first_records(self) -> Iterator[Iteration]:
        """Position 0 is drawn from the prefill's distribution: exact, and no extra pass."""
        yield TokenRecord(start=0, committed=read_to_host(self.head[:1]), forward_ms=0.0)
