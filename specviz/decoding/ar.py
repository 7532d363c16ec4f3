"""Vanilla autoregressive decoding: one token per model pass, the baseline of every speedup.

It is the model's own loop and nothing more (sample from p, append, commit), so ratios against it
are honest; `python -m specviz bench` checks it against transformers' `generate()`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import torch

from specviz.core.params import NoParameters
from specviz.core.settings import SamplingSettings
from specviz.models.protocol import Session
from specviz.models.syncing import read_to_host
from specviz.trace import TokenRecord


def iterate(
    session: Session, sampling: SamplingSettings, generator: torch.Generator, params: NoParameters
) -> Iterator[TokenRecord]:
    """Yield one record per token; position i is sampled from p(. | tokens before i). Each token is
    fed to the model when the next one needs it, so a live run has made as many passes as it has
    tokens (the prefill gives the first) and the last token costs no pass."""
    logits = session.next_logits
    token = None
    for position in range(session.geometry.seq_len):
        started = time.perf_counter()
        if token is not None:
            logits = session.forward(token)[0]
            session.commit(1)
        token = torch.multinomial(sampling.probabilities(logits), 1, generator=generator)
        yield TokenRecord(
            start=position, committed=read_to_host(token), forward_ms=(time.perf_counter() - started) * 1000
        )
