"""The Gradio app: race a method against AR, inspect every iteration, compare, replay and export.

Only calls down: models and decoding to run, specviz.viz to draw. Each browser session keeps its
own runs in `gr.State`, so concurrent users never see each other's traces.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
import shutil
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gradio as gr
import plotly.graph_objects as go
import torch
from PIL import Image

from specviz import viz
from specviz.decoding import METHODS, RunStream, UnknownMethod, run
from specviz.decoding.cost import cost_sentence, pass_costs
from specviz.decoding.params import all_fields
from specviz.inputs import InputError, check_prompt, check_seed
from specviz.models.errors import ModelUnavailable, UnknownModel
from specviz.models.protocol import ImageModel, UnsupportedMethod, decode_in_order
from specviz.models.registry import MODELS, get_entry, load_model
from specviz.models.settings import SamplingSettings, SettingsError
from specviz.presets import PRESET_BY_KEY, PRESETS
from specviz.trace import MAX_TRACE_BYTES, Trace, TraceError
from specviz.viz.frames import ExportError
from specviz.viz.publication import FORMATS, write_figures

log = logging.getLogger("specviz.ui")

DISPLAY_SIZE = 384  # pixels of the displayed images; token cells stay crisp (nearest neighbour)
FRAME_INTERVAL = 0.1  # seconds between streamed UI updates during a race
PLAY_INTERVAL = 0.4  # seconds per iteration when playing back
DEFAULT_METHOD = "sjd"  # what Run races first on a discrete model
COMPARED = ("sjd", "scd-mc", "scd-gs")  # Compare's first selection on a discrete model
EXAMPLES = ["red apple", "grinning face", "cat face", "rocket", "four leaf clover", "a smiling sun", "blue car"]
# left and right arrows step the Inspect slider (not while typing in a field)
ARROW_KEYS = """() => {
    document.addEventListener("keydown", (event) => {
        const typing = ["INPUT", "TEXTAREA", "SELECT"].includes(document.activeElement?.tagName);
        if (typing || (event.key !== "ArrowLeft" && event.key !== "ArrowRight")) return;
        const button = document.getElementById(event.key === "ArrowLeft" ? "step-back" : "step-on");
        if (button && button.offsetParent !== null) { button.click(); event.preventDefault(); }
    });
}"""
READING_GUIDE = """
- **Window (Jacobi methods)**: the grid shows the image's token cells after this pass: grey were
  committed earlier, the window's drafts are coloured by their fate. Each draft was compared with
  the model's new distribution at its cell; the accepted run (green) is committed at once, the first
  rejected draft (vermillion) is resampled from the residual, and the drafts after it stay in the
  window for the next pass: kept (blue) if their token is unchanged, redrawn (reddish purple) if it
  changed; drafts entering the window for the first time are new (sky blue). The bars under the grid
  give each draft's acceptance ratio, left to right in the window.
  SCD's point is that fewer drafts are redrawn from one pass to the next.
- **Draft tree (eagle2, peanut)**: one pass verifies a whole tree of guesses below the decided head
  token; the path of accepted nodes is committed, then one more token is drawn from what the model
  left after the refused siblings. Any drafter's guesses give exact samples; a better drafter only
  makes the accepted path longer.
- **Continuous tokens (tiny-continuous: cspd, cspd-exact)**: a token is 12 numbers, drawn by a small
  diffusion head in 25 denoising steps; a draft model proposes gamma tokens, the target checks them in
  one pass. The bars give each draft's acceptance probability min(1, r) and the tick the uniform that
  decided it. cspd (the paper) denoises both models from the same noise and compares the last step's
  densities times Sigma, the ratio of the earlier steps' variances: close to the target's
  distribution, not exact. cspd-exact compares the densities of the draft's whole denoising path
  under both models: exact, with acceptance measured rather than promised. The trajectory view draws
  one draft's path (and for cspd the target's path from the same noise) in the token's first two
  coordinates; the map shows which tokens were accepted drafts and which were resampled.
- **Acceptance map**: per cell, how many tokens were committed together with it (long runs: the
  easy, flat regions), the iteration that committed it, or how often it was drafted before it was
  fixed.
- **Depth map** (trees): the depth in its tree at which each token was accepted; grey cells were
  drawn by the model after a refusal (depth 0), like an AR step. PEANUT adapts each tree's depth and
  top-k to how far the tree to its left was accepted (the map beside it).
- **NFE and latency**: model passes (NFE) and seconds against AR on the same prompt, seed and
  sampling. Fewer passes pay only where a pass over many tokens costs little more than over one
  (a GPU); on a CPU a long pass costs several short ones.
