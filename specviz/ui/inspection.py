"""The Inspect tab: every iteration of the last run, one sentence each, with the window (or tree, or
continuous drafts), the image so far, and the views of the whole run; jumps to what is instructive."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import gradio as gr
import plotly.graph_objects as go
from gradio.events import Dependency

from specviz import metrics, viz
from specviz.core.params import SpeculativeParameters
from specviz.core.settings import SamplingSettings, SettingsError
from specviz.decoding import run
from specviz.trace import Trace
from specviz.ui.compute import VIEWER_WORK, Deadline, on_compute_thread, request_memory
from specviz.ui.controls import Controls
from specviz.ui.errors import user_errors
from specviz.ui.loading import decoder_for, get_model, gpu_seconds, gpu_work
from specviz.ui.outputs import Outputs
from specviz.ui.pictures import DISPLAY_SIZE, picture
from specviz.viz.continuous import prefill_label

PLAY_INTERVAL = 0.4  # seconds per iteration when playing back
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
  SCD's point is that fewer drafts are redrawn from one pass to the next; SJD++ keeps (reuses) a draft
  whose confidence passes its threshold, and the cell's hover says so.
- **Draft tree (eagle2, peanut)**: one pass verifies a whole tree of guesses below the decided head
  token; the path of accepted nodes is committed, then one more token is drawn from what the model
  left after the refused siblings. The head, the accepted path and that token lie on one straight
  line; at each depth the siblings tested before the path's node sit above it, the rest below. Any
  drafter's guesses give exact samples; a better drafter only makes the accepted path longer.
- **Continuous tokens (tiny-continuous: cspd, cspd-exact)**: a token is 12 numbers, drawn by a small
  diffusion head in 25 denoising steps; a draft model proposes gamma tokens, the target checks them in
  one pass. The bars give each draft's acceptance probability min(1, r) (its value under the bar) and
  the tick the uniform that decided it; hatched drafts came after a rejection and were discarded
  untested. cspd (the paper) denoises both models from the same noise and compares the last step's
  densities times Sigma, the ratio of the earlier steps' variances: close to the target's
  distribution, not exact. cspd-exact compares the densities of the draft's whole denoising path
  under both models: exact, with acceptance measured rather than promised. The trajectory view draws
  one draft's path (and for cspd the target's path from the same noise) in the token's first two
  coordinates: each step adds fresh noise, so a path zig-zags, and under cspd both paths take the
  same noise, so they nearly coincide even where the draft is rejected (the densities of the last
  step decide). The map shows which tokens were accepted drafts and which were resampled.
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


def neighbour_instructive(runs: dict, j: float, forward: bool) -> int | dict:
    """The next (or previous) iteration after (before) j that accepted a draft; j itself where none is."""
    if not runs:
        return gr.update()
    found = metrics.instructive_iterations(runs["trace"])
    later = [k for k in found if k > j] if forward else [k for k in reversed(found) if k < j]
    return later[0] if later else int(j)


NO_TARGET = {
    "rejection": "No rejection after iteration {j} in this run.",
    "long": "No long accepted run after iteration {j} in this run.",
    "stall": "No stall after iteration {j} in this run.",
}
NOTHING_VERIFIED = (
    "{method} verifies no draft: each pass draws its tokens once, so there is no rejection, long accepted run "
    "or stall to jump to. Step through the passes instead."
)


def next_of_kind(kind: str, runs: dict, j: float) -> tuple[int | dict, str | dict]:
    """The next iteration after j that shows `kind` (viz.JUMPS), and no change to the sentence (the new
    iteration's replaces it); where none does, the iteration stays and the sentence says so."""
    if not runs:
        return gr.update(), gr.update()
    if not any(it.verifies_drafts for it in runs["trace"].iterations):
        return gr.update(), NOTHING_VERIFIED.format(method=runs["trace"].method)
    target = viz.jump(runs["trace"], int(j), kind)
    return (target, gr.update()) if target != int(j) else (gr.update(), NO_TARGET[kind].format(j=int(j)))


def step_by(offset: int, runs: dict, j: float) -> int | dict:
    """One iteration back or on, within the run."""
    if not runs:
        return gr.update()
    return max(0, min(int(j) + offset, len(runs["trace"].iterations) - 1))


NOTHING_TO_INSPECT = (
    "Nothing to inspect yet: press Run or a preset, or upload a trace under *Replay and export*; its passes show "
    "here one by one."
)


def describe_iteration(runs: dict, j: float) -> str:
    """The sentence under the slider: what iteration j did; before any run, where one comes from."""
    if not runs:
        return NOTHING_TO_INSPECT
    trace = runs["trace"]
    return viz.iteration_sentence(trace, max(0, min(int(j), len(trace.iterations) - 1)))


ITERATION_LABELS = {False: "Jacobi window", True: "Draft tree of this iteration"}
CONTINUOUS_LABELS = {
    "iteration": "Drafts of this pass and their acceptance ratios",
    "paths": "Denoising trajectories of one draft (draft and target, same noise)",
    "by_step": "Acceptance by generation step",
    "sources": "Where each token came from",
}
MAP_LABEL = "Acceptance map"
# a plot whose label badge sits over its top-left corner: the layout's CSS keeps its title clear of it
LABELLED = ["labelled-plot"]


def iteration_views(runs: dict, j: int, large: bool, dark: bool, wide: bool = False) -> dict[str, object]:
    """The views that follow the iteration slider (`InspectTab.iteration_outputs`): the window (a tree run: the
    tree) of iteration j, the image after it, and (tree runs only) the depth map with iteration j's cells
    outlined. `wide`: the projector layout, whose window (bars beside the grid), tree and continuous drafts
    (short figures) fit a 1280 x 720 screen."""
    trace: Trace = runs["trace"]
    j = max(0, min(int(j), len(trace.iterations) - 1))
    decoder = decoder_for(trace)
    tokens = metrics.tokens_through(trace, j)
    caption = f"{trace.method}: {len(tokens)} tokens after iteration {j}"
    image = picture(decoder, tokens, caption, trace.geometry.order) if decoder else None
    return {"iteration_image": image, **views_of(trace).iteration(trace, j, dark, large, wide)}


def overview_figures(runs: dict, kind: str, large: bool, dark: bool) -> dict[str, object]:
    """The views of the whole run (`InspectTab.overview_outputs`): acceptance map, accepted length (tree runs:
    tau), drafts changed (window runs only) or the tree shapes (tree runs only), the race against AR, and a
    continuous run's contrast image (`contrast_picture`)."""
    trace, ar = runs["trace"], runs.get("ar")
    versus = viz.race_figure(trace, ar, dark=dark, large=large) if ar is not None else no_ar_figure(trace, dark, large)
    return {"race_plot": versus, **views_of(trace).overview(runs, kind, dark, large)}


def _window_iteration(trace: Trace, j: int, dark: bool, large: bool, wide: bool) -> dict[str, object]:
    view = viz.window_figure(trace, j, dark=dark, large=large, wide=wide)
    return {
        "window_plot": gr.update(value=view, label=ITERATION_LABELS[False]),
        "depth_plot": gr.update(value=None, visible=False),
    }


def _tree_iteration(trace: Trace, j: int, dark: bool, large: bool, wide: bool) -> dict[str, object]:
    view = viz.tree_figure(trace, j, dark=dark, large=large, wide=wide)
    depths = viz.depth_map_figure(trace, j, dark=dark, large=large)
    return {
        "window_plot": gr.update(value=view, label=ITERATION_LABELS[True]),
        "depth_plot": gr.update(value=depths, visible=True, label="Draft-tree depth map"),
    }


def _continuous_iteration(trace: Trace, j: int, dark: bool, large: bool, wide: bool) -> dict[str, object]:
    view = viz.ratio_bars_figure(trace, j, dark=dark, large=large, wide=wide)
    paths = viz.trajectory_figure(trace, j, dark=dark, large=large)
    return {
        "window_plot": gr.update(value=view, label=CONTINUOUS_LABELS["iteration"]),
        "depth_plot": gr.update(value=paths, visible=True, label=CONTINUOUS_LABELS["paths"]),
    }


def _window_overview(runs: dict, kind: str, dark: bool, large: bool) -> dict[str, object]:
    trace = runs["trace"]
    return {
        "map_plot": gr.update(value=viz.acceptance_map_figure(trace, kind, dark=dark, large=large), label=MAP_LABEL),
        "length_plot": gr.update(
            value=viz.accepted_length_figure(trace, dark=dark, large=large), label="Accepted length per iteration"
        ),
        "changed_plot": gr.update(
            value=viz.changed_figure(trace, dark=dark, large=large), visible=True, label="Drafts changed per iteration"
        ),
        "shape_plot": gr.update(value=None, visible=False),
        "contrast_image": gr.update(value=None, visible=False),
    }


def _tree_overview(runs: dict, kind: str, dark: bool, large: bool) -> dict[str, object]:
    trace = runs["trace"]
    return {
        "map_plot": gr.update(value=viz.acceptance_map_figure(trace, kind, dark=dark, large=large), label=MAP_LABEL),
        "length_plot": gr.update(value=viz.tau_figure(trace, dark=dark, large=large), label="Tau per tree pass"),
        "changed_plot": gr.update(value=None, visible=False, label="Drafts changed per iteration"),
        "shape_plot": gr.update(value=viz.tree_shape_figure(trace, dark=dark, large=large), visible=True),
        "contrast_image": gr.update(value=None, visible=False),
    }


def _continuous_overview(runs: dict, kind: str, dark: bool, large: bool) -> dict[str, object]:
    trace = runs["trace"]
    return {
        "map_plot": gr.update(
            value=viz.token_source_figure(trace, dark=dark, large=large), label=CONTINUOUS_LABELS["sources"]
        ),
        "length_plot": gr.update(
            value=viz.accepted_length_figure(trace, dark=dark, large=large), label="Accepted per pass"
        ),
        "changed_plot": gr.update(
            value=viz.acceptance_by_step_figure([trace, *runs.get("contrast", [])], dark=dark, large=large),
            visible=True,
            label=CONTINUOUS_LABELS["by_step"],
        ),
        "shape_plot": gr.update(value=None, visible=False),
        "contrast_image": contrast_picture(runs),
    }


@dataclass(frozen=True)
class RunViews:
    """What Inspect draws for one kind of run: the views of an iteration and those of the whole run."""

    iteration: Callable[[Trace, int, bool, bool, bool], dict[str, object]]
    overview: Callable[[dict, str, bool, bool], dict[str, object]]


WINDOW_VIEWS = RunViews(_window_iteration, _window_overview)
# by the kind of pass a run verified; a run of single tokens (AR) or of rows (ZipAR) is drawn on the window's grid
VIEWS = {
    "tree": RunViews(_tree_iteration, _tree_overview),
    "continuous": RunViews(_continuous_iteration, _continuous_overview),
}


def views_of(trace: Trace) -> RunViews:
    return VIEWS.get(trace.kind, WINDOW_VIEWS)


def contrast_picture(runs: dict) -> dict:
    """The image of the run with pre-filling switched, under the acceptance of both (hidden without one):
    switching it changes which tokens the draft proposes, and so the image the same seed gives."""
    contrast = runs.get("contrast")
    decoder = decoder_for(contrast[0]) if contrast else None
    if decoder is None:
        return gr.update(value=None, visible=False)
    second = contrast[0]
    label = prefill_label(second) + (": its image" if isinstance(second.parameters, SpeculativeParameters) else "")
    tokens = metrics.tokens_through(second, len(second.iterations) - 1)
    image = picture(decoder, tokens, f"{label} (seed {second.seed})", second.geometry.order)
    return gr.update(value=image, visible=True, label=label)


def no_ar_figure(trace: Trace, dark: bool, large: bool) -> go.Figure:
    """In place of the race against AR for a run that came without one (an uploaded trace): why it is empty."""
    return viz.message_figure(
        "NFE and latency against AR",
        f"This {trace.method} trace came without an AR run of the same prompt and seed, so there is nothing "
        "to compare its passes and seconds with. Press Run with these settings to race it against AR here.",
        dark=dark,
        large=large,
    )


def contrast_params(trace: Trace) -> dict | None:
    """A continuous run's parameters with token pre-filling switched (off where it was on, the paper's
    5% where it was off): the second run of the paper's figure 11; None for a run without pre-filling."""
    params = trace.parameters
    return params.prefill_switched().to_dict() if isinstance(params, SpeculativeParameters) else None


def contrast_label(runs: dict) -> dict:
    """The contrast button, shown for a run that has a pre-filling switch and no contrast run yet."""
    trace = runs.get("trace") if runs else None
    params = contrast_params(trace) if trace is not None else None
    if params is None or runs.get("contrast"):
        return gr.update(visible=False)
    return gr.update(visible=True, value=f"Add this run with {params['prefill']:.0%} pre-filling (paper's figure 11)")


def with_contrast(runs: dict) -> dict:
    """The runs with a second run of the same method, prompt, seed and sampling beside the first,
    pre-filling switched (`contrast_params`); drawn in acceptance by step."""
    trace: Trace = runs["trace"]
    params = contrast_params(trace)
    if params is None:
        raise SettingsError("only a continuous run with a pre-filling setting (cspd, cspd-exact) has a contrast")
    model = get_model(trace.model)
    sampling = SamplingSettings(**trace.sampling.model_dump())
    limits = {"memory": request_memory(model), "between_passes": Deadline().check}
    second = on_compute_thread(
        functools.partial(run, **limits), model, trace.method, trace.prompt, trace.seed, sampling, params
    )
    return {**runs, "contrast": [second]}


def contrast_seconds(runs: dict) -> int:
    """GPU time for the contrast run: the target's pass per token and its draft's."""
    return gpu_seconds(2 * get_model(runs["trace"].model).geometry.seq_len)


@dataclass
class InspectTab:
    iteration: gr.Slider
    loaded: gr.Number  # hidden: a new value (handover.LOADS) from a race or an upload refreshes the views
    timer: gr.Timer
    iteration_outputs: Outputs  # what `iteration_views` sets
    overview_outputs: Outputs  # what `overview_figures` sets
    map_kind: gr.Radio
    contrast_button: gr.Button

    @property
    def views(self) -> Outputs:
        """Every view `refresh` draws: the iteration's, then the whole run's."""
        return Outputs(self.iteration_outputs, self.overview_outputs)


def slider_row() -> tuple[gr.Slider, dict]:
    """The iteration slider and playback; returns the slider, and the playback's buttons by role."""
    with gr.Row(elem_id="inspect-slider"):
        iteration = gr.Slider(0, 1, value=0, step=1, precision=0, label="Iteration (arrow keys step)")
        play = gr.Button("Play", scale=0, size="sm", min_width=60)
        pause = gr.Button("Pause", scale=0, size="sm", min_width=60)
        speed = gr.Radio(
            [("slow", 1.5), ("normal", PLAY_INTERVAL), ("fast", 0.1)],
            value=PLAY_INTERVAL,
            label="Playback",
            scale=0,
            min_width=220,
        )
    return iteration, {"play": play, "pause": pause, "speed": speed}


JUMP_LABELS = {"rejection": "Next rejection \u25b6", "long": "Next long run \u25b6", "stall": "Next stall \u25b6"}


def step_row() -> dict:
    """The step and jump buttons by role (the jumps by kind, viz.JUMPS)."""
    with gr.Row(elem_id="inspect-steps"):
        step_back = gr.Button("\u25c0", scale=0, size="sm", min_width=40, elem_id="step-back")
        step_on = gr.Button("\u25b6", scale=0, size="sm", min_width=40, elem_id="step-on")
        previous_button = gr.Button("\u25c0 Previous acceptance", scale=0, size="sm", min_width=140)
        next_button = gr.Button("Next acceptance \u25b6", scale=0, size="sm", min_width=140)
        jumps = {kind: gr.Button(label, scale=0, size="sm", min_width=140) for kind, label in JUMP_LABELS.items()}
    return {
        "step_back": step_back,
        "step_on": step_on,
        "previous": previous_button,
        "next": next_button,
        "jumps": jumps,
    }


def iteration_row() -> dict:
    """The views of an iteration above the whole run's: its window (or tree, or drafts) and its image."""
    with gr.Row(elem_id="inspect-views"):
        window_plot = gr.Plot(label=ITERATION_LABELS[False], elem_id="inspect-window", elem_classes=LABELLED)
        iteration_image = gr.Image(
            label="Image at this iteration",
            height=DISPLAY_SIZE,
            format="png",
            elem_classes=["picture"],
            elem_id="inspect-image",
        )
    return {"window_plot": window_plot, "iteration_image": iteration_image}


MAP_KINDS = [
    ("iteration that committed each cell", "iteration"),
    ("accepted run length", "run_length"),
    ("times drafted before fixed", "redraws"),
]


def run_views() -> dict:
    """The map's kind and the views of the whole run (and, under them, the depth map or trajectories that follow
    the iteration), with the contrast button, by name."""
    map_kind = gr.Radio(MAP_KINDS, value="run_length", label=MAP_LABEL)
    with gr.Row():
        map_plot = gr.Plot(label=MAP_LABEL, elem_classes=LABELLED)
        race_plot = gr.Plot(label="NFE and latency against AR", elem_classes=LABELLED)
    with gr.Row():
        length_plot = gr.Plot(label="Accepted length per iteration", elem_classes=LABELLED)
        with gr.Column():
            # window methods; continuous: acceptance by step
            changed_plot = gr.Plot(label="Drafts changed per iteration", elem_classes=LABELLED)
            contrast_button = gr.Button(visible=False, size="sm", elem_id="contrast-button")
            contrast_image = gr.Image(
                visible=False, height=DISPLAY_SIZE // 2, format="png", buttons=[], elem_id="contrast-image"
            )
    with gr.Row():  # two to a row: three leave a 1280 x 720 projector's plots too narrow for their titles
        # trees; continuous: trajectories
        depth_plot = gr.Plot(label="Draft-tree depth map", visible=False, elem_classes=LABELLED)
        # tree methods only
        shape_plot = gr.Plot(label="Tree depth and top-k per cell", visible=False, elem_classes=LABELLED)
    return {
        "map_kind": map_kind, "map_plot": map_plot, "race_plot": race_plot, "length_plot": length_plot,
        "changed_plot": changed_plot, "contrast_button": contrast_button, "contrast_image": contrast_image,
        "depth_plot": depth_plot, "shape_plot": shape_plot,
    }  # fmt: skip


def guides() -> None:
    """How to read the views, and the glossary, folded."""
    with gr.Accordion("How to read these views", open=False):
        gr.Markdown(READING_GUIDE, elem_id="reading-guide")
    with gr.Accordion("Glossary", open=False):
        gr.Markdown(viz.GLOSSARY, elem_id="glossary")


FOLLOWING = ["window_plot", "iteration_image", "depth_plot"]  # `InspectTab.iteration_outputs`
OVERVIEW = ["map_plot", "length_plot", "changed_plot", "race_plot", "shape_plot", "contrast_image"]


def build() -> tuple[InspectTab, dict]:
    """The tab's components; also returns its buttons by role, for `wire`."""
    with gr.Tab("Inspect", id="inspect"):
        iteration, playback = slider_row()
        steps = step_row()
        iteration_note = gr.Markdown(NOTHING_TO_INSPECT, elem_id="iteration-note")  # what this pass did
        views = {**iteration_row(), **run_views()}
        guides()
    # rendered by the page outside the tab bar (`layout`): playback goes on while another tab is open
    timer = gr.Timer(PLAY_INTERVAL, active=False, render=False)
    loaded = gr.Number(0, visible="hidden", elem_id="runs-loaded", render=False)  # rendered: its change event fires
    following = Outputs({name: views[name] for name in FOLLOWING})
    overview = Outputs({name: views[name] for name in OVERVIEW})
    tab = InspectTab(iteration, loaded, timer, following, overview, views["map_kind"], views["contrast_button"])
    return tab, {**playback, **steps, "note": iteration_note}


def refresh(state: dict, j: float, kind: str, big: bool, night: bool, wide: bool) -> dict[str, object]:
    """Every view of the runs at iteration j (`InspectTab.views`), the contrast button and the sentence
    (`note`); nothing before any run."""
    if not state:
        return {}
    views = {**iteration_views(state, j, big, night, wide), **overview_figures(state, kind, big, night)}
    return {**views, "contrast_button": contrast_label(state), "note": describe_iteration(state, j)}


def map_kinds(state: dict) -> dict:
    """The map kinds' radio: a continuous run has one map, where each token came from, not the kinds it offers."""
    return gr.update(visible=not (state and state["trace"].continuous))


# a step, a jump or a tick answers in one round trip: the new iteration, its views and its sentence together
# (the slider's own change set off two more, which doubled a step's time in the browser)
@VIEWER_WORK.drawing
def shown_at(
    state: dict, j: int | dict, big: bool, night: bool, wide: bool, nothing: str | dict | None = None
) -> dict[str, object]:
    """Iteration j (`iteration`), its views and its sentence (`note`); where there is no run, or no move (`j` an
    update), the sentence `nothing` says why (no change where None)."""
    if not state or not isinstance(j, int):
        return {"note": nothing or gr.update()}
    return {"iteration": j, **iteration_views(state, j, big, night, wide), "note": describe_iteration(state, j)}


def at_iteration(state: dict, j: float, big: bool, night: bool, wide: bool) -> dict[str, object]:
    """The slider moved by hand: its iteration's views and sentence (the slider stays where the hand left it)."""
    shown = shown_at(state, step_by(0, state, j), big, night, wide, NOTHING_TO_INSPECT)
    return {name: value for name, value in shown.items() if name != "iteration"}


def tick(state: dict, j: float, big: bool, night: bool, wide: bool) -> dict[str, object]:
    """Playback's next iteration; at the run's end, or without a run, playback stops (`timer`)."""
    if not state or j >= len(state["trace"].iterations) - 1:
        return {**shown_at({}, 0, big, night, wide), "timer": gr.Timer(active=False)}
    return shown_at(state, int(j) + 1, big, night, wide)


def step_back(state: dict, j: float, big: bool, night: bool, wide: bool) -> dict[str, object]:
    return shown_at(state, step_by(-1, state, j), big, night, wide, NOTHING_TO_INSPECT)


def step_on(state: dict, j: float, big: bool, night: bool, wide: bool) -> dict[str, object]:
    return shown_at(state, step_by(1, state, j), big, night, wide, NOTHING_TO_INSPECT)


def previous_acceptance(state: dict, j: float, big: bool, night: bool, wide: bool) -> dict[str, object]:
    return shown_at(state, neighbour_instructive(state, j, forward=False), big, night, wide, NOTHING_TO_INSPECT)


def next_acceptance(state: dict, j: float, big: bool, night: bool, wide: bool) -> dict[str, object]:
    return shown_at(state, neighbour_instructive(state, j, forward=True), big, night, wide, NOTHING_TO_INSPECT)


def jump_to(kind: str) -> Callable:
    """The handler of a 'Next ...' button (viz.JUMPS); where nothing follows, the sentence says so."""

    def jump(state: dict, j: float, big: bool, night: bool, wide: bool) -> dict[str, object]:
        target, said = next_of_kind(kind, state, j)
        return shown_at(state, target, big, night, wide, said if state else NOTHING_TO_INSPECT)

    jump.__name__ = f"next_{kind}"  # its endpoint's name
    return jump


@dataclass(frozen=True)
class Refresh:
    """The views' refresh as wired: its handler (`refresh` keyed by component), inputs and outputs."""

    handler: Callable
    inputs: list
    outputs: list
    runs: gr.State
    map_kind: gr.Radio

    def after(self, event: Dependency) -> Dependency:
        """Chain the views' refresh after an event that sets `runs`."""
        event.then(map_kinds, self.runs, self.map_kind)
        return event.then(self.handler, self.inputs, self.outputs)


def wire_refresh(tab: InspectTab, note: gr.Markdown, controls: Controls, runs: gr.State, projector: gr.Checkbox):
    """Every view redrawn where the map's kind or a display option changes (the `projector` layout's window
    is wide); returns the refresh, for the events that set `runs`."""
    outputs = Outputs(tab.views, {"contrast_button": tab.contrast_button, "note": note})
    handler = user_errors(VIEWER_WORK.drawing(outputs.set_by(refresh)))
    inputs = [runs, tab.iteration, tab.map_kind, controls.large, controls.dark, projector]
    for control in (tab.map_kind, controls.large, controls.dark, projector):
        control.change(handler, inputs, outputs.components)
    return Refresh(handler, inputs, outputs.components, runs, tab.map_kind)


def wire_steps(tab: InspectTab, buttons: dict, where: list) -> None:
    """The slider, playback, and the step and jump buttons, each given the runs, the iteration and the
    display options (`where`)."""
    note = {"note": buttons["note"]}
    moved = Outputs({"iteration": tab.iteration}, tab.iteration_outputs, note)
    ticked = Outputs(moved, {"timer": tab.timer})
    by_hand = Outputs(tab.iteration_outputs, note)
    stepped = {"show_progress": "hidden"}  # no spinner: during playback one would cover every frame
    tab.iteration.input(user_errors(by_hand.set_by(at_iteration)), where, by_hand.components, **stepped)
    tab.timer.tick(user_errors(ticked.set_by(tick)), where, ticked.components, **stepped)
    buttons["play"].click(lambda: gr.Timer(active=True), None, tab.timer)
    buttons["pause"].click(lambda: gr.Timer(active=False), None, tab.timer)
    steps = {"step_back": step_back, "step_on": step_on, "previous": previous_acceptance, "next": next_acceptance}
    moves = [(buttons[name], move) for name, move in steps.items()]
    moves += [(button, jump_to(kind)) for kind, button in buttons["jumps"].items()]
    for button, move in moves:
        button.click(user_errors(moved.set_by(move)), where, moved.components, **stepped)
    buttons["speed"].change(lambda seconds: gr.Timer(value=seconds), buttons["speed"], tab.timer)


def wire_contrast(tab: InspectTab, runs: gr.State, views: Refresh) -> tuple[Callable, Dependency]:
    """The contrast button: the run again with pre-filling switched, then the views; returns its handler (the
    CSpD preset chains it) and its event (Stop cancels it)."""
    contrast_work = gpu_work(model=lambda state: state["trace"].model, duration=contrast_seconds)(
        user_errors(with_contrast)
    )

    @user_errors
    def contrast_runs(state: dict) -> dict:
        """The same run with pre-filling switched, beside the first in acceptance by step."""
        if not state or contrast_params(state["trace"]) is None:
            raise SettingsError("run cspd or cspd-exact on tiny-continuous first")
        return contrast_work(state)

    event = tab.contrast_button.click(
        contrast_runs, runs, runs, concurrency_limit=1, concurrency_id="gpu", show_progress="minimal"
    )
    event.success(views.handler, views.inputs, views.outputs)
    return contrast_runs, event


def wire(
    tab: InspectTab, buttons: dict, controls: Controls, runs: gr.State, projector: gr.Checkbox
) -> tuple[Callable, Callable, Dependency]:
    """Slider, playback, jumps and views (the `projector` layout's window is wide); returns what chains the
    views' refresh after an event that sets `runs`, the contrast run's handler (the CSpD preset chains it)
    and its event (Stop cancels it)."""
    views = wire_refresh(tab, buttons["note"], controls, runs, projector)
    wire_steps(tab, buttons, [runs, tab.iteration, controls.large, controls.dark, projector])
    contrast_runs, contrast_event = wire_contrast(tab, runs, views)
    # a race hands its runs over as soon as both are complete, while their clocks are still being timed
    tab.loaded.change(map_kinds, runs, tab.map_kind)
    tab.loaded.change(views.handler, views.inputs, views.outputs)
    return views.after, contrast_runs, contrast_event
