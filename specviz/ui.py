"""The Gradio app: race a method against AR, inspect every iteration, compare, replay and export.

Only calls down: models and decoding to run, specviz.viz to draw. Each browser session keeps its
own runs in `gr.State`, so concurrent users never see each other's traces.
"""

from __future__ import annotations

import functools
import logging
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import gradio as gr
import torch
from PIL import Image

from specviz import viz
from specviz.decoding import METHODS, PromptError, RunStream, UnknownMethod, run
from specviz.decoding.window import INIT_STRATEGIES, MAX_WINDOW
from specviz.models.errors import ModelUnavailable, UnknownModel
from specviz.models.protocol import ImageModel, UnsupportedMethod
from specviz.models.registry import MODELS, load_model
from specviz.models.sampling import SamplingSettings, SettingsError
from specviz.trace import Trace, TraceError

log = logging.getLogger("specviz.ui")

DISPLAY_SIZE = 384  # pixels of the displayed images; token cells stay crisp (nearest neighbour)
FRAME_INTERVAL = 0.06  # seconds between streamed UI updates during a race
PLAY_INTERVAL = 0.4  # seconds per iteration when playing back
EXAMPLES = ["red apple", "grinning face", "cat face", "rocket", "four leaf clover", "a smiling sun", "blue car"]
USER_ERRORS = (
    PromptError,
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
.specviz-large { zoom: 1.35; }
#specviz-header h1 { margin-bottom: 0; }
.lossy-note { color: #D55E00; font-weight: 600; }
"""
TOGGLE_LARGE = "(large) => { document.body.classList.toggle('specviz-large', large); }"
TOGGLE_DARK = "(dark) => { document.body.classList.toggle('dark', dark); }"


@functools.cache
def get_model(name: str) -> ImageModel:
    """Load a registered model once per process; every session shares it (read-only)."""
    device = "cuda" if torch.cuda.is_available() and name != "tiny" else "cpu"
    return load_model(name, device=device)


def user_errors(fn: Callable) -> Callable:
    """Show known problems as a message in the UI, and unknown ones without a stack trace."""

    def report(error: Exception) -> gr.Error:
        if isinstance(error, torch.OutOfMemoryError):
            return gr.Error("Out of memory: try a smaller window, a smaller model, or the CPU.")
        if isinstance(error, USER_ERRORS):
            return gr.Error(str(error))
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
    for entry in MODELS.values():
        reason = entry.offline()
        choices.append((entry.name if reason is None else f"{entry.name} (weights needed)", entry.name))
    return choices


def sampling_from(temperature: float, top_k: float, top_p: float, guidance: float) -> SamplingSettings:
    """UI values to settings; top-k 0 in the UI means no top-k."""
    top_k = int(top_k) if top_k else None
    return SamplingSettings(temperature=float(temperature), top_k=top_k, top_p=float(top_p), guidance_scale=guidance)


def params_from(method: str, window: float, init: str, neighbours: float, delta: float, group_size: float) -> dict:
    values = {"window": int(window), "init": init, "neighbours": int(neighbours), "delta": float(delta)}
    values["group_size"] = int(group_size)
    return {k: v for k, v in values.items() if k in METHODS[method].parameters}


def show(image: Image.Image | None) -> Image.Image | None:
    if image is None:
        return None
    return image.resize((DISPLAY_SIZE, DISPLAY_SIZE * image.height // image.width), Image.NEAREST)


def decoder_for(trace: Trace) -> ImageModel | None:
    """The model that can turn this trace's tokens into pixels here, if it is loadable."""
    entry = MODELS.get(trace.model)
    if entry is None or entry.offline() is not None:
        return None
    try:
        return get_model(trace.model)
    except ModelUnavailable:
        return None


def counter(stream: RunStream) -> str:
    total = stream.session.geometry.seq_len
    tokens = f"{len(stream.tokens)}/{total} tokens"
    return f"**{stream.method}** · NFE {stream.session.nfe} · {tokens} · {stream.elapsed:.2f} s"


def race_summary(trace: Trace, ar: Trace) -> str:
    facts = viz.summary(trace, ar)
    lossless = "lossless" if trace.lossless else "**lossy**"
    return (
        f"### {trace.method}: {facts['step_compression']:.2f}x step compression, "
        f"{facts['latency_speedup']:.2f}x latency speedup over AR\n"
        f"{trace.method} ({lossless}): {trace.nfe} passes, {trace.seconds:.2f} s · "
        f"AR: {ar.nfe} passes, {ar.seconds:.2f} s · same prompt, seed and sampling; each side's clock counts "
        "only its own compute (the two runs are interleaved on one device)."
    )


def iteration_views(runs: dict, j: int, large: bool, dark: bool) -> tuple:
    trace: Trace = runs["trace"]
    j = max(0, min(int(j), len(trace.iterations) - 1))
    decoder = decoder_for(trace)
    image = show(decoder.decode(viz.tokens_through(trace, j))) if decoder else None
    return viz.window_figure(trace, j, dark=dark, large=large), image


def overview_figures(runs: dict, kind: str, large: bool, dark: bool) -> tuple:
    trace, ar = runs["trace"], runs.get("ar")
    return (
        viz.acceptance_map_figure(trace, kind, dark=dark, large=large),
        viz.accepted_length_figure(trace, dark=dark, large=large),
        viz.changed_figure(trace, dark=dark, large=large),
        viz.race_figure(trace, ar, dark=dark, large=large) if ar is not None else None,
    )


def build() -> gr.Blocks:
    """The whole app; `app.py` launches it."""
    get_model("tiny")  # load the embedded model and prompt encoder now, so the first Run starts at once
    from specviz.models.tiny.text import shared_text_encoder

    shared_text_encoder()
    method_names = [name for name in METHODS if name != "ar"]

    with gr.Blocks(title="specviz: speculative and Jacobi decoding, visible") as demo:
        runs = gr.State({})
        gr.Markdown(
            "# specviz\nSpeculative and Jacobi decoding for autoregressive image generation, made visible. "
            "Pick a method: it runs next to vanilla AR on the same prompt and seed, and every iteration is "
            "recorded. Colours (colour-blind safe): accepted, rejected and resampled, redrawn, newly initialised.",
            elem_id="specviz-header",
        )
        with gr.Row():
            with gr.Column(scale=1, min_width=300):
                model = gr.Dropdown(model_choices(), value="tiny", label="Model")
                method = gr.Dropdown([(method_label(n), n) for n in method_names], value="sjd", label="Method")
                lossy_note = gr.Markdown(visible=False, elem_classes="lossy-note")
                prompt = gr.Textbox(value="red apple", label="Prompt", max_lines=2)
                gr.Examples(EXAMPLES, inputs=prompt, label="Examples")
                seed = gr.Number(value=0, precision=0, label="Seed", minimum=0)
                window = gr.Slider(1, MAX_WINDOW, value=16, step=1, label="Jacobi window W")
                init = gr.Dropdown(list(INIT_STRATEGIES), value="random", label="New-slot initialisation")
                neighbours = gr.Slider(1, 256, value=32, step=1, label="LANTERN neighbours k", visible=False)
                delta = gr.Slider(0.0, 1.0, value=0.2, step=0.01, label="LANTERN TV budget delta", visible=False)
                group_size = gr.Slider(1, 64, value=10, step=1, label="GSD group size", visible=False)
                with gr.Accordion("Sampling", open=False):
                    temperature = gr.Slider(0.0, 2.0, value=1.0, step=0.05, label="Temperature (0 = greedy)")
                    top_k = gr.Number(value=0, precision=0, minimum=0, label="Top-k (0 = off)")
                    top_p = gr.Slider(0.01, 1.0, value=1.0, step=0.01, label="Top-p")
                    guidance = gr.Slider(0.0, 10.0, value=1.5, step=0.5, label="Guidance scale (1 = off)")
                with gr.Row():
                    large = gr.Checkbox(False, label="Large type")
                    dark = gr.Checkbox(False, label="Dark")
                with gr.Row():
                    run_button = gr.Button("Run", variant="primary", elem_id="run-button")
                    stop_button = gr.Button("Stop")

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
                with gr.Tab("Inspect"):
                    with gr.Row():
                        iteration = gr.Slider(0, 1, value=0, step=1, label="Iteration")
                        play = gr.Button("Play", scale=0)
                        pause = gr.Button("Pause", scale=0)
                    with gr.Row():
                        window_plot = gr.Plot(label="Jacobi window")
                        iteration_image = gr.Image(label="Image at this iteration", height=DISPLAY_SIZE)
                    map_kind = gr.Radio(
                        [
                            ("iteration that committed each cell", "iteration"),
                            ("accepted run length", "run_length"),
                            ("times drafted before fixed", "redraws"),
                        ],
                        value="iteration",
                        label="Acceptance map",
                    )
                    with gr.Row():
                        map_plot = gr.Plot(label="Acceptance map")
                        race_plot = gr.Plot(label="NFE and latency against AR")
                    with gr.Row():
                        length_plot = gr.Plot(label="Accepted length per iteration")
                        changed_plot = gr.Plot(label="Drafts changed per iteration")
                    gr.Markdown("Tree methods will add their draft-tree depth map here.")
                with gr.Tab("Compare"):
                    compare_methods = gr.CheckboxGroup(method_names, value=["sjd", "scd-mc", "scd-gs"], label="Methods")
                    compare_button = gr.Button("Compare on this prompt and seed")
                    compare_table = gr.Dataframe(
                        headers=["method", "lossless", "NFE", "step compression", "seconds", "latency speedup"],
                        interactive=False,
                    )
                    compare_plot = gr.Plot()
                with gr.Tab("Replay and export"):
                    gr.Markdown(
                        "Upload a saved `trace.json` (for example one made on a GPU) to inspect it here without "
                        "running a model. Download the current run's trace, an animation, or a frame; each plot "
                        "also has a camera button that saves it as PNG."
                    )
                    upload = gr.File(label="Trace JSON", file_types=[".json"], type="filepath")
                    replay_status = gr.Markdown()
                    export_button = gr.Button("Prepare downloads")
                    downloads = gr.File(label="Downloads", file_count="multiple", interactive=False)
        timer = gr.Timer(PLAY_INTERVAL, active=False)

        def method_changed(name: str):
            relaxed = {"lantern": (True, True, False), "gsd": (False, False, True)}.get(name, (False, False, False))
            takes_window = "window" in METHODS[name].parameters
            note = "" if METHODS[name].lossless else f"{method_label(name)}: its output distribution differs from AR."
            return (
                gr.update(visible=relaxed[0]),
                gr.update(visible=relaxed[1]),
                gr.update(visible=relaxed[2]),
                gr.update(visible=takes_window),
                gr.update(visible=takes_window),
                gr.update(value=note, visible=bool(note)),
            )

        method.change(method_changed, method, [neighbours, delta, group_size, window, init, lossy_note])

        @gpu
        @user_errors
        def race(*values) -> Iterator[tuple]:
            (model_name, name, text, seed_value, w, ini, k, d, g, temp, tk, tp, guide) = values
            chosen = get_model(model_name)
            sampling = sampling_from(temp, tk, tp, guide)
            params = params_from(name, w, ini, k, d, g)
            contender = RunStream(chosen, name, text, int(seed_value or 0), sampling, params)
            baseline = RunStream(chosen, "ar", text, int(seed_value or 0), sampling)
            finished = {contender: False, baseline: False}
            last = 0.0
            while not all(finished.values()):
                # advance whichever side is behind on its own clock, as if each had the device alone
                behind = min((s for s in finished if not finished[s]), key=lambda s: s.elapsed)
                finished[behind] = behind.step() is None
                if time.perf_counter() - last > FRAME_INTERVAL:
                    last = time.perf_counter()
                    yield (
                        show(chosen.decode(contender.tokens)),
                        counter(contender),
                        show(chosen.decode(baseline.tokens)),
                        counter(baseline),
                        gr.update(),
                        gr.update(),
                        gr.update(),
                    )
            trace, ar = contender.trace(), baseline.trace()
            state = {"trace": trace, "ar": ar}
            yield (
                show(chosen.decode(trace.tokens)),
                counter(contender),
                show(chosen.decode(ar.tokens)),
                counter(baseline),
                race_summary(trace, ar),
                state,
                gr.update(maximum=max(1, len(trace.iterations) - 1), value=0),
            )

        sampling_inputs = [temperature, top_k, top_p, guidance]
        race_inputs = [model, method, prompt, seed, window, init, neighbours, delta, group_size, *sampling_inputs]
        race_event = run_button.click(
            race,
            race_inputs,
            [method_image, method_counter, ar_image, ar_counter, summary, runs, iteration],
            concurrency_limit=1,
            concurrency_id="gpu",
        )

        @user_errors
        def refresh(state: dict, j: float, kind: str, big: bool, night: bool):
            if not state:
                return (gr.update(),) * 6
            window_fig, image = iteration_views(state, j, big, night)
            return (window_fig, image, *overview_figures(state, kind, big, night))

        views = [window_plot, iteration_image, map_plot, length_plot, changed_plot, race_plot]
        view_inputs = [runs, iteration, map_kind, large, dark]
        race_event.then(refresh, view_inputs, views)
        for control in (map_kind, large, dark):
            control.change(refresh, view_inputs, views)

        @user_errors
        def at_iteration(state: dict, j: float, big: bool, night: bool):
            if not state:
                return gr.update(), gr.update()
            return iteration_views(state, j, big, night)

        iteration.change(at_iteration, [runs, iteration, large, dark], [window_plot, iteration_image])

        def tick(state: dict, j: float):
            if not state or j >= len(state["trace"].iterations) - 1:
                return gr.update(), gr.Timer(active=False)
            return int(j) + 1, gr.update()

        timer.tick(tick, [runs, iteration], [iteration, timer])
        play.click(lambda: gr.Timer(active=True), None, timer)
        pause.click(lambda: gr.Timer(active=False), None, timer)
        stop_button.click(lambda: gr.Timer(active=False), None, timer, cancels=[race_event])
        large.change(None, large, None, js=TOGGLE_LARGE)
        dark.change(None, dark, None, js=TOGGLE_DARK)

        @gpu
        @user_errors
        def compare(selected: list[str], *values):
            (model_name, text, seed_value, w, ini, k, d, g, temp, tk, tp, guide, big, night) = values
            if not selected:
                raise SettingsError("choose at least one method to compare")
            chosen = get_model(model_name)
            sampling = sampling_from(temp, tk, tp, guide)
            ar = run(chosen, "ar", text, int(seed_value or 0), sampling)
            rows, table = [], []
            for name in selected:
                trace = run(chosen, name, text, int(seed_value or 0), sampling, params_from(name, w, ini, k, d, g))
                facts = viz.summary(trace, ar)
                rows.append({"method": name, "lossless": trace.lossless, **facts})
                table.append(
                    [
                        name,
                        "yes" if trace.lossless else "no",
                        trace.nfe,
                        round(facts["step_compression"], 2),
                        round(trace.seconds, 3),
                        round(facts["latency_speedup"], 2),
                    ]
                )
            table.insert(0, ["ar", "yes", ar.nfe, 1.0, round(ar.seconds, 3), 1.0])
            return table, viz.comparison_figure(rows, dark=night, large=big)

        compare_button.click(
            compare,
            [
                compare_methods,
                model,
                prompt,
                seed,
                window,
                init,
                neighbours,
                delta,
                group_size,
                *sampling_inputs,
                large,
                dark,
            ],
            [compare_table, compare_plot],
            concurrency_limit=1,
            concurrency_id="gpu",
        )

        @user_errors
        def replay(path: str | None, big: bool, night: bool):
            if not path:
                return gr.update(), gr.update(), gr.update()
            trace = Trace.load(path)
            note = f"Loaded **{trace.method}** on **{trace.model}**: "
            note += f"{len(trace.iterations)} iterations, NFE {trace.nfe}."
            if decoder_for(trace) is None:
                note += f" Model {trace.model} is not loaded here, so images are not shown; the token views are."
            return {"trace": trace}, note, gr.update(maximum=max(1, len(trace.iterations) - 1), value=0)

        upload.upload(replay, [upload, large, dark], [runs, replay_status, iteration]).then(refresh, view_inputs, views)

        @user_errors
        def export(state: dict, j: float, night: bool):
            if not state:
                raise SettingsError("run a method or upload a trace first")
            trace: Trace = state["trace"]
            folder = Path(tempfile.mkdtemp(prefix="specviz-"))
            trace.save(folder / "trace.json")
            decoder = decoder_for(trace)
            images = [
                decoder.decode(viz.tokens_through(trace, k)) if decoder else None for k in range(len(trace.iterations))
            ]
            frames = viz.animation(trace, images, dark=night)
            viz.save_gif(frames, folder / "animation.gif")
            files = [folder / "trace.json", folder / "animation.gif"]
            try:
                viz.save_mp4(frames, folder / "animation.mp4")
                files.append(folder / "animation.mp4")
            except RuntimeError as error:
                log.warning("no MP4: %s", error)
            k = max(0, min(int(j), len(trace.iterations) - 1))
            viz.frame(trace, k, images[k], dark=night).save(folder / f"iteration-{k}.png")
            files.append(folder / f"iteration-{k}.png")
            return [str(f) for f in files]

        export_button.click(export, [runs, iteration, dark], downloads)
    return demo
