"""The race's verdict is taken on the compute clock (CPU time), which a busy machine cannot inflate."""

import statistics
import sys
import threading
import time

import torch

from specviz.core.timing import compute_clock
from specviz.decoding.runner import RunStream
from specviz.measure.race import retimed
from specviz.metrics import Speedup, timed_speedup
from specviz.models.toys.discrete import TOYS


def test_the_compute_clock_counts_this_threads_work_not_the_time_others_take():
    clock = compute_clock(1)
    assert clock is time.thread_time and compute_clock(4) is time.process_time
    started_cpu, started_wall = clock(), time.perf_counter()
    time.sleep(0.2)  # the thread waits: wall time passes, its CPU time does not
    assert time.perf_counter() - started_wall >= 0.2 and clock() - started_cpu < 0.05


def test_a_run_keeps_both_clocks_and_the_compute_one_ignores_a_busy_neighbour():
    """Runs beside a thread that competes for the interpreter: their wall clock counts its share, their compute
    clock only their own. The interpreter hands over every 0.1 ms (not its 5 ms), and runs repeat until they took
    0.2 s, so the neighbour gets its turns however quick one run of the toy is (3 ms: one 5 ms slice could hold
    it whole, and did, once, under a loaded suite)."""
    toy = TOYS["short"]()
    threads, interval = torch.get_num_threads(), sys.getswitchinterval()
    torch.set_num_threads(1)
    sys.setswitchinterval(1e-4)
    try:
        stop = threading.Event()

        def busy() -> None:  # another program's work, competing for the same cores through the GIL
            while not stop.is_set():
                sum(range(1000))

        neighbour = threading.Thread(target=busy, daemon=True)
        neighbour.start()
        traces = []
        try:
            while sum(trace.seconds for trace in traces) < 0.2:
                stream = RunStream(toy, "sjd", "a", len(traces))
                while stream.step() is not None:
                    pass
                traces.append(stream.trace())
        finally:
            stop.set()
            neighbour.join()
    finally:
        torch.set_num_threads(threads)
        sys.setswitchinterval(interval)
    assert all(trace.compute_seconds > 0 for trace in traces)
    compute, wall = (sum(getattr(trace, clock) for trace in traces) for clock in ("compute_seconds", "seconds"))
    # the neighbour holds the interpreter about half the time: the wall clock counts its share, the compute
    # clock only the runs' own
    assert compute < 0.8 * wall, (compute, wall)


def test_retiming_keeps_compute_timings_and_the_speedup_is_taken_on_them():
    toy = TOYS["short"]()
    traces = []
    for method in ("sjd", "ar"):
        stream = RunStream(toy, method, "a", 0)
        while stream.step() is not None:
            pass
        traces.append(stream.trace())
    rounds = [item for item in retimed(toy, traces, repeats=2) if item is not None]
    method, ar = rounds[-1].traces
    assert len(method.compute_timings) == len(method.timings) == 2
    assert method.compute_seconds == statistics.median(method.compute_timings)
    on_compute, on_wall = timed_speedup(method, ar), timed_speedup(method, ar, clock="wall")
    assert on_compute.clock == "compute" and on_wall.clock == "wall"
    ratios = [a / m for a, m in zip(ar.compute_timings, method.compute_timings, strict=True)]
    assert (on_compute.low, on_compute.high) == (min(ratios), max(ratios))


def test_traces_from_before_the_compute_clock_fall_back_to_the_wall_clock():
    toy = TOYS["short"]()
    stream = RunStream(toy, "ar", "a", 0)
    while stream.step() is not None:
        pass
    old = stream.trace().model_copy(update={"timings": [2.0, 3.0], "compute_seconds": None})
    method = old.model_copy(update={"method": "sjd", "timings": [1.0, 1.0]})
    assert timed_speedup(method, old) == Speedup(2.5, 2.0, 3.0, 2, "wall")
    assert timed_speedup(method, old, clock="compute") is None
