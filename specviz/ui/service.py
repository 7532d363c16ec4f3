"""What every tab of the app shares on the server side: one compute thread for all model work, the
models loaded once per process (at start-up where an owner named them), GPU work entered only where a
request needs it, every endpoint's input checked before its handler runs, user errors as messages
without stack traces, decoded pictures, export folders, and where to serve."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import itertools
import logging
import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gradio as gr
import torch
from PIL import Image

from specviz import metrics
from specviz.core.errors import USER_ERRORS, ModelUnavailable, UnknownModel
from specviz.core.inputs import InputError, brief
from specviz.decoding.budget import memory_ceiling
from specviz.decoding.registry import METHODS
from specviz.models.protocol import ImageModel, decode_in_order
from specviz.models.registry import MODELS, load_model
from specviz.trace import MAX_TRACE_BYTES, Trace

log = logging.getLogger("specviz.ui")

DISPLAY_SIZE = 384  # pixels of the displayed images; token cells stay crisp (nearest neighbour)
MAX_UPLOAD_BYTES = MAX_TRACE_BYTES  # launch(max_file_size=...): a trace is the only upload
EXPORT_ROOT = Path(tempfile.gettempdir()) / "specviz-exports"
EXPORT_MAX_AGE_SECONDS = 3600
MODELS_ENV_VAR = "SPECVIZ_MODELS"
# the models that ship in assets/: small, offline, safe for anonymous visitors; offered on a Space by default.
# They run on the CPU everywhere: at batch 1 a GPU pass of a model this small is bound by kernel launches, and
# on ZeroGPU a GPU slot would cost each visitor's daily quota for nothing.
EMBEDDED_MODELS = ("tiny", "tiny-uncertain", "tiny-continuous")

try:  # ZeroGPU (Hugging Face Spaces): a GPU exists only inside functions decorated with spaces.GPU
    import spaces

    # and only GPU work may enter one: Gradio would otherwise wrap every handler in it on a Space that asks
    # for automatic wrapping (SPACES_GRADIO_AUTO_WRAP), a GPU slot for each click
    spaces.disable_gradio_auto_wrap()
except ImportError:
    spaces = None
# A request's budget, decided before its work and held to while it runs (docs/app.md, "Limits"): one pass may
# allocate an eighth of this machine's memory (SPECVIZ_RUN_MEMORY_MB fixes it), a request may hold the compute
# queue this many seconds (SPECVIZ_REQUEST_SECONDS), and a call may reference this many uploaded files.
REQUEST_MEMORY_SHARE = 0.125
REQUEST_SECONDS_ENV_VAR = "SPECVIZ_REQUEST_SECONDS"
SPACE_REQUEST_SECONDS = 180  # a public Space: the longest slow-motion preset race takes about 60 s on 2 cores
LOCAL_REQUEST_SECONDS = 1800  # one's own machine: a 7B model's race with its timing rounds fits
MAX_REQUEST_FILES = 2  # a trace and the AR run it raced
GPU_PASS_SECONDS = 0.1  # a generous bound on one pass of the largest registered models (8B, bf16, guidance)
GPU_START_SECONDS = 10  # a GPU call's own overhead: prefill, pictures, handing results back

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
        if _is_generator(fn):

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

    def settle(self, quiet: float = 0.3, limit: float = 2.0) -> None:
        """Wait until no drawing has run for `quiet` seconds, `limit` at most: a race that has just handed
        its runs to Inspect lets the views it set off be drawn before it times anything."""
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
# serial numbers of the runs handed to Inspect: a new one on its hidden `loaded` number refreshes its views
LOADS = itertools.count(1)


def offered_models() -> list[str]:
    """The models this app lets its visitors run: SPECVIZ_MODELS (comma-separated), else on a Hugging Face
    Space the embedded models (an anonymous visitor must not make the server download and hold gigabytes of
    weights), else every registered model."""
    named = os.environ.get(MODELS_ENV_VAR)
    if named is not None:
        names = [name.strip() for name in named.split(",") if name.strip()]
        unknown = [name for name in names if name not in MODELS]
        if unknown or not names:
            raise UnknownModel(f"{MODELS_ENV_VAR} names unknown models {unknown}; registered: {', '.join(MODELS)}")
        return names
    if os.environ.get("SPACE_ID"):
        return list(EMBEDDED_MODELS)
    return list(MODELS)


def default_model() -> str:
    """The model the page opens on: the embedded `tiny` where it is offered, else the first offered."""
    offered = offered_models()
    return "tiny" if "tiny" in offered else offered[0]


def startup_models() -> list[str]:
    """The models loaded when the app starts, so that no visitor waits for a load and, on ZeroGPU, models
    are placed on CUDA at start-up, outside any GPU call, as its documentation requires: every model an
    owner named (SPECVIZ_MODELS, or a Space's default); with every registered model offered (a local run),
    the embedded ones, the rest on first use."""
    offered = offered_models()
    if os.environ.get(MODELS_ENV_VAR) is None and not os.environ.get("SPACE_ID"):
        return [name for name in offered if name in EMBEDDED_MODELS]
    return offered


def load_at_startup() -> None:
    """Load `startup_models()`; one that cannot load (weights missing, hub unreachable, too little memory)
    is said in one line of the log, and refused with that reason when a visitor chooses it."""
    for name in startup_models():
        try:
            get_model(name)
        except ModelUnavailable as error:
            log.warning("not loaded at start-up: %s", error)


def device_for(name: str) -> str:
    """Where a model runs: the embedded models on the CPU, the others on CUDA where there is one."""
    return "cuda" if name not in EMBEDDED_MODELS and torch.cuda.is_available() else "cpu"


def get_model(name: str) -> ImageModel:
    """Load an offered model once per process; every session shares it (read-only)."""
    if name not in offered_models():
        raise UnknownModel(f"model {brief(name)} is not offered here; choose one of {', '.join(offered_models())}")
    return _load_once(name)


@functools.cache
def _load_once(name: str) -> ImageModel:
    return on_compute_thread(functools.partial(load_model, name, device=device_for(name)))


def needs_gpu(model_name: str) -> bool:
    """Whether a request on this model needs a GPU: its model sits on one (a CPU model's run needs none)."""
    return get_model(model_name).device.type != "cpu"


def gpu_seconds(passes: int, pause: float = 0.0) -> int:
    """The GPU time to ask ZeroGPU for: `passes` model passes at GPU_PASS_SECONDS, plus `pause` seconds the
    work waits on purpose (slow motion) and a call's overhead. Asked per request, so a short run does not
    hold a long slot and a long one is not cut off at the 60 s default."""
    return math.ceil(GPU_START_SECONDS + passes * GPU_PASS_SECONDS + pause)


def gpu_work(model: Callable[..., str], duration: Callable[..., int]) -> Callable[[Callable], Callable]:
    """Run the decorated work inside `spaces.GPU(duration=duration)` where the request's model (`model` of
    the work's arguments) sits on a GPU, and directly otherwise: only GPU work may take a ZeroGPU slot, which
    costs the visitor's daily quota. `duration` takes the work's arguments. Inside spaces.GPU the work runs in
    a forked worker process: its arguments and what it returns or yields are pickled, so they must be plain
    values (a request, names, traces, pictures), never Gradio components."""

    def decorate(work: Callable) -> Callable:
        on_gpu = spaces.GPU(work, duration=duration) if spaces is not None else work

        def chosen(*args) -> Callable:
            return on_gpu if needs_gpu(model(*args)) else work

        if _is_generator(work):

            @functools.wraps(work)
            def stream(*args):
                yield from chosen(*args)(*args)

            return stream

        @functools.wraps(work)
        def call(*args):
            return chosen(*args)(*args)

        return call

    return decorate


OUT_OF_TIME = " Timing again stopped at the request's time budget: the clocks are those of the rounds done."


class OverBudget(InputError):
    """A request that reached its time budget, or whose visitor left: its work stops so the queue moves on."""


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


# the queue's event a handler runs for (set by CheckedBlocks.process_api; the handler's thread inherits it)
_EVENT_ID: contextvars.ContextVar[tuple[gr.Blocks, str] | None] = contextvars.ContextVar("event", default=None)


class Deadline:
    """A request's hold on the compute queue: `check`, called between passes, raises OverBudget once the
    request has run `seconds` (its slow-motion pauses included: they hold the queue too), or once its visitor
    is gone: the page closed (Gradio marks the session's running event dead) or Stop cancelled it (the event
    leaves the running jobs). Without a queued event (a direct call, a ZeroGPU worker process) only the
    clock counts."""

    def __init__(self, seconds: float | None = None):
        self.seconds = request_seconds() if seconds is None else seconds
        self.end = time.perf_counter() + self.seconds
        self._blocks, self._event = None, None
        current = _EVENT_ID.get()
        if current is not None:
            self._blocks, event_id = current
            self._event = next((e for e in self._running() if e._id == event_id), None)

    def _running(self) -> list:
        queue = getattr(self._blocks, "_queue", None)
        return [event for job in getattr(queue, "active_jobs", None) or [] if job for event in job]

    @property
    def left(self) -> float:
        return self.end - time.perf_counter()

    def wanted(self) -> bool:
        """Whether the visitor still waits for this request (always, where no queued event is known)."""
        return self._event is None or (self._event.alive and self._event in self._running())

    def check(self) -> None:
        if not self.wanted():
            raise OverBudget("the page that asked for this run closed or stopped it; its work stopped")
        if self.left < 0:
            raise OverBudget(
                f"this request reached its budget of {self.seconds:.0f} s on the compute queue, so it stopped to let "
                f"other visitors' runs start ({REQUEST_SECONDS_ENV_VAR} sets the budget): choose a smaller model, "
                "fewer methods, a live race instead of slow motion, or smaller settings"
            )


def user_errors(fn: Callable) -> Callable:
    """Show known problems as a message in the UI, and unknown ones without a stack trace."""

    def report(error: Exception) -> gr.Error:
        if isinstance(error, gr.Error):  # already a message (from work checked inside a GPU call)
            return error
        if isinstance(error, torch.OutOfMemoryError):
            log.warning("out of memory in %s", fn.__name__)
            return gr.Error("Out of memory: try a smaller window, a smaller model, or the CPU.", print_exception=False)
        if isinstance(error, USER_ERRORS):
            log.warning("refused in %s: %s", fn.__name__, error)  # one line; the user sees the message
            return gr.Error(str(error), print_exception=False)
        log.exception("unexpected error")  # the one stack trace, for a bug
        message = f"Something went wrong ({type(error).__name__}); the details are in the server log."
        return gr.Error(message, print_exception=False)

    if _is_generator(fn):

        @functools.wraps(fn)
        def stream(*args):
            try:
                yield from fn(*args)
            except Exception as error:
                raise report(error) from None

        return stream

    @functools.wraps(fn)
    def call(*args):
        try:
            return fn(*args)
        except Exception as error:
            raise report(error) from None

    return call


class CheckedBlocks(gr.Blocks):
    """gr.Blocks whose every endpoint checks what a client sends before its handler runs: the number of
    values, each value against its component as this session shows it (a range or choices that an update
    changed included), and files only from this server's uploads. A refusal is one message to the client
    and one line in the log. Gradio refuses some of these itself, but with a stack trace in the log or a
    message that quotes the whole value (a 10 MB prompt, 1,915 choices), and lets others through to the
    handler (NaN, a list for a number, a decimal where it would round)."""

    async def process_api(self, block_fn, inputs, state=None, request=None, iterator=None, session_hash=None,
                          event_id=None, *args, **kwargs):  # fmt: skip
        """Gradio's, with the queue's event made known to the handler's thread (`Deadline`), and an endpoint
        number that names no endpoint refused in one line (Gradio's own IndexError logged a stack trace)."""
        if isinstance(block_fn, int) and not 0 <= block_fn < len(self.fns):
            raise refusal("the app", f"it has no endpoint {block_fn}")
        _EVENT_ID.set((self, event_id) if event_id else None)
        return await super().process_api(block_fn, inputs, state, request, iterator, session_hash, event_id,
                                         *args, **kwargs)  # fmt: skip

    async def preprocess_data(self, block_fn, inputs: list, state, explicit_call: bool = False) -> list:
        where = block_fn.api_name or block_fn.name
        if len(inputs) != len(block_fn.inputs):
            raise refusal(where, f"takes {len(block_fn.inputs)} values, got {len(inputs)}")
        for component, payload in zip(block_fn.inputs, inputs, strict=True):
            if isinstance(component, gr.File):  # counted before Gradio or the handler reads a byte of them
                problem = files_problem(payload)
                if problem is not None:
                    raise refusal(_label(component, where), problem)
        for component, payload in zip(block_fn.inputs, inputs, strict=True):
            if component.stateful:  # the server's own value is used, whatever a client sends
                continue
            shown = state[component._id] if state is not None and component._id in state else component
            problem = payload_problem(shown, payload, empty=getattr(component, "value", None) is None)
            if problem is not None:
                raise refusal(_label(shown, where), problem + allowed_range(shown))
        try:
            values = await super().preprocess_data(block_fn, inputs, state, explicit_call)
        except Exception as error:  # a file reference outside this server's uploads, or none at all
            files = [c for c in block_fn.inputs if isinstance(c, gr.File)]
            problem = "only files uploaded to this page are taken" if files else "these values cannot be read"
            raise refusal(_label(files[0], where) if files else where, f"{problem} ({type(error).__name__})") from None
        for component, value in zip(block_fn.inputs, values, strict=True):
            if isinstance(component, gr.File):
                for path in value if isinstance(value, list) else [value] if value else []:
                    if not Path(path).is_file():
                        raise refusal(_label(component, where), f"{brief(Path(path).name)} is not an uploaded file")
        return values


def refusal(where: str, problem: str) -> gr.Error:
    """One line in the log and one message to the client, no stack trace."""
    log.warning("refused input to %s: %s", where, problem)
    return gr.Error(f"{where}: {problem}", print_exception=False)


def files_problem(payload: object) -> str | None:
    """What is wrong with the number or total size of the files a call references: at most MAX_REQUEST_FILES,
    together at most MAX_REQUEST_FILES x MAX_UPLOAD_BYTES (each upload is bounded by Gradio already; a call that
    names one upload many times is not)."""
    listed = payload if isinstance(payload, list) else [payload] if payload else []
    if len(listed) > MAX_REQUEST_FILES:
        return f"{len(listed):,} files; a call takes {MAX_REQUEST_FILES} at most (a trace and its AR run)"
    paths = [item.get("path") for item in listed if isinstance(item, dict)]
    if len({path for path in paths if isinstance(path, str)}) < len(paths):
        return "the same file is named twice"
    total = 0
    for path in paths:
        with contextlib.suppress(OSError, TypeError, ValueError):
            total += os.stat(path).st_size if isinstance(path, str) and os.path.isfile(path) else 0
    if total > MAX_REQUEST_FILES * MAX_UPLOAD_BYTES:
        return f"{total:,} bytes of files; a call takes {MAX_REQUEST_FILES * MAX_UPLOAD_BYTES:,} at most"
    return None


CHOICES = (gr.Dropdown, gr.Radio, gr.CheckboxGroup)
LISTED_CHOICES = 8  # a refusal lists the choices up to this many, else counts them


def payload_problem(component: gr.components.Component, payload: object, empty: bool = False) -> str | None:
    """What is wrong with a client's value for `component`, in words that quote it briefly; None where
    Gradio's processing and the handler can take it. `empty`: the page may send no choice (the component
    was built without one)."""
    if isinstance(component, gr.Number | gr.Slider):
        problem = _number_problem(component, payload)
    elif isinstance(component, gr.Checkbox):
        problem = None if isinstance(payload, bool) else f"true or false is needed, got {brief(payload)}"
    elif isinstance(component, gr.Textbox | gr.Markdown):
        problem = _text_problem(component, payload)
    elif isinstance(component, CHOICES):
        return _choice_problem(component, payload, empty)
    elif isinstance(component, gr.Dataset):
        problem = None if type(payload) is int else f"an example's number is needed, got {brief(payload)}"
    else:
        return None  # a file: Gradio takes only references to its own uploads (checked after it, above)
    if problem is not None:
        return problem
    try:
        component.preprocess(payload)  # Gradio's own checks: a number's range, an example's index
    except Exception:
        return f"{brief(payload)} is out of range" if isinstance(component, gr.Number | gr.Slider) else "no such value"
    return None


def _number_problem(component: gr.Number | gr.Slider, payload: object) -> str | None:
    if payload is None:
        return None if isinstance(component, gr.Number) else "a number is needed"  # an emptied box: the handler says
    if isinstance(payload, bool) or not isinstance(payload, int | float):
        return f"a number is needed, got {brief(payload)}"
    if isinstance(payload, float) and not math.isfinite(payload):
        return f"{payload} is not a finite number"
    if getattr(component, "precision", None) == 0 and isinstance(payload, float) and not payload.is_integer():
        return f"{payload:g} is not a whole number"  # Gradio would round it silently
    return None


def _text_problem(component: gr.Textbox | gr.Markdown, payload: object) -> str | None:
    if payload is None:
        return None
    if not isinstance(payload, str):
        return f"text is needed, got {brief(payload)}"
    limit = getattr(component, "max_length", None)
    if limit is not None and len(payload) > limit:
        return f"{len(payload):,} characters; the limit is {limit:,}"
    return None


def _choice_problem(component: gr.Dropdown | gr.Radio | gr.CheckboxGroup, payload: object, empty: bool) -> str | None:
    choices = [value for _, value in component.choices]
    several = isinstance(component, gr.CheckboxGroup) or bool(getattr(component, "multiselect", False))
    listed = ", ".join(map(str, choices)) if len(choices) <= LISTED_CHOICES else f"its {len(choices):,} choices"
    if payload is None:
        return None if empty and not several else f"a choice is needed: {listed}"
    if several != isinstance(payload, list):
        return f"{'a list of' if several else 'one of'} its choices is needed, got {brief(payload)}"
    wrong = [value for value in (payload if several else [payload]) if value not in choices]
    if wrong:
        return f"{brief(wrong[0])} is not one of {listed}"
    if several and len(payload) > len(choices):  # a choice named more than once: Compare would run it again
        return f"{len(payload):,} choices; it has {len(choices):,}"
    return None


def allowed_range(component: gr.components.Component) -> str:
    """A number's allowed range as a refusal states it, from the component as the session shows it."""
    low, high = getattr(component, "minimum", None), getattr(component, "maximum", None)
    if low is not None and high is not None:
        return f" (allowed: {low:g} to {high:g})"
    if low is not None:
        return f" (allowed: {low:g} or more)"
    return ""


def _label(component: gr.components.Component, fallback: str) -> str:
    return getattr(component, "label", None) or fallback


def _is_generator(fn: Callable) -> bool:
    return inspect.isgeneratorfunction(fn)


def show(image: Image.Image | None) -> Image.Image | None:
    if image is None:
        return None
    return image.resize((DISPLAY_SIZE, DISPLAY_SIZE * image.height // image.width), Image.NEAREST)


def picture(model: ImageModel, tokens: list, description: str, order: Sequence[int] | None = None) -> Image.Image:
    """The displayed image of a possibly partial token sequence, decoded on the compute thread.

    The description goes into the PNG's text chunk. Gradio caches an output image under the hash of
    its bytes and rewrites that file each time it is sent, so an identical image sent again can be
    truncated under a browser still reading it; distinct descriptions keep distinct files.
    """
    image = show(on_compute_thread(decode_in_order, model, tokens, order))
    image.info["Description"] = description
    return image


def decoder_for(trace: Trace) -> ImageModel | None:
    """The model that can turn this trace's tokens into pixels here: offered, loadable, and with the
    trace's own grid, vocabulary, layout and kind of order (a trace is checked against the model, not
    trusted: a raster model's trace that claims a generation order is not decoded, unless its method
    decides positions in its own order, and then in exactly that order)."""
    entry = MODELS.get(trace.model)
    if entry is None or trace.model not in offered_models() or entry.offline() is not None:
        return None
    method = METHODS.get(trace.method)
    reorders = method is not None and method.reorder is not None and not entry.random_order
    if (trace.geometry.order is not None) != (entry.random_order or reorders):
        return None
    try:
        model = get_model(trace.model)
    except ModelUnavailable:
        return None
    m = model.geometry
    if reorders:
        m = method.reorder(m, method.resolve(trace.params))
    g = trace.geometry
    same = (g.rows, g.cols, g.vocab_size, tuple(g.layout)) == (m.rows, m.cols, m.vocab_size, m.layout)
    return model if same and (not reorders or tuple(g.order) == m.order) else None


def export_folder() -> Path:
    """A new folder for one export; folders older than an hour are removed first, so a long-running
    server does not fill its disk."""
    EXPORT_ROOT.mkdir(exist_ok=True)
    cutoff = time.time() - EXPORT_MAX_AGE_SECONDS
    for old in EXPORT_ROOT.iterdir():
        if old.is_dir() and old.stat().st_mtime < cutoff:
            shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix="export-", dir=EXPORT_ROOT))


def server_address(environ: dict[str, str]) -> tuple[str, int]:
    """Host and port to serve on: Gradio's own GRADIO_SERVER_NAME / GRADIO_SERVER_PORT when set; else
    every interface on a Hugging Face Space (SPACE_ID) or SPECVIZ_HOST or 127.0.0.1, and the PORT that
    Spaces-like hosts set, or 7860."""
    host = environ.get("GRADIO_SERVER_NAME") or (
        "0.0.0.0" if environ.get("SPACE_ID") else environ.get("SPECVIZ_HOST", "127.0.0.1")
    )
    variable = "GRADIO_SERVER_PORT" if environ.get("GRADIO_SERVER_PORT") else "PORT"
    value = environ.get(variable) or "7860"
    if not (value.isascii() and value.isdigit()) or not 0 < int(value) < 65536:  # isdigit takes "²" and "٣"
        raise InputError(f"{variable} must be a port number from 1 to 65535, got {brief(value)}")
    return host, int(value)


def opened_at(trace: Trace, on: str | None = None) -> dict:
    """The iteration slider for a new run: its range, at the iteration Inspect opens on
    (`metrics.opening_iteration`; `on`: a preset's focus)."""
    return gr.update(maximum=max(1, len(trace.iterations) - 1), value=metrics.opening_iteration(trace, on))
