"""A method raced against AR on one device, and clocks that can be trusted afterwards.

`Race` interleaves the two runs as the app shows them: whichever side is behind on its own clock
advances one iteration, as if each had the device alone. Drawing the race competes with the model on
a CPU (cores and the GIL, costing AR's many short passes more than a method's few long ones), so the
clocks a race or a comparison reports come from `retimed`: every run repeated undisturbed, one
after another in turns, reported as the median with its spread. The app and `python -m specviz race`
both use these, so their numbers agree.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from specviz.core.params import Parameters
from specviz.core.settings import SamplingSettings
from specviz.core.timing import TIMINGS
from specviz.decoding.runner import RunStream
from specviz.models.protocol import ImageModel
from specviz.trace import Trace


class Race:
    """A method and AR on the same prompt, seed and sampling, advanced in turns by their own clocks."""

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
        self.contender = RunStream(model, method, prompt, seed, sampling, params, memory)
        self.baseline = RunStream(model, "ar", prompt, seed, sampling, memory=memory)
        self._finished = {self.contender: False, self.baseline: False}

    @property
    def running(self) -> list[RunStream]:
        """The sides whose image is not complete yet."""
        return [stream for stream, done in self._finished.items() if not done]

    @property
    def finished(self) -> bool:
        return not self.running

    def step(self) -> RunStream | None:
        """Advance the side that is behind on its own clock by one iteration; the side advanced, or
        None once both images are complete."""
        running = self.running
        if not running:
            return None
        behind = min(running, key=lambda stream: stream.elapsed)
        self._finished[behind] = behind.step() is None
        return behind

    def traces(self) -> tuple[Trace, Trace]:
        """The method's trace and AR's, with the clocks of the race itself."""
        return self.contender.trace(), self.baseline.trace()


@dataclass(frozen=True)
class Timing:
    """One run's seconds over its undisturbed repeats, on the wall clock and on the compute clock."""

    seconds: tuple[float, ...]
    compute: tuple[float, ...] | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def needs_retiming(model: ImageModel) -> bool:
    """Whether a race's or comparison's clocks must come from undisturbed repeats on this device.

    On a CPU the live clocks are not trustworthy (drawing competes with the model); on a GPU the
    device's own clock is, and repeating a real model's run would cost minutes."""
    return model.device.type == "cpu"


def repeat_passes(model: ImageModel, trace: Trace) -> Iterator[Trace | None]:
    """The same run (model, method, prompt, seed, settings) once more, one item per pass: None after each
    pass, the new trace last. It reproduces the tokens; its clock counts only its own passes."""
    sampling = trace.sampling_settings
    stream = RunStream(model, trace.method, trace.prompt, trace.seed, sampling, trace.params)
    while stream.step() is not None:
        yield None
    yield stream.trace()


@dataclass(frozen=True)
class TimingRound:
    """The runs after a round of undisturbed repeats: each with its clocks so far (`seconds` their median,
    `timings` every repeat). `abandoned`: a repeat drew other tokens, so its clock would time another
    computation; the runs are then as the last round that reproduced them left them, and no round follows.
    `disturbed`: rounds timed again because other work ran during them."""

    traces: list[Trace]
    done: int  # rounds that reproduced every run
    abandoned: bool = False
    disturbed: int = 0


def retimed(
    model: ImageModel,
    traces: list[Trace],
    repeats: int = TIMINGS,
    budget: float = math.inf,
    interruptions: Callable[[], int] | None = None,
) -> Iterator[TimingRound | None]:
    """Repeat every run `repeats` times in turns (all runs once, then all again), yielding the runs with
    their clocks after each round. Rounds stop early once they have taken `budget` seconds and two are
    done (a spread needs two): slow runs vary less, and a visitor waits for them.

    `interruptions`: a count of the other work that shares the device (a viewer stepping through the run).
    Given one, the repeats give way after every pass (a None item: the caller's thread may do that work
    then), and a round during which the count moved is timed again, since the work competed with its
    clocks; after three budgets the timing stops with the rounds it has."""
    seconds: list[list[float]] = [[] for _ in traces]
    compute: list[list[float]] = [[] for _ in traces]
    timed = list(traces)
    started = time.perf_counter()
    done = disturbed = 0
    while done < repeats:
        spent = time.perf_counter() - started
        if (done >= 2 and spent >= budget) or (interruptions and spent >= 3 * budget):
            return
        before = interruptions() if interruptions else 0
        clocks_now, compute_now = [], []
        for trace in traces:
            for again in repeat_passes(model, trace):
                if again is None and interruptions:
                    yield None
            if again.tokens != trace.tokens:
                yield TimingRound(timed, done, abandoned=True, disturbed=disturbed)
                return
            clocks_now.append(again.seconds)
            compute_now.append(again.compute_seconds)
        if interruptions and interruptions() != before:
            disturbed += 1
            continue
        for clocks, clock, cpu, cpu_now in zip(seconds, clocks_now, compute, compute_now, strict=True):
            clocks.append(clock)
            cpu.append(cpu_now)
        done += 1
        timed = [
            with_timing(trace, Timing(tuple(clocks), tuple(cpu)))
            for trace, clocks, cpu in zip(traces, seconds, compute, strict=True)
        ]
        yield TimingRound(timed, done, disturbed=disturbed)


def with_timing(trace: Trace, timing: Timing) -> Trace:
    """The trace with its undisturbed repeats' clocks, `seconds` (and `compute_seconds`) their median."""
    update = {"seconds": timing.median, "timings": list(timing.seconds)}
    if timing.compute is not None:
        update.update(compute_seconds=statistics.median(timing.compute), compute_timings=list(timing.compute))
    return trace.model_copy(update=update)
