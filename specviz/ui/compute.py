"""The compute queue every tab shares: one thread for all model work, a count of the drawing that competes
with it (a timing round it disturbed is timed again), and a request's hold on the queue, decided before its
work and kept while it runs (docs/app.md, "Limits")."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import gradio as gr

from specviz.core.inputs import InputError, brief
from specviz.decoding.budget import memory_ceiling
from specviz.models.protocol import ImageModel

# A request's budget: one pass may allocate an eighth of this machine's memory (SPECVIZ_RUN_MEMORY_MB fixes it),
# and a request may hold the compute queue this many seconds (SPECVIZ_REQUEST_SECONDS).
REQUEST_MEMORY_SHARE = 0.125
REQUEST_SECONDS_ENV_VAR = "SPECVIZ_REQUEST_SECONDS"
SPACE_REQUEST_SECONDS = 180  # a public Space: the longest slow-motion preset race takes about 60 s on 2 cores
LOCAL_REQUEST_SECONDS = 1800  # one's own machine: a 7B model's race with its timing rounds fits
OUT_OF_TIME = " Timing again stopped at the request's time budget: the clocks are those of the rounds done."

_compute_lock = threading.Lock()
_compute: tuple[int, ThreadPoolExecutor] | None = None


def on_compute_thread(fn: Callable, *args):
    """Run `fn(*args)` on the process's one compute thread and return its result.

    Gradio calls handlers from a pool of threads. libgomp gives every thread that runs torch a team
    of its own; two teams oversubscribe a small CPU and libgomp then throttles its spin-waits, which
    made the embedded model's short passes 2-3x slower depending on which thread ran them, and the
    race's clocks dishonest. One thread for all model work keeps one team. (Per process id, since
    ZeroGPU forks a process for GPU work and threads do not survive a fork.)
    """
    global _compute
    with _compute_lock:
        if _compute is None or _compute[0] != os.getpid():
            executor = ThreadPoolExecutor(1, thread_name_prefix="specviz-compute")
            _compute = (os.getpid(), executor)
        executor = _compute[1]
    return executor.submit(fn, *args).result()


def each_on_compute_thread(items: Iterator) -> Iterator:
    """The items of an iterator that runs the model (re-timing rounds), each made on the compute thread."""
    end = object()
    while (item := on_compute_thread(next, items, end)) is not end:
        yield item


# the longest a race waits, once it has handed its runs to Inspect, for the browser to ask for their views (only
# where the page opened in a browser: a client without one, as gradio_client, asks for none, `opened_in_a_browser`)
HANDOVER_SECONDS = 3.0


class ViewerWork:
    """A count of the drawing that viewers make this server do (Inspect's views, exports): on a CPU it
    competes with runs being timed again, so `retimed` repeats a round during which the count moved. One
    count for every session, as they share the machine."""

    def __init__(self):
        self._count = 0
        self._active = 0
        self._lock = threading.Lock()

    def __call__(self) -> int:
        """A number that moves whenever drawing ran since the last call: at each start and end, and at a call
        made while drawing runs (a round timed wholly inside a long playback sees a move too)."""
        with self._lock:
            if self._active:
                self._count += 1
            return self._count

    def drawing(self, fn: Callable) -> Callable:
        """`fn`, counted when it starts and when it ends (a round that overlaps it in any way sees a move);
        a generator (Play again's frames) from its first frame to its last."""
        if inspect.isgeneratorfunction(fn):

            @functools.wraps(fn)
            def counted_frames(*args):
                with self.busy():
                    yield from fn(*args)

            return counted_frames

        @functools.wraps(fn)
        def counted(*args):
            with self.busy():
                return fn(*args)

        return counted

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        self._note(+1)
        try:
            yield
        finally:
            self._note(-1)

    @property
    def count(self) -> int:
        """The count as it stands, read without moving it: what `settle` is given when runs are handed over."""
        return self._count

    def settle(self, handed: int | None = None, quiet: float = 0.3, limit: float = 2.0) -> None:
        """Wait until no drawing has run for `quiet` seconds, `limit` at most: a race that has just handed
        its runs to Inspect lets the views it set off be drawn before it times anything. `handed`: the count
        when the runs left; the browser asks for Inspect's views once they reach it, a round trip longer than
        `quiet` on a busy laptop, so a drawing that starts within HANDOVER_SECONDS is waited for (without it
        Inspect drew during the first timing round of every race, which was timed again and said so)."""
        if handed is not None:
            asked_by = time.perf_counter() + HANDOVER_SECONDS
            while self._count == handed and not self._active and time.perf_counter() < asked_by:
                time.sleep(0.05)
        deadline = time.perf_counter() + limit
        seen, since = self._count, time.perf_counter()
        while (now := time.perf_counter()) < deadline:
            if self._count != seen or self._active:
                seen, since = self._count, now
            elif now - since >= quiet:
                return
            time.sleep(0.05)

    def _note(self, change: int) -> None:
        with self._lock:
            self._count += 1
            self._active += change


VIEWER_WORK = ViewerWork()


class OverBudget(InputError):
    """A request that reached its time budget, or whose visitor left: its work stops so the queue moves on."""


class Superseded(OverBudget):
    """A race whose page pressed Run or a preset again: the new race is what the page waits for."""


def request_seconds() -> float:
    """How long one request may hold the compute queue: SPECVIZ_REQUEST_SECONDS, else 180 s on a Space, 1800 s
    on one's own machine."""
    named = os.environ.get(REQUEST_SECONDS_ENV_VAR)
    if named is None:
        return SPACE_REQUEST_SECONDS if os.environ.get("SPACE_ID") else LOCAL_REQUEST_SECONDS
    if not (named.isascii() and named.isdigit()) or int(named) < 1:
        raise InputError(f"{REQUEST_SECONDS_ENV_VAR} must be a whole number of seconds, got {brief(named)}")
    return float(named)


def request_memory(model: ImageModel) -> tuple[int, str]:
    """The memory one pass of a visitor's run may allocate (`memory_ceiling` at REQUEST_MEMORY_SHARE)."""
    return memory_ceiling(REQUEST_MEMORY_SHARE, model.device)


# the queue's event a handler runs for (set by checks.CheckedBlocks.process_api; the handler's thread inherits it)
QUEUED_EVENT: contextvars.ContextVar[tuple[gr.Blocks, str] | None] = contextvars.ContextVar("event", default=None)
# the page (Gradio's session) a handler runs for, queued or not (set likewise)
PAGE: contextvars.ContextVar[str | None] = contextvars.ContextVar("page", default=None)
_race_presses: dict[str, tuple[float, str]] = {}  # page -> when it last pressed Run or a preset, and which
_presses_lock = threading.Lock()
REMEMBERED_PAGES = 10_000  # presses (and pages opened in a browser) kept at most; the oldest go first
_browser_pages: dict[str, None] = {}  # pages whose browser ran their load events, oldest first


STOP = "stop"  # what `last_pressed` names after the page's Stop


def race_pressed(button: str) -> float | None:
    """Run or a preset (`button`: "run" or the preset's key) was pressed on this page: a race the page started
    before now stops at its next pass or timing round (`Deadline(superseded_by_press=True)`), so the new race
    need not wait for an old one's clocks. Returns the press's stamp, which the race it starts is given (None
    without a page)."""
    return _pressed(button)


def stop_pressed() -> None:
    """Stop was pressed on this page: Gradio cancels the events running, and a race pressed before it that still
    waits to start (a press deferred behind the race it ends, by `trigger_mode="always_last"`, or queued behind
    other visitors) never begins (`Deadline.stopped`)."""
    _pressed(STOP)


def _pressed(button: str) -> float | None:
    page = PAGE.get()
    if page is None:
        return None
    stamp = time.perf_counter()
    with _presses_lock:  # presses of different buttons run on threads of their own
        _race_presses.pop(page, None)  # re-inserted last: the dict's order is the presses' order
        _race_presses[page] = (stamp, button)
        while len(_race_presses) > REMEMBERED_PAGES:
            del _race_presses[next(iter(_race_presses))]
    return stamp


def page_opened() -> None:
    """The page's browser ran its load events (`demo.load`): its Inspect tab asks for the views of the runs a race
    hands it. A client without a browser runs none."""
    page = PAGE.get()
    if page is None:
        return
    with _presses_lock:
        _browser_pages[page] = None
        while len(_browser_pages) > REMEMBERED_PAGES:
            del _browser_pages[next(iter(_browser_pages))]


def opened_in_a_browser() -> bool:
    """Whether this page's Inspect draws the runs a race hands it, so that the race's timing waits for that drawing
    (`ViewerWork.settle`); true where no page is known (a direct call): there the wait is kept, at most
    HANDOVER_SECONDS."""
    page = PAGE.get()
    return page is None or page in _browser_pages


def last_pressed() -> str | None:
    """The button this page pressed last for a race ("run" or a preset's key), or STOP; None where unknown (no
    page, or none pressed)."""
    page = PAGE.get()
    pressed = _race_presses.get(page) if page is not None else None
    return None if pressed is None else pressed[1]


class Deadline:
    """A request's hold on the compute queue: `check`, called between passes, raises OverBudget once the
    request has run `seconds` (its slow-motion pauses included: they hold the queue too), or once its visitor
    is gone: the page closed (Gradio marks the session's running event dead) or Stop cancelled it (the event
    leaves the running jobs). Without a queued event (a direct call, a ZeroGPU worker process) only the
    clock counts."""

    def __init__(self, seconds: float | None = None, superseded_by_press: bool = False, press: float | None = None):
        """`superseded_by_press`: a race, which a later press of Run or a preset on its page ends
        (`race_pressed`); `press`: the stamp of the press that started it, so that a press made while it
        still waited in the queue ends it too (without one, presses after it began)."""
        self._press = press
        self.seconds = request_seconds() if seconds is None else seconds
        self.started = time.perf_counter()
        self.end = self.started + self.seconds
        self._blocks, self._event = None, None
        current = QUEUED_EVENT.get()
        if current is not None:
            self._blocks, event_id = current
            self._event = next((e for e in self._running() if e._id == event_id), None)
        self._page = PAGE.get() if superseded_by_press else None

    def _running(self) -> list:
        queue = getattr(self._blocks, "_queue", None)
        return [event for job in getattr(queue, "active_jobs", None) or [] if job for event in job]

    @property
    def left(self) -> float:
        return self.end - time.perf_counter()

    def _pressed_since(self) -> str | None:
        """The button the page pressed last (a race's or STOP), where it was pressed after this race's own press
        (or, without one, after the race began)."""
        if self._page is None or self._page not in _race_presses:
            return None
        latest, button = _race_presses[self._page]
        later = latest != self._press if self._press is not None else latest > self.started
        return button if later else None

    def superseded(self) -> bool:
        """Whether the page pressed Run or a preset since this race's press."""
        return self._pressed_since() not in (None, STOP)

    def stopped(self) -> bool:
        """Whether the page's last press since this race's press was Stop: a race that has not begun then never
        does (one under way Gradio cancels)."""
        return self._pressed_since() == STOP

    def wanted(self) -> bool:
        """Whether the visitor still waits for this request (always, where no queued event is known). Stop does not
        count here: Gradio cancels the race it stops, whose summary is Stop's own line (ended here first, the race
        put its failure's summary and message over it)."""
        if self.superseded():
            return False
        return self._event is None or (self._event.alive and self._event in self._running())

    def check(self) -> None:
        if self.superseded():
            raise Superseded("the page started another race; this one stopped")
        if not self.wanted():
            raise OverBudget("the page that asked for this run closed or stopped it; its work stopped")
        if self.left < 0:
            raise OverBudget(
                f"this request reached its budget of {self.seconds:.0f} s on the compute queue, so it stopped to let "
                f"other visitors' runs start ({REQUEST_SECONDS_ENV_VAR} sets the budget): choose a smaller model, "
                "fewer methods, a live race instead of slow motion, or smaller settings"
            )
