"""Vanilla autoregressive decoding: one token per model pass, the baseline of every speedup.

It is the model's own loop and nothing more (sample from p, append, commit), so ratios against it
are honest; `python -m specviz bench` checks it against transformers' `generate()`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import torch

from specviz.decoding.params import NoParameters
from specviz.models.protocol import Session
from specviz.models.settings import SamplingSettings
from specviz.trace import Iteration


def iterate(
    session: Session, sampling: SamplingSettings, generator: torch.Generator, params: NoParameters
) -> Iterator[Iteration]:
    """Yield one Iteration per token; position i is sampled from p(. | tokens before i)."""
    logits = session.next_logits
    length = session.geometry.seq_len
    for position in range(length):
        started = time.perf_counter()
        token = torch.multinomial(sampling.probabilities(logits), 1, generator=generator)
        if position + 1 < length:
            logits = session.forward(token)[0]
            session.commit(1)
        yield Iteration(start=position, committed=[int(token)], forward_ms=(time.perf_counter() - started) * 1000)
