"""What every tab of the app shares on the server side: one compute thread for all model work, the
models loaded once per process, user errors as messages without stack traces, decoded pictures,
export folders, and where to serve."""

from __future__ import annotations

import functools
import inspect
import logging
import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gradio as gr
import torch
from PIL import Image

from specviz.decoding import UnknownMethod
from specviz.inputs import InputError
from specviz.models.errors import ModelUnavailable, UnknownModel
from specviz.models.protocol import ImageModel, UnsupportedMethod, decode_in_order
from specviz.models.registry import MODELS, load_model
from specviz.models.settings import SettingsError
from specviz.trace import MAX_TRACE_BYTES, Trace, TraceError
from specviz.viz.frames import ExportError

log = logging.getLogger("specviz.ui")

DISPLAY_SIZE = 384  # pixels of the displayed images; token cells stay crisp (nearest neighbour)
MAX_UPLOAD_BYTES = MAX_TRACE_BYTES  # launch(max_file_size=...): a trace is the only upload
EXPORT_ROOT = Path(tempfile.gettempdir()) / "specviz-exports"
EXPORT_MAX_AGE_SECONDS = 3600
MODELS_ENV_VAR = "SPECVIZ_MODELS"
USER_ERRORS = (
    InputError,
    ExportError,
    SettingsError,
    UnknownMethod,
    UnknownModel,
    UnsupportedMethod,
    ModelUnavailable,
    TraceError,
)

try:  # on a ZeroGPU Space, GPU work must run inside spaces.GPU; elsewhere this is a no-op
    import spaces

    gpu = spaces.GPU
except ImportError:

    def gpu(fn: Callable) -> Callable:
        return fn


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


def offered_models() -> list[str]:
    """The models this app lets its visitors run: SPECVIZ_MODELS (comma-separated), else on a Hugging Face
    Space only the embedded model (an anonymous visitor must not make the server download and hold
    gigabytes of weights), else every registered model."""
    named = os.environ.get(MODELS_ENV_VAR)
    if named is not None:
        names = [name.strip() for name in named.split(",") if name.strip()]
        unknown = [name for name in names if name not in MODELS]
        if unknown or not names:
            raise UnknownModel(f"{MODELS_ENV_VAR} names unknown models {unknown}; registered: {', '.join(MODELS)}")
        return names
    if os.environ.get("SPACE_ID"):
        return ["tiny"]
    return list(MODELS)


def get_model(name: str) -> ImageModel:
    """Load an offered model once per process; every session shares it (read-only)."""
    if name not in offered_models():
        raise UnknownModel(f"model {name!r} is not offered here; choose one of {', '.join(offered_models())}")
    return _load_once(name)


@functools.cache
def _load_once(name: str) -> ImageModel:
    device = "cuda" if torch.cuda.is_available() and name != "tiny" else "cpu"
    return on_compute_thread(functools.partial(load_model, name, device=device))


def user_errors(fn: Callable) -> Callable:
    """Show known problems as a message in the UI, and unknown ones without a stack trace."""

    def report(error: Exception) -> gr.Error:
        if isinstance(error, torch.OutOfMemoryError):
            log.warning("out of memory in %s", fn.__name__)
            return gr.Error("Out of memory: try a smaller window, a smaller model, or the CPU.", print_exception=False)
        if isinstance(error, USER_ERRORS):
            log.warning("refused in %s: %s", fn.__name__, error)  # one line; the user sees the message
            return gr.Error(str(error), print_exception=False)
        log.exception("unexpected error")
        return gr.Error(f"Something went wrong ({type(error).__name__}); the details are in the server log.")

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


def quiet_checks(component: gr.components.Component) -> gr.components.Component:
    """Make a component's own input checks (a value out of the slider's range, a string for a number)
    reach the user as a message, with the allowed range where it has one, and the server log as one
    line instead of Gradio's stack trace."""
    check = component.preprocess
    low, high = getattr(component, "minimum", None), getattr(component, "maximum", None)
    if low is not None and high is not None:
        allowed = f" (allowed: {low:g} to {high:g})"
    elif low is not None:
        allowed = f" (allowed: {low:g} or more)"
    else:
        allowed = ""

    def preprocess(payload):
        try:
            whole = getattr(component, "precision", None) == 0
            if whole and isinstance(payload, float) and math.isfinite(payload) and not payload.is_integer():
                raise ValueError(f"{payload} is not a whole number")  # Gradio would round it silently
            return check(payload)
        except Exception as error:
            message = (getattr(error, "message", None) or str(error)).rstrip(".")
            log.warning("refused input to %s: %s%s", component.label, message, allowed)
            raise gr.Error(f"{component.label}: {message}{allowed}", print_exception=False) from None

    component.preprocess = preprocess
    return component


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


def decodable(trace: Trace) -> list:
    """What the trace's model decodes into its image: the tokens, or a continuous run's vectors."""
    return trace.vectors if trace.continuous else trace.tokens


def decoder_for(trace: Trace) -> ImageModel | None:
    """The model that can turn this trace's tokens into pixels here: offered, loadable, and with the
    trace's own grid, vocabulary and layout (a trace is checked against the model, not trusted)."""
    entry = MODELS.get(trace.model)
    if entry is None or trace.model not in offered_models() or entry.offline() is not None:
        return None
    try:
        model = get_model(trace.model)
    except ModelUnavailable:
        return None
    g, m = trace.geometry, model.geometry
    same = (g.rows, g.cols, g.vocab_size, tuple(g.layout)) == (m.rows, m.cols, m.vocab_size, m.layout)
    return model if same else None


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
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise InputError(f"{variable} must be a port number from 1 to 65535, got {value!r}")
    return host, int(value)
