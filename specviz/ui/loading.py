"""The models this app runs: which are offered, each loaded once per process (at start-up where an owner
named them), where each runs (SPECVIZ_DEVICE, the GPU, ZeroGPU), which one decodes a trace here, and GPU
work entered only where a request's model sits on a GPU (ZeroGPU)."""

from __future__ import annotations

import functools
import inspect
import logging
import math
import os
from collections.abc import Callable

import torch

from specviz.core.errors import ModelUnavailable, UnknownModel
from specviz.core.inputs import InputError, brief
from specviz.decoding.registry import METHODS
from specviz.models.protocol import ImageModel
from specviz.models.registry import MODELS, get_entry, load_model
from specviz.trace import Trace
from specviz.ui.compute import on_compute_thread

log = logging.getLogger("specviz.ui")

MODELS_ENV_VAR = "SPECVIZ_MODELS"
# the models that ship in assets/: small, offline, safe for anonymous visitors; offered on a Space by default.
# On ZeroGPU they run on the CPU: a GPU slot would cost each visitor's daily quota. Elsewhere they run on the
# GPU where there is one (on the fast path where they have it: at batch 1 a plain GPU pass of a model this
# small is bound by kernel launches), so that a race on a GPU machine tells the GPU's latency story.
EMBEDDED_MODELS = ("tiny", "tiny-uncertain", "tiny-continuous")
DEVICE_ENV_VAR = "SPECVIZ_DEVICE"  # auto (the policy of `device_for`), cpu or cuda: every model there
DEVICE_CHOICES = ("auto", "cpu", "cuda")
ZERO_GPU_ENV_VAR = "SPACES_ZERO_GPU"  # set to true by Hugging Face on a ZeroGPU Space (read as `spaces` reads it)
GPU_PASS_SECONDS = 0.1  # a generous bound on one pass of the largest registered models (8B, bf16, guidance)
GPU_START_SECONDS = 10  # a GPU call's own overhead: prefill, pictures, handing results back

try:  # ZeroGPU (Hugging Face Spaces): a GPU exists only inside functions decorated with spaces.GPU
    import spaces

    # and only GPU work may enter one: Gradio would otherwise wrap every handler in it on a Space that asks
    # for automatic wrapping (SPACES_GRADIO_AUTO_WRAP), a GPU slot for each click
    spaces.disable_gradio_auto_wrap()
except ImportError:
    spaces = None


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
    is said in one line of the log, and refused with that reason when a visitor chooses it. A wrong
    SPECVIZ_DEVICE raises InputError first: the owner's mistake, said at start, not on a visitor's first run."""
    device_setting()
    for name in startup_models():
        try:
            get_model(name)
        except ModelUnavailable as error:
            log.warning("not loaded at start-up: %s", error)


def on_zero_gpu() -> bool:
    """Whether this app runs on a ZeroGPU Space, where a GPU exists only inside `spaces.GPU` calls and each
    one costs the visitor's quota (torch.cuda.is_available() says True there, so it cannot tell)."""
    return os.environ.get(ZERO_GPU_ENV_VAR, "").strip().lower() in ("1", "t", "true")


def device_setting() -> str:
    """SPECVIZ_DEVICE, checked: auto (the default), cpu or cuda. cuda where torch sees no GPU is refused
    here, in one line, rather than as a traceback from the first model load."""
    named = os.environ.get(DEVICE_ENV_VAR)
    if named is None:
        return "auto"
    value = named.strip().lower()
    if value not in DEVICE_CHOICES:
        raise InputError(f"{DEVICE_ENV_VAR} must be one of {', '.join(DEVICE_CHOICES)}, got {brief(named)}")
    if value == "cuda" and not torch.cuda.is_available():
        raise InputError(
            f"{DEVICE_ENV_VAR}=cuda but torch sees no CUDA device here (torch {torch.__version__}); "
            "set it to auto or cpu, or install a CUDA build of torch"
        )
    return value


def device_for(name: str) -> str:
    """Where a model runs: SPECVIZ_DEVICE's choice for every model when it names one; else (auto) on CUDA
    where there is one, except the embedded models on ZeroGPU, which stay on the CPU so that a visitor's run
    on them takes no GPU slot."""
    setting = device_setting()
    if setting != "auto":
        return setting
    if not torch.cuda.is_available() or (name in EMBEDDED_MODELS and on_zero_gpu()):
        return "cpu"
    return "cuda"


def fast_path_for(name: str, device: str) -> bool:
    """Whether a model loads on its fast path (static cache, CUDA graphs), as `--fast-path` loads it on the
    command line: an embedded model on CUDA, though not on ZeroGPU, whose GPU work runs in a forked worker
    per call that would capture the graphs again each time. A released model's fast path is the command
    line's choice: its static caches take gigabytes a session (Lumina-mGPT 7B's about 9, and a race holds two)."""
    return device == "cuda" and name in EMBEDDED_MODELS and get_entry(name).fast_path and not on_zero_gpu()


def get_model(name: str) -> ImageModel:
    """Load an offered model once per process; every session shares it (read-only)."""
    if name not in offered_models():
        raise UnknownModel(f"model {brief(name)} is not offered here; choose one of {', '.join(offered_models())}")
    return _load_once(name)


def loaded_model(name: str) -> ImageModel | None:
    """The model where this process has loaded it, without loading it: a press answers at once, where a first load
    (a released model's weights: minutes) would hold its answer until the load ended."""
    return _loaded.get(name)


_loaded: dict[str, ImageModel] = {}


@functools.cache
def _load_once(name: str) -> ImageModel:
    device = device_for(name)
    load = functools.partial(load_model, name, device=device, fast_path=fast_path_for(name, device))
    _loaded[name] = model = on_compute_thread(load)
    return model


def decoder_for(trace: Trace) -> ImageModel | None:
    """The model that can turn this trace's tokens into pixels here: offered, loadable, and with the
    trace's own grid, vocabulary, layout and kind of order (a trace is checked against the model, not
    trusted: a raster model's trace that claims a generation order is not decoded, unless its method
    decides positions in its own order, and then in exactly that order)."""
    entry = MODELS.get(trace.model)
    if entry is None or trace.model not in offered_models() or entry.offline() is not None:
        return None
    method = METHODS.get(trace.method)
    reorders = method is not None and method.out_of_raster and not entry.random_order
    if (trace.geometry.order is not None) != (entry.random_order or reorders):
        return None
    try:
        model = get_model(trace.model)
    except ModelUnavailable:
        return None
    g = trace.geometry
    m = model.geometry
    if reorders:
        m = method.decided_geometry(m, method.resolve(trace.params), g.order)
    same = (g.rows, g.cols, g.vocab_size, tuple(g.layout)) == (m.rows, m.cols, m.vocab_size, m.layout)
    return model if same and (not reorders or tuple(g.order) == m.order) else None


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

        if inspect.isgeneratorfunction(work):

            @functools.wraps(work)
            def stream(*args):
                yield from chosen(*args)(*args)

            return stream

        @functools.wraps(work)
        def call(*args):
            return chosen(*args)(*args)

        return call

    return decorate