"""
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


CSS = """
:root body.specviz-large {
  --text-xxs: 14px; --text-xs: 16px; --text-sm: 18px; --text-md: 20px; --text-lg: 24px; --text-xl: 30px;
  --text-xxl: 36px; --body-text-size: 20px; --prose-text-size: 20px; --prose-header-text-weight: 700;
  --block-title-text-size: 20px; --block-label-text-size: 18px; --block-info-text-size: 18px;
  --input-text-size: 20px; --button-large-text-size: 24px; --button-medium-text-size: 20px;
  --button-small-text-size: 18px; --checkbox-label-text-size: 20px; --section-header-text-size: 20px;
}
#specviz-header h1 { margin-bottom: 0; }
.lossy-note, .lossy-note * { color: #D55E00 !important; font-weight: 600; }
"""
TOGGLE_LARGE = "(large) => { document.body.classList.toggle('specviz-large', large); }"
TOGGLE_DARK = "(dark) => { document.body.classList.toggle('dark', dark); }"


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
    import inspect

    return inspect.isgeneratorfunction(fn)


def method_label(name: str) -> str:
    method = METHODS[name]
    if method.lossless:
        return f"{name} (lossless)"
    if method.lossless_when_greedy:
        return f"{name} (lossy unless greedy)"
    return f"{name} (lossy)"


def model_choices() -> list[tuple[str, str]]:
    choices = []
    for entry in (MODELS[name] for name in offered_models()):
        reason = entry.offline()
        choices.append((entry.name if reason is None else f"{entry.name} (weights needed)", entry.name))
    return choices


def sampling_from(temperature: float, top_k: float | None, top_p: float, guidance: float) -> SamplingSettings:
    """UI values to settings; top-k 0 (or empty) in the UI means no top-k. SamplingSettings checks the rest."""
    if top_k in (None, 0):
        top_k = None
    elif isinstance(top_k, float) and top_k.is_integer():
        top_k = int(top_k)
    return SamplingSettings(temperature=temperature, top_k=top_k, top_p=top_p, guidance_scale=guidance)


def seed_from(value: float | None) -> int:
    """The UI's seed: an emptied box means 0; anything else must be an integer from 0 to 2**63 - 1."""
    return check_seed(0 if value is None else value)


METHOD_FIELDS = all_fields([method.parameters for method in METHODS.values()])
PARAMETERS = tuple(METHOD_FIELDS)  # the method controls, in order


def own_parameters(method: str) -> dict:
    """The method's parameter names and defaults."""
    return METHODS[method].parameters().to_dict()


def params_from(method: str, *values) -> dict:
    """The method's own parameters from the values of all method controls (in PARAMETERS order);
    the method's parameter class validates them."""
    given = dict(zip(PARAMETERS, values, strict=True))
    return {name: given[name] for name in own_parameters(method)}


def method_control(name: str, shown_for: str) -> gr.components.Component:
    """The control of one method parameter, built from its declaration."""
    kind, spec = METHOD_FIELDS[name]
    own = own_parameters(shown_for)
    visible, value = name in own, own.get(name, getattr(_first_owner(name).parameters(), name))
    if kind is bool:
        return gr.Checkbox(value, label=spec.label, info=spec.help, visible=visible)
    if spec.choices:
        return gr.Dropdown(list(spec.choices), value=value, label=spec.label, visible=visible)
    if kind is int:  # not a slider: a browser slider clamps a typed 500 to its maximum without a word
        return gr.Number(value, precision=0, minimum=spec.low, maximum=spec.high, label=spec.label, visible=visible)
    return gr.Slider(spec.low, spec.high, value=value, step=0.01, label=spec.label, visible=visible)


def _first_owner(name: str):
    return next(method for method in METHODS.values() if name in method.parameters().to_dict())


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


def counter(method: str, nfe: int, tokens: int, total: int, seconds: float) -> str:
    return f"**{method}** · NFE {nfe} · {tokens}/{total} tokens · {seconds:.2f} s"


def live_counter(stream: RunStream) -> str:
    total = stream.session.geometry.seq_len
    return counter(stream.method, stream.session.nfe, len(stream.tokens), total, stream.elapsed)


def final_counter(trace: Trace) -> str:
    return counter(trace.method, trace.nfe, len(trace.tokens), len(trace.geometry.layout), trace.seconds)


def race_summary(trace: Trace, ar: Trace, retimed: bool) -> str:
    facts = viz.summary(trace, ar)
    lossless = (
        "lossless: it samples exactly AR's distribution, though not the same image, as the two spend their "
        "random numbers differently"
        if trace.lossless
        else "**lossy**: its images follow a distribution that differs from AR's"
    )
    how = (
        "timed again after the race with nothing drawing (same seed, same tokens): on a CPU the live clocks "
        "also pay for drawing the race"
        if retimed
        else "each side's clock counts only its own compute (the two runs are interleaved on one device)"
    )
    tau = f", mean tau {viz.per_tree(trace)['tau'].mean():.2f} per tree" if viz.has_trees(trace) else ""
    if trace.continuous:
        tested = [f for it in trace.iterations for f in it.continuous.fate if f != "discarded"]
        rate = f", {tested.count('accepted') / len(tested):.0%} of drafts accepted" if tested else ""
        tau = f" of the target and {trace.draft_nfe - 1} of the draft{rate}"
    return (
        f"### {trace.method}: {viz.ratio_text(facts['step_compression'])} step compression, "
        f"{viz.latency_text(facts['latency_speedup'])}\n"
        f"{trace.method} ({lossless}): {trace.nfe} passes{tau}, {trace.seconds:.2f} s · "
        f"AR: {ar.nfe} passes, {ar.seconds:.2f} s · same prompt, seed and sampling; {how}."
    )


def run_again(model: ImageModel, trace: Trace) -> Trace:
    """The same run (model, method, prompt, seed, settings) once more, on the compute thread."""
    sampling = SamplingSettings(**trace.sampling.model_dump())
    return on_compute_thread(run, model, trace.method, trace.prompt, trace.seed, sampling, trace.params)


def retimes(model: ImageModel) -> bool:
    """Whether runs on this model's device are timed a second time before their clocks are reported.

    On a CPU the first clocks are not trustworthy: drawing the race competes with the model for cores
    and the GIL (costing AR's many short passes more than a method's few long ones), and when only the
    race was re-timed, Compare's AR came out at about twice the race's. On a GPU the device's clock is
    its own."""
    return model.device.type == "cpu"


def timed_again(model: ImageModel, traces: list[Trace]) -> tuple[list[Trace], bool]:
    """The runs with the clocks of a second, undisturbed run of each, and whether they were re-timed.

    The race and Compare both report these, so their speedups agree. Every run is deterministic (same
    model, method, prompt, seed and settings), so the second run must reproduce its tokens; where one
    does not, or the device needs no re-timing, the first clocks are kept and the caller says so."""
    if not retimes(model):
        return traces, False
    again = [run_again(model, trace) for trace in traces]
    if all(second.tokens == first.tokens for second, first in zip(again, traces, strict=True)):
        return again, True
    return traces, False


RACING = "*Racing "  # how the summary starts while a race runs (Stop reads it)
RETIMING = "*Timing both runs again with nothing drawing...*"
COMPARING = "*Comparing "  # how Compare's note starts while it runs


def racing(method: str) -> str:
    """The summary while a race runs, in place of the previous run's."""
    return f"{RACING}{method} against AR...*"


def stopped(summary: str, method_counter: str, ar_counter: str, compare_note: str) -> tuple:
    """What Stop leaves in the race summary and in Compare's note, where one was running: that it was
    stopped and how far it got (the race's counters as they stood; Compare's rows so far)."""
    race_note = compare_text = gr.update()
    if summary.startswith(RETIMING):
        race_note = (
            f"**Stopped** while timing the runs again: both had finished ({method_counter}; {ar_counter}), "
            "but their speedup was not measured. Inspect still shows the previous run, if any."
        )
    elif summary.startswith(RACING):
        race_note = (
            f"**Stopped** before the end. How far it got: {method_counter or 'nothing yet'}; "
            f"{ar_counter or 'nothing yet'}. Inspect still shows the previous run, if any."
        )
    if compare_note.startswith(COMPARING):
        compare_text = "**Stopped**: the table shows the runs that had finished, with their first, untimed clocks."
    return race_note, compare_text


def sampling_text(sampling: SamplingSettings) -> str:
    """Sampling settings as a table caption states them."""
    top_k = "off" if sampling.top_k is None else sampling.top_k
    return (
        f"temperature {sampling.temperature:g}, top-k {top_k}, top-p {sampling.top_p:g}, "
        f"guidance {sampling.guidance_scale:g}"
    )


def params_text(params: dict | None) -> str:
    """A method's parameters in one cell: 'window 16, init random'; AR has none."""
    return ", ".join(f"{name.replace('_', ' ')} {value}" for name, value in (params or {}).items()) or "none"


def sampling_updates(sampling: SamplingSettings) -> tuple:
    """The sampling controls (temperature, top-k, top-p, guidance) set to these settings; top-k off is 0."""
    return (
        gr.update(value=sampling.temperature),
        gr.update(value=sampling.top_k or 0),
        gr.update(value=sampling.top_p),
        gr.update(value=sampling.guidance_scale),
    )


def known_prompts(name: str) -> tuple[list[str], str | None]:
    """The names the model was trained on, where the project knows them, and a line saying so."""
    if name not in MODELS:
        return [], None
    entry = get_entry(name)
    known = entry.known_prompts()
    if entry.class_conditional:
        return known, f"{name} draws the {len(known):,} ImageNet classes: pick one, or type a name or an index"
    return known, (f"{name} knows {len(known):,} names; free text gives the nearest it learned" if known else None)


def known_prompts_of(name: str) -> dict:
    """The known-names list for the chosen model, hidden where there is none."""
    known, info = known_prompts(name)
    return gr.update(choices=known, value=None, visible=bool(known), info=info)


def methods_for(name: str) -> list[str]:
    """The methods to race against AR on this model: those for its kind of tokens (and that its draft
    model allows: a pair without one races AR alone)."""
    entry = get_entry(name) if name in MODELS else None
    if entry is None or not entry.continuous:
        return [n for n, m in METHODS.items() if n != "ar" and m.iterate]
    names = [n for n, m in METHODS.items() if n != "ar" and m.iterate_continuous]
    return [n for n in names if entry.has_draft or not METHODS[n].needs_draft] or ["ar"]


def methods_of(name: str) -> tuple:
    """The method list, its default and parameters, and the Compare choices for the chosen model."""
    names = methods_for(name)
    default = DEFAULT_METHOD if DEFAULT_METHOD in names else ("cspd" if "cspd" in names else names[0])
    compared = [n for n in COMPARED if n in names] or [n for n in names if METHODS[n].lossless][:2]
    return (
        gr.update(choices=[(method_label(n), n) for n in names], value=default),
        *method_updates(default),
        gr.update(choices=names, value=compared),
    )


def model_defaults(name: str) -> tuple:
    """The sampling controls at the chosen model's own defaults (its release settings), read from the
    registry without loading its weights."""
    return sampling_updates(get_entry(name).sampling())


def method_updates(name: str, values: dict | None = None) -> tuple:
    """The method controls (PARAMETERS order) showing only the method's own parameters, at `values`
    where given, else its defaults; then the lossy note."""
    own = {**own_parameters(name), **(values or {})}
    note = "" if METHODS[name].lossless else f"{method_label(name)}: its output distribution differs from AR."
    hidden = gr.update(visible=False)
    shown = [gr.update(visible=True, value=own[p]) if p in own else hidden for p in PARAMETERS]
    return (*shown, gr.update(value=note, visible=bool(note)))


def preset_controls(key: str) -> tuple:
    """Every control a preset sets (in `preset_outputs` order: model, method, method controls, lossy
    note, prompt, seed, sampling, Compare's selection, the known names, the explanation)."""
    preset = PRESET_BY_KEY[key]
    names = methods_for(preset.model)
    sampling = get_entry(preset.model).sampling()
    if preset.temperature is not None:
        sampling = dataclasses.replace(sampling, temperature=preset.temperature)
    compared = list(preset.compare) or [n for n in COMPARED if n in names] or [preset.method]
    return (
        gr.update(value=preset.model),
        gr.update(choices=[(method_label(n), n) for n in names], value=preset.method),
        *method_updates(preset.method, preset.params),
        gr.update(value=preset.prompt),
        gr.update(value=preset.seed),
        *sampling_updates(sampling),
        gr.update(choices=names, value=compared),
        known_prompts_of(preset.model),
        gr.update(value=preset.explanation),
    )


def opened_at(trace: Trace) -> dict:
    """The iteration slider for a new run: its range, at the iteration Inspect opens on
    (`viz.opening_iteration`)."""
    return gr.update(maximum=max(1, len(trace.iterations) - 1), value=viz.opening_iteration(trace))


def neighbour_instructive(runs: dict, j: float, forward: bool) -> int | dict:
    """The next (or previous) iteration after (before) j that accepted a draft; j itself where none is."""
    if not runs:
        return gr.update()
    found = viz.instructive_iterations(runs["trace"])
    later = [k for k in found if k > j] if forward else [k for k in reversed(found) if k < j]
    return later[0] if later else int(j)


def next_of_kind(kind: str, runs: dict, j: float) -> int | dict:
    """The next iteration after j that shows `kind` (viz.JUMPS); j itself where none does."""
    return viz.jump(runs["trace"], int(j), kind) if runs else gr.update()


def step_by(offset: int, runs: dict, j: float) -> int | dict:
    """One iteration back or on, within the run."""
    if not runs:
        return gr.update()
    return max(0, min(int(j) + offset, len(runs["trace"].iterations) - 1))


def describe_iteration(runs: dict, j: float) -> str:
    """The sentence under the slider: what iteration j did."""
    if not runs:
        return ""
    trace = runs["trace"]
    return viz.iteration_sentence(trace, max(0, min(int(j), len(trace.iterations) - 1)))


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


COMPARE_HEADERS = ["method", "parameters", "lossless", "NFE", "step compression", "seconds", "latency against AR"]


def compare_rows(ar: Trace, traces: list[Trace]) -> tuple[list[list], list[dict]]:
    """Compare's table (AR first) and the rows of its chart; ratios in words, a slowdown as one."""
    same = viz.ratio_text(1.0)
    table = [["ar", params_text(ar.params), "yes", ar.nfe, same, round(ar.seconds, 3), same]]
    rows = []
    for trace in traces:
        facts = viz.summary(trace, ar)
        rows.append({"method": trace.method, "lossless": trace.lossless, **facts})
        table.append(
            [
                trace.method,
                params_text(trace.params),
                "yes" if trace.lossless else "no",
                trace.nfe,
                viz.ratio_text(facts["step_compression"]),
                round(trace.seconds, 3),
                viz.ratio_text(facts["latency_speedup"]),
            ]
        )
    return table, rows


def compare_caption(ar: Trace, retimed: bool) -> str:
    """What every row of Compare's table shares: model, prompt, seed, sampling, and how it was timed."""
    sampling = SamplingSettings(**ar.sampling.model_dump())
    how = (
        "every run timed a second time, one after another, as the race times its two"
        if retimed
        else "clocks of the runs themselves"
    )
    return (
        f"**{ar.model}** · prompt {ar.prompt!r} · seed {ar.seed} · sampling: {sampling_text(sampling)} "
        f"(the same for every row) · {how}."
    )


def restored_controls(trace: Trace) -> tuple[tuple, list[str]]:
    """The controls set to an uploaded trace's settings, so that Run repeats it: model, method, the
    method controls and the lossy note, then sampling; and what could not be set, in words."""
    unchanged: list[str] = []
    if trace.model in offered_models():
        model = gr.update(value=trace.model)
    else:
        model = gr.update()
        unchanged.append(f"model {trace.model} is not offered here")
    if trace.method in METHODS and trace.method != "ar":
        # the method list of the trace's kind of tokens, which the model shown before may not offer
        names = methods_for(trace.model) if trace.method in methods_for(trace.model) else list(METHODS)[1:]
        choices = [(method_label(n), n) for n in names]
        method = (gr.update(value=trace.method, choices=choices), *method_updates(trace.method, trace.params))
    else:
        method = (gr.update(),) * (len(PARAMETERS) + 2)
        unchanged.append(f"{trace.method} is not a method to race against AR")
    return (model, *method, *sampling_updates(SamplingSettings(**trace.sampling.model_dump()))), unchanged


ITERATION_LABELS = {False: "Jacobi window", True: "Draft tree of this iteration"}
CONTINUOUS_LABELS = {
    "iteration": "Drafts of this pass and their acceptance ratios",
    "paths": "Denoising trajectories of one draft (draft and target, same noise)",
    "by_step": "Acceptance by generation step",
}


def iteration_views(runs: dict, j: int, large: bool, dark: bool) -> tuple:
    """The views that follow the iteration slider: the window (a tree run: the tree) of iteration j, the
    image after it, and (tree runs only) the depth map with iteration j's cells outlined."""
    trace: Trace = runs["trace"]
    j = max(0, min(int(j), len(trace.iterations) - 1))
    decoder = decoder_for(trace)
    tokens = viz.tokens_through(trace, j)
    caption = f"{trace.method}: {len(tokens)} tokens after iteration {j}"
    image = picture(decoder, tokens, caption, trace.geometry.order) if decoder else None
    trees = viz.has_trees(trace)
    if trace.continuous:
        view = viz.ratio_bars_figure(trace, j, dark=dark, large=large)
        paths = gr.update(
            value=viz.trajectory_figure(trace, j, dark=dark, large=large),
            visible=True,
            label=CONTINUOUS_LABELS["paths"],
        )
        return gr.update(value=view, label=CONTINUOUS_LABELS["iteration"]), image, paths
    if trees:
        view = viz.tree_figure(trace, j, dark=dark, large=large)
        depths = gr.update(
            value=viz.depth_map_figure(trace, j, dark=dark, large=large), visible=True, label="Draft-tree depth map"
        )
    else:
        view = viz.window_figure(trace, j, dark=dark, large=large)
        depths = gr.update(value=None, visible=False)
    return gr.update(value=view, label=ITERATION_LABELS[trees]), image, depths


def overview_figures(runs: dict, kind: str, large: bool, dark: bool) -> tuple:
    """The views of the whole run: acceptance map, accepted length (tree runs: tau), drafts changed
    (window runs only) or the tree shapes (tree runs only), and the race against AR."""
    trace, ar = runs["trace"], runs.get("ar")
    versus = viz.race_figure(trace, ar, dark=dark, large=large) if ar is not None else no_ar_figure(trace, dark, large)
    if trace.continuous:
        return (
            viz.token_source_figure(trace, dark=dark, large=large),
            gr.update(value=viz.accepted_length_figure(trace, dark=dark, large=large), label="Accepted per pass"),
            gr.update(
                value=viz.acceptance_by_step_figure([trace], dark=dark, large=large),
                visible=True,
                label=CONTINUOUS_LABELS["by_step"],
            ),
            versus,
            gr.update(value=None, visible=False),
        )
    trees = viz.has_trees(trace)
    length = (viz.tau_figure if trees else viz.accepted_length_figure)(trace, dark=dark, large=large)
    changed = None if trees else viz.changed_figure(trace, dark=dark, large=large)
    shapes = viz.tree_shape_figure(trace, dark=dark, large=large) if trees else None
    return (
        viz.acceptance_map_figure(trace, kind, dark=dark, large=large),
        gr.update(value=length, label="Tau per tree pass" if trees else "Accepted length per iteration"),
        gr.update(value=changed, visible=not trees, label="Drafts changed per iteration"),
        versus,
        gr.update(value=shapes, visible=trees),
    )


def no_ar_figure(trace: Trace, dark: bool, large: bool) -> go.Figure:
    """In place of the race against AR for a run that came without one (an uploaded trace): why it is empty."""
    return viz.message_figure(
        "NFE and latency against AR",
        f"This {trace.method} trace came without an AR run of the same prompt and seed, so there is nothing "
        "to compare its passes and seconds with. Press Run with these settings to race it against AR here.",
        dark=dark,
        large=large,
    )


def figure_archive(runs: dict, j: int, folder: Path, decoder: ImageModel | None, dark: bool) -> Path:
    """figures.zip: the publication figures of the run on screen and its AR baseline at iteration j,
    every format, as `python -m specviz figures` writes them (AR has an iteration for every token, so j
    fits it too)."""
    shown = [("the run on screen", runs["trace"])] + ([("its AR baseline", runs["ar"])] if runs.get("ar") else [])
    decode = (
        (lambda trace, tokens: on_compute_thread(decode_in_order, decoder, tokens, trace.geometry.order))
        if decoder
        else None
    )
    figures = folder / "figures"
    figures.mkdir()
    made = write_figures(shown, figures, FORMATS, "dark" if dark else "paper", iteration=j, decode=decode)
    for note in made.notes:
        log.info("figures: %s", note)
    archive = folder / "figures.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as bundle:
        for path in made.files:
            bundle.write(path, path.name)
    return archive


def build() -> gr.Blocks:
    """The whole app; `app.py` launches it."""
    get_model("tiny")  # load the embedded model and prompt encoder now, so the first Run starts at once
    from specviz.models.tiny.text import shared_text_encoder

    on_compute_thread(shared_text_encoder)
    method_names = methods_for("tiny")
    defaults = get_entry("tiny").sampling()  # the sampling controls open at the default model's own

    # Gradio removes the files it cached for the browser (images, uploads) after an hour
    with gr.Blocks(title="specviz: speculative and Jacobi decoding, visible", delete_cache=(3600, 3600)) as demo:
        runs = gr.State({})
        gr.Markdown(
            "# specviz\nSpeculative and Jacobi decoding for autoregressive image generation, made visible. "
            "Pick a method: it runs next to vanilla AR on the same prompt and seed, and every iteration is "
            f"recorded. Colours (colour-blind safe): {viz.swatches()}.",
            elem_id="specviz-header",
        )
        with gr.Row(elem_id="presets", equal_height=True):  # one press sets everything and races
            gr.Markdown("**Presets**: the papers' findings, live", elem_id="presets-title")
            preset_buttons = {
                p.key: gr.Button(p.label, size="sm", min_width=100, elem_id=f"preset-{p.key}") for p in PRESETS
            }
        with gr.Row():
            with gr.Column(scale=1, min_width=300):
                model = gr.Dropdown(model_choices(), value="tiny", label="Model")
                method = gr.Dropdown([(method_label(n), n) for n in method_names], value=DEFAULT_METHOD, label="Method")
                lossy_note = gr.Markdown(visible=False, elem_classes="lossy-note")
                prompt = gr.Textbox(value="red apple", label="Prompt", max_lines=2)
                # Run right under the prompt: on a 1280 x 720 projector it stays on the first screen
                with gr.Row():
                    run_button = gr.Button("Run", variant="primary", elem_id="run-button")
                    stop_button = gr.Button("Stop")
                gr.Examples(EXAMPLES, inputs=prompt, label="Examples")
                known, known_info = known_prompts("tiny")
                known_names = gr.Dropdown(
                    known,
                    value=None,
                    filterable=True,
                    label="Names it was trained on (type to search)",
                    info=known_info,
                    visible=bool(known),
                )
                seed = gr.Number(value=0, precision=0, label="Seed", minimum=0)
                method_controls = [method_control(name, "sjd") for name in PARAMETERS]
                with gr.Accordion("Sampling", open=False):
                    temperature = gr.Slider(
                        0.0, 2.0, value=defaults.temperature, step=0.05, label="Temperature (0 = greedy)"
                    )
                    top_k = gr.Number(value=defaults.top_k or 0, precision=0, minimum=0, label="Top-k (0 = off)")
                    top_p = gr.Slider(0.01, 1.0, value=defaults.top_p, step=0.01, label="Top-p")
                    guidance = gr.Slider(
                        0.0, 10.0, value=defaults.guidance_scale, step=0.5, label="Guidance scale (1 = off)"
                    )
                with gr.Row():
                    large = gr.Checkbox(False, label="Large type")
                    dark = gr.Checkbox(False, label="Dark")

            with gr.Column(scale=3):
                with gr.Tab("Race"):
                    with gr.Row():
                        with gr.Column():
                            method_image = gr.Image(label="Method", height=DISPLAY_SIZE, format="png")
                            method_counter = gr.Markdown(elem_id="method-counter")
                        with gr.Column():
                            ar_image = gr.Image(label="Vanilla AR", height=DISPLAY_SIZE, format="png")
                            ar_counter = gr.Markdown(elem_id="ar-counter")
                    summary = gr.Markdown(elem_id="race-summary")
                    preset_note = gr.Markdown(elem_id="preset-note")  # what the pressed preset shows
                with gr.Tab("Inspect"):
                    with gr.Row():
                        iteration = gr.Slider(0, 1, value=0, step=1, label="Iteration (arrow keys step)")
                        play = gr.Button("Play", scale=0, size="sm", min_width=60)
                        pause = gr.Button("Pause", scale=0, size="sm", min_width=60)
                        speed = gr.Radio(
                            [("slow", 1.5), ("normal", PLAY_INTERVAL), ("fast", 0.1)],
                            value=PLAY_INTERVAL,
                            label="Playback",
                            scale=0,
                            min_width=220,
                        )
                    with gr.Row():
                        step_back = gr.Button("◀", scale=0, size="sm", min_width=40, elem_id="step-back")
                        step_on = gr.Button("▶", scale=0, size="sm", min_width=40, elem_id="step-on")
                        previous_button = gr.Button("◀ Previous acceptance", scale=0, size="sm", min_width=140)
                        next_button = gr.Button("Next acceptance ▶", scale=0, size="sm", min_width=140)
                        jump_buttons = {
                            kind: gr.Button(label, scale=0, size="sm", min_width=140)
                            for kind, label in (
                                ("rejection", "Next rejection ▶"),
                                ("long", "Next long run ▶"),
                                ("stall", "Next stall ▶"),
                            )
                        }
                    iteration_note = gr.Markdown(elem_id="iteration-note")  # one sentence: what this pass did
                    with gr.Row():
                        window_plot = gr.Plot(label=ITERATION_LABELS[False])
                        iteration_image = gr.Image(label="Image at this iteration", height=DISPLAY_SIZE, format="png")
                    map_kind = gr.Radio(
                        [
                            ("iteration that committed each cell", "iteration"),
                            ("accepted run length", "run_length"),
                            ("times drafted before fixed", "redraws"),
                        ],
                        value="run_length",
                        label="Acceptance map",
                    )
                    with gr.Row():
                        map_plot = gr.Plot(label="Acceptance map")
                        race_plot = gr.Plot(label="NFE and latency against AR")
                    with gr.Row():
                        length_plot = gr.Plot(label="Accepted length per iteration")
                        changed_plot = gr.Plot(label="Drafts changed per iteration")  # window methods
                        depth_plot = gr.Plot(label="Draft-tree depth map", visible=False)  # tree methods
                    shape_plot = gr.Plot(label="Tree depth and top-k per cell", visible=False)  # tree methods
                    with gr.Accordion("How to read these views", open=False):
                        gr.Markdown(READING_GUIDE, elem_id="reading-guide")
                    with gr.Accordion("Glossary", open=False):
                        gr.Markdown(viz.GLOSSARY, elem_id="glossary")
                with gr.Tab("Compare"):
                    compare_methods = gr.CheckboxGroup(method_names, value=list(COMPARED), label="Methods")
                    compare_button = gr.Button("Compare on this prompt and seed")
                    compare_note = gr.Markdown(elem_id="compare-note")
                    compare_table = gr.Dataframe(headers=COMPARE_HEADERS, interactive=False, wrap=True)
                    compare_plot = gr.Plot()
                    with gr.Accordion("What a pass costs here (why fewer passes are not always faster)", open=False):
                        cost_button = gr.Button("Measure pass costs on this device", size="sm")
                        cost_note = gr.Markdown(elem_id="cost-note")
                        cost_plot = gr.Plot()
                with gr.Tab("Replay and export"):
                    gr.Markdown(
                        "Upload a saved `trace.json` (for example one made on a GPU) to inspect it here without "
                        "running a model. Download the current run's trace, a slide-sized animation (GIF and MP4, "
                        "beside its AR run after a race), a frame, or "
                        "`figures.zip`: the publication figures of the run (and its AR baseline) at this iteration, "
                        "as PDF, SVG and PNG, in paper style (dark style in dark mode), the same files as "
                        "`python -m specviz figures`; each plot also has a camera button that saves it as PNG."
                    )
                    upload = gr.File(label="Trace JSON", file_types=[".json"], type="filepath")
                    replay_status = gr.Markdown()
                    with gr.Row():
                        export_button = gr.Button("Prepare downloads")
                        beside_ar = gr.Checkbox(
                            True,
                            label="Animation beside AR",
                            info="after a race: both runs, frame by frame after the same number of model passes",
                        )
                    downloads = gr.File(label="Downloads", file_count="multiple", interactive=False)
        timer = gr.Timer(PLAY_INTERVAL, active=False)

        def method_changed(name: str):
            """Show only the chosen method's own parameters, at its defaults where two methods share one."""
            return method_updates(name)

        # on the user's choice only (.input): a replay sets the method and its parameters together
        method.input(method_changed, method, [*method_controls, lossy_note])
        sampling_inputs = [temperature, top_k, top_p, guidance]
        model.input(user_errors(model_defaults), model, sampling_inputs)
        model.input(known_prompts_of, model, known_names)
        model.input(methods_of, model, [method, *method_controls, lossy_note, compare_methods])
        known_names.input(lambda name: name or gr.update(), known_names, prompt)

        @gpu
        @user_errors
        def race(*values) -> Iterator[tuple]:
            (model_name, name, text, seed_value, *controls, temp, tk, tp, guide) = values
            chosen = get_model(model_name)
            sampling = sampling_from(temp, tk, tp, guide)
            params = params_from(name, *controls)
            seed_number = seed_from(seed_value)
            contender = on_compute_thread(RunStream, chosen, name, text, seed_number, sampling, params)
            baseline = on_compute_thread(RunStream, chosen, "ar", text, seed_number, sampling)
            finished = {contender: False, baseline: False}
            shown: dict[RunStream, int] = {}
            # the previous run's images, counters, summary and downloads go at once: they describe another run
            yield (None, "", None, "", racing(name), gr.update(), gr.update(), None)

            def side(stream: RunStream) -> tuple:
                """One side's image and counter, or no update where it has not moved since the last frame."""
                if shown.get(stream) == len(stream.tokens):
                    return gr.update(), gr.update()
                shown[stream] = len(stream.tokens)
                description = f"{stream.method}: {len(stream.tokens)} tokens, live"
                image = picture(chosen, stream.decodable, description, stream.order)
                if stream is contender and stream.iterations:  # the last pass's drafts, on the picture
                    image = viz.pass_overlay(image, stream.trace(), len(stream.iterations) - 1, dark=False)
                    image.info["Description"] = description
                return image, live_counter(stream)

            last = 0.0
            while not all(finished.values()):
                # advance whichever side is behind on its own clock, as if each had the device alone
                behind = min((s for s in finished if not finished[s]), key=lambda s: s.elapsed)
                finished[behind] = on_compute_thread(behind.step) is None
                if time.perf_counter() - last > FRAME_INTERVAL:
                    last = time.perf_counter()
                    yield (*side(contender), *side(baseline), *(gr.update(),) * 4)
            trace, ar = contender.trace(), baseline.trace()
            images = tuple(
                picture(chosen, decodable(t), f"{t.method}: {t.prompt!r}, seed {t.seed}", t.geometry.order)
                for t in (trace, ar)
            )
            # the live clocks also paid for drawing the race (see `retimes`): time both runs again undisturbed
            if retimes(chosen):
                yield (*side(contender), *side(baseline), RETIMING, gr.update(), gr.update(), gr.update())
            (trace, ar), retimed = timed_again(chosen, [trace, ar])
            yield (
                images[0],
                final_counter(trace),
                images[1],
                final_counter(ar),
                race_summary(trace, ar, retimed=retimed),
                {"trace": trace, "ar": ar},
                opened_at(trace),
                gr.update(),
            )

        race_inputs = [model, method, prompt, seed, *method_controls, *sampling_inputs]
        race_outputs = [method_image, method_counter, ar_image, ar_counter, summary, runs, iteration, downloads]
        race_options = {
            "concurrency_limit": 1,
            "concurrency_id": "gpu",
            "show_progress": "hidden",  # the images and counters are the progress; a spinner only costs CPU
        }
        race_event = run_button.click(race, race_inputs, race_outputs, **race_options)
        run_button.click(lambda: "", None, preset_note, queue=False)  # a run of one's own: no preset's story
        preset_outputs = [model, method, *method_controls, lossy_note, prompt, seed, *sampling_inputs]
        preset_outputs += [compare_methods, known_names, preset_note]
        preset_races = [
            button.click(functools.partial(preset_controls, key), None, preset_outputs).then(
                race, race_inputs, race_outputs, **race_options
            )
            for key, button in preset_buttons.items()
        ]

        @user_errors
        def refresh(state: dict, j: float, kind: str, big: bool, night: bool):
            if not state:
                return (gr.update(),) * 8
            return (*iteration_views(state, j, big, night), *overview_figures(state, kind, big, night))

        views = [window_plot, iteration_image, depth_plot, map_plot, length_plot, changed_plot, race_plot, shape_plot]
        view_inputs = [runs, iteration, map_kind, large, dark]
        for event in (race_event, *preset_races):
            event.then(refresh, view_inputs, views)
        for control in (map_kind, large, dark):
            control.change(refresh, view_inputs, views)

        @user_errors
        def at_iteration(state: dict, j: float, big: bool, night: bool):
            if not state:
                return gr.update(), gr.update(), gr.update()
            return iteration_views(state, j, big, night)

        iteration.change(at_iteration, [runs, iteration, large, dark], [window_plot, iteration_image, depth_plot])

        def tick(state: dict, j: float):
            if not state or j >= len(state["trace"].iterations) - 1:
                return gr.update(), gr.Timer(active=False)
            return int(j) + 1, gr.update()

        timer.tick(tick, [runs, iteration], [iteration, timer])
        play.click(lambda: gr.Timer(active=True), None, timer)
        pause.click(lambda: gr.Timer(active=False), None, timer)

        def previous_acceptance(state: dict, j: float):
            return neighbour_instructive(state, j, forward=False)

        def next_acceptance(state: dict, j: float):
            return neighbour_instructive(state, j, forward=True)

        previous_button.click(previous_acceptance, [runs, iteration], iteration)
        next_button.click(next_acceptance, [runs, iteration], iteration)
        for kind, button in jump_buttons.items():
            button.click(functools.partial(next_of_kind, kind), [runs, iteration], iteration)
        step_back.click(functools.partial(step_by, -1), [runs, iteration], iteration)
        step_on.click(functools.partial(step_by, 1), [runs, iteration], iteration)
        iteration.change(describe_iteration, [runs, iteration], iteration_note)
        speed.change(lambda seconds: gr.Timer(value=seconds), speed, timer)
        demo.load(None, None, None, js=ARROW_KEYS)
        large.change(None, large, None, js=TOGGLE_LARGE)
        dark.change(None, dark, None, js=TOGGLE_DARK)

        @gpu
        @user_errors
        def compare(selected: list[str], *values) -> Iterator[tuple]:
            (model_name, text, seed_value, *controls, temp, tk, tp, guide, big, night) = values
            if not selected:
                raise SettingsError("choose at least one method to compare")
            chosen = get_model(model_name)
            sampling = sampling_from(temp, tk, tp, guide)
            seed_number = seed_from(seed_value)
            total = len(selected) + 1
            yield [], None, f"{COMPARING}AR and {', '.join(selected)}: 0 of {total} runs done...*"
            ar = on_compute_thread(run, chosen, "ar", text, seed_number, sampling)
            traces: list[Trace] = []
            for name in selected:
                params = params_from(name, *controls)
                traces.append(on_compute_thread(run, chosen, name, text, seed_number, sampling, params))
                done = f"{COMPARING}AR and {', '.join(selected)}: {len(traces) + 1} of {total} runs done...*"
                yield compare_rows(ar, traces)[0], gr.update(), done
            if retimes(chosen):
                yield gr.update(), gr.update(), f"{COMPARING}done; timing all {total} runs again, one by one...*"
            (ar, *traces), retimed = timed_again(chosen, [ar, *traces])
            table, rows = compare_rows(ar, traces)
            yield table, viz.comparison_figure(rows, dark=night, large=big), compare_caption(ar, retimed)

        compare_event = compare_button.click(
            compare,
            [compare_methods, model, prompt, seed, *method_controls, *sampling_inputs, large, dark],
            [compare_table, compare_plot, compare_note],
            concurrency_limit=1,
            concurrency_id="gpu",
        )

        @gpu
        @user_errors
        def measure_costs(model_name: str, text: str, state: dict, big: bool, night: bool):
            """Time passes of 1 to 33 tokens on the chosen model and say what that does to a speedup."""
            chosen = get_model(model_name)
            costs = on_compute_thread(pass_costs, chosen, check_prompt(text))
            compression = viz.summary(state["trace"])["step_compression"] if state else None  # the last run's
            return cost_sentence(costs, compression), viz.pass_cost_figure(costs, dark=night, large=big)

        cost_button.click(
            measure_costs,
            [model, prompt, runs, large, dark],
            [cost_note, cost_plot],
            concurrency_limit=1,
            concurrency_id="gpu",
        )

        def stop(*shown: str) -> tuple:
            """Cancel a race or a comparison and say so, with how far it got; stop playing back."""
            return (*stopped(*shown), gr.Timer(active=False))

        stop_button.click(
            stop,
            [summary, method_counter, ar_counter, compare_note],
            [summary, compare_note, timer],
            cancels=[race_event, *preset_races, compare_event],
        )

        @user_errors
        def replay(path: str | None, big: bool, night: bool):
            """Load a trace; set the controls to its settings and open Inspect at an instructive iteration."""
            if not path:
                return (gr.update(),) * len(replay_outputs)
            trace = Trace.load(path)
            note = f"Loaded **{trace.method}** on **{trace.model}**: "
            note += f"{len(trace.iterations)} iterations, NFE {trace.nfe}. "
            controls, unchanged = restored_controls(trace)
            note += "The controls now show its settings" + (f" ({'; '.join(unchanged)})." if unchanged else ".")
            if decoder_for(trace) is None:
                note += f" Model {trace.model} is not loaded here, so images are not shown; the token views are."
            return {"trace": trace}, note, opened_at(trace), None, *controls

        replay_outputs = [runs, replay_status, iteration, downloads, model, method, *method_controls, lossy_note]
        replay_outputs += sampling_inputs
        upload.upload(replay, [upload, large, dark], replay_outputs).then(refresh, view_inputs, views)

        @user_errors
        def export(state: dict, j: float, night: bool, with_ar: bool = True):
            if not state:
                raise SettingsError("run a method or upload a trace first")
            trace: Trace = state["trace"]
            ar: Trace | None = state.get("ar") if with_ar else None  # a race has one; an uploaded trace not
            folder = export_folder()
            trace.save(folder / "trace.json")
            decoder = decoder_for(trace)

            def image_at(k: int) -> Image.Image | None:
                tokens = viz.tokens_through(trace, k)
                return on_compute_thread(decode_in_order, decoder, tokens, trace.geometry.order) if decoder else None

            def ar_image_at(k: int) -> Image.Image | None:
                tokens = viz.tokens_through(ar, k)
                return on_compute_thread(decode_in_order, decoder, tokens, ar.geometry.order) if decoder else None

            def animate(paths: list[Path]) -> list[Path]:
                return viz.write_animation(trace, image_at, paths, dark=night, ar=ar, ar_image_at=ar_image_at)

            files = [folder / "trace.json"]
            try:
                files += animate([folder / "animation.gif", folder / "animation.mp4"])
            except RuntimeError as error:  # no imageio-ffmpeg: the GIF alone
                log.warning("no MP4: %s", error)
                files += animate([folder / "animation.gif"])
            k = max(0, min(int(j), len(trace.iterations) - 1))
            viz.frame(trace, k, image_at(k), scale=viz.export_scale(trace), dark=night).save(
                folder / f"iteration-{k}.png"
            )
            files.append(folder / f"iteration-{k}.png")
            files.append(figure_archive(state, k, folder, decoder, night))
            return [str(f) for f in files]

        export_button.click(export, [runs, iteration, dark, beside_ar], downloads)
    for block in demo.blocks.values():
        if isinstance(block, gr.components.Component):
            quiet_checks(block)
    return demo
