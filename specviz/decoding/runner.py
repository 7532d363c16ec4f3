"""Run one method on one prompt and seed, and record it as a Trace."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import torch

from specviz.core.inputs import check_prompt, check_seed
from specviz.core.params import Parameters
from specviz.core.settings import SamplingSettings
from specviz.core.timing import compute_clock
from specviz.decoding.budget import check_pass_memory, memory_ceiling
from specviz.decoding.registry import get_method
from specviz.models.protocol import ImageModel
from specviz.trace import Iteration, Trace, TraceGeometry, TraceSampling


class RunStream:
    """One generation advanced iteration by iteration, so a UI can show it (or race it) live.

    `memory`: the ceiling one pass may allocate (`specviz.decoding.budget.memory_ceiling`; by default half
    of this machine's), checked against the settings before the prefill.

    `elapsed` is this run's own time so far (prefill included), measured only while it advances, so two
    streams interleaved on one device each keep their own honest clock; `compute_elapsed` the same on the
    compute clock (`specviz.core.timing.compute_clock`: CPU time, which other programs cannot slow).
    """

    def __init__(
        self,
        model: ImageModel,
        method: str,
        prompt: str,
        seed: int,
        sampling: SamplingSettings | None = None,
        params: Mapping[str, Any] | Parameters | None = None,
        memory: tuple[int, str] | None = None,
    ):
        self.spec = get_method(method)
        self.model, self.method, self.seed = model, method, check_seed(seed)
        self.prompt = check_prompt(prompt)
        self.sampling = sampling or model.default_sampling
        self.params = self.spec.resolve(params)
        geometry = model.geometry
        ceiling = memory or memory_ceiling(device=model.device)  # before any work: a pass must fit
        check_pass_memory(method, self.params, geometry.vocab_size, geometry.seq_len, ceiling)
        self._compute_clock = compute_clock(torch.get_num_threads())
        compute_started = self._compute_clock()
        with torch.inference_mode():
            self.decoder = self.spec.open(model, self.prompt, seed, self.sampling, self.params)
        self.prefill_ms = self.decoder.prefill_ms
        self.elapsed = self.prefill_ms / 1000
        self.compute_elapsed = self._compute_clock() - compute_started
        self.iterations: list[Iteration] = []

    def step(self) -> Iteration | None:
        """Advance one iteration; None once the image is complete."""
        started, compute_started = time.perf_counter(), self._compute_clock()
        with torch.inference_mode():
            iteration = self.decoder.next()
        self.elapsed += time.perf_counter() - started
        self.compute_elapsed += self._compute_clock() - compute_started
        if iteration is not None:
            self.iterations.append(iteration)
        return iteration

    def trace(self) -> Trace:
        geometry = self.decoder.geometry
        return Trace(
            model=self.model.name,
            method=self.method,
            lossless=self.spec.is_lossless(self.sampling.greedy),
            prompt=self.prompt,
            seed=self.seed,
            sampling=TraceSampling(**self.sampling.to_dict()),
            params=self.params.to_dict(),
            geometry=TraceGeometry(
                rows=geometry.rows,
                cols=geometry.cols,
                vocab_size=geometry.vocab_size,
                layout=list(geometry.layout),
                order=None if geometry.order is None else list(geometry.order),
            ),
            tokens=self.tokens,
            nfe=self.session.nfe,
            seconds=self.elapsed,
            compute_seconds=self.compute_elapsed,
            prefill_ms=self.prefill_ms,
            iterations=self.iterations,
            **self.decoder.trace_fields(),
        )

    @property
    def session(self) -> Any:
        """The model's session (a continuous pair's: draft and target)."""
        return self.decoder.session

    @property
    def tokens(self) -> list[int]:
        return self.decoder.tokens

    @property
    def order(self) -> tuple[int, ...] | None:
        """The cell order of a random-order model's run (for `decode_in_order`), else None."""
        return self.decoder.order

    @property
    def decodable(self) -> list[int] | list[list[float]]:
        """What `model.decode` takes for the image so far: the tokens, or a continuous run's vectors."""
        return self.decoder.decodable


def run(
    model: ImageModel,
    method: str,
    prompt: str,
    seed: int,
    sampling: SamplingSettings | None = None,
    params: Mapping[str, Any] | Parameters | None = None,
    memory: tuple[int, str] | None = None,
    between_passes: Callable[[], None] | None = None,
) -> Trace:
    """Generate one image with `method` and return its Trace; all randomness comes from `seed`.
    `between_passes` is called before every pass and may raise to stop the run (a request's time budget)."""
    stream = RunStream(model, method, prompt, seed, sampling, params, memory)
    while True:
        if between_passes is not None:
            between_passes()
        if stream.step() is None:
            return stream.trace()
