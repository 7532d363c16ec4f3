"""Vanilla autoregressive decoding on a continuous-token pair: one token per pass, drawn by a
diffusion head. On the target it is the baseline of every CSpD speedup; on the draft alone
(`ar-draft`) it shows what the draft model would make without verification."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from specviz.core.params import NoParameters
from specviz.core.settings import SamplingSettings
from specviz.decoding.denoising import alone
from specviz.models.continuous import PairSession
from specviz.trace import ContinuousRecord


def iterate(
    pair: PairSession, sampling: SamplingSettings, generator: torch.Generator, params: NoParameters
) -> Iterator[tuple[ContinuousRecord, torch.Tensor]]:
    """The target alone."""
    yield from alone(pair.target, sampling, generator, "target")


def iterate_draft(
    pair: PairSession, sampling: SamplingSettings, generator: torch.Generator, params: NoParameters
) -> Iterator[tuple[ContinuousRecord, torch.Tensor]]:
    """The draft alone, for reference: not the target's distribution."""
    yield from alone(pair.draft, sampling, generator, "draft")
