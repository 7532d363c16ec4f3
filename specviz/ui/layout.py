"""The page: header, presets, the side panel and the four tabs, and what spans them (Stop, presets,
large type, dark mode); how it is launched and where it is served. Each tab builds its components and wires
its handlers in its own module."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import gradio as gr
from gradio.events import Dependency
from starlette.middleware import Middleware

from specviz import viz
from specviz.core.inputs import InputError, brief, check_prompt
from specviz.core.timing import timings_wanted
from specviz.models.registry import get_entry
from specviz.ui import activity, compare, compute, controls, inspection, race, replay
from specviz.ui.checks import MAX_REQUEST_FILES, MAX_UPLOAD_BYTES, CheckedBlocks
from specviz.ui.compute import on_compute_thread
from specviz.ui.errors import user_errors
from specviz.ui.guard import RequestGuard
from specviz.ui.loading import default_model, load_at_startup, loaded_model, offered_models
from specviz.ui.outputs import Outputs
from specviz.ui.pictures import write_each_picture_once
from specviz.ui.presets import PRESET_BY_KEY, PRESETS, Preset

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
.race-bars { display: grid; gap: 2px; font-size: var(--text-md); }
.race-bars-title { font-weight: 600; margin-top: 4px; }
.race-bar { display: grid; grid-template-columns: 5em 1fr 6em; align-items: center; gap: 8px; }
.race-bar-track { height: 1.1em; background: var(--background-fill-secondary); border-radius: 3px; }
.race-bar-fill { display: block; height: 100%; border-radius: 3px; transition: width 0.15s linear; }
.race-bar-value { font-variant-numeric: tabular-nums; }
/* a picture's label badge sits over its top-left corner: keep the first row of tokens clear of it */
.picture img { padding-top: calc(var(--block-label-text-size) * 2.4); box-sizing: border-box; }
/* the same for Inspect's plots: each title clear of its badge (in large type the badge hid it) */
.labelled-plot .js-plotly-plot { margin-top: calc(var(--block-label-text-size) * 2.2); }
/* the step and jump buttons keep their labels on one line (in large type they wrapped in two) */
#inspect-steps button { white-space: nowrap; flex: none; }
#projector { min-width: 10em; align-self: center; }
/* large type: the presets a little closer, so the Projector layout switch keeps its label whole (it was shrunk
   below its words and cut after "Projecto") */
body.specviz-large #presets { gap: 8px; }
body.specviz-large #projector { min-width: min-content !important; }
/* Compare's table in large type: a size at which each header's longest word fits its column on 1280 px */
body.specviz-large #compare-table { --input-text-size: 16px; }
/* the projector layout: one 1280 x 720 screen holds the pictures, the bars, the caption and the verdict */
body.specviz-projector #specviz-header, body.specviz-projector #side-panel,
body.specviz-projector #race-map-column, body.specviz-projector #presets-title { display: none; }
body.specviz-projector #presets button { min-height: 0; padding: 4px 8px; }
/* the side panel's Run and Stop are hidden there: the presets' row carries its own */
body:not(.specviz-projector) .projector-only { display: none !important; }
body.specviz-projector #method-image, body.specviz-projector #ar-image { height: 300px !important; }
body.specviz-projector.specviz-large #method-image, body.specviz-projector.specviz-large #ar-image {
  height: 260px !important;
}
body.specviz-projector #race-speed { padding: 0; }
/* large type there: the bars closer and the verdict a little smaller, so its four lines end within 577 px (they
   ended at 609, cut after "(1.29-") */
body.specviz-projector.specviz-large .race-bars-title { margin-top: 0; line-height: 1.2; }
body.specviz-projector.specviz-large .race-bar { gap: 2px 8px; line-height: 1.2; }
body.specviz-projector.specviz-large #race-summary h3 { font-size: 22px; line-height: 1.2; }
body.specviz-projector #race-summary h3 { margin: 0.2em 0; }
body.specviz-projector #race-summary p { font-size: var(--text-sm); margin: 0; }
/* Inspect on a projector: the sentence, the step and jump buttons, then the window (or tree) and the image, so
   they share the first screen; the slider and playback under them (the arrow keys step too) */
body.specviz-projector #iteration-note { order: -3; }
body.specviz-projector #inspect-steps { order: -2; }
body.specviz-projector #inspect-views { order: -1; }
body.specviz-projector #inspect-image { height: 300px !important; }
"""
# The race beside its result, on one screen: the two pictures side by side on the left, the bars, the verdict
# (and, outside the projector layout, the map) on the right, where a stacked race put the verdict below the fold
# (a 1280 x 720 window leaves a 1280 x 577 page: the verdict at 601 px; 1920 x 1080 in large type: at 1129 px).
# The race tab's rows give up their boxes (`display: contents`) so that their pictures, bars and map are placed
# on the tab's grid. Each rule as (selector, declarations), for the projector layout and for a normal layout on a
# screen wide enough for three columns.
RACE_TAB = ".column:has(> .row > #race-speed)"
RACE_BESIDE_RESULT = [
    (
        RACE_TAB,
        "display: grid; align-items: start; column-gap: var(--layout-gap); "
        "grid-template-columns: minmax(0, 1fr) minmax(0, 1fr) minmax(0, 1.3fr); grid-template-areas: "
        '"speed speed speed" "method ar bars" "method ar summary" "method ar map" "why why why" "note note note";',
    ),
    (f"{RACE_TAB} > .row:has(> #race-bars)", "display: contents;"),
    (f"{RACE_TAB} > .row:has(> .column > #method-image)", "display: contents;"),
    (f"{RACE_TAB} > .row:has(> #race-speed)", "grid-area: speed;"),
    (".column:has(> #method-image)", "grid-area: method;"),
    (".column:has(> #ar-image)", "grid-area: ar;"),
    ("#race-bars", "grid-area: bars;"),
    ("#race-summary", "grid-area: summary;"),
    ("#race-map-column", "grid-area: map;"),
    ("#why-latency", "grid-area: why; margin-top: var(--layout-gap);"),
    ("#preset-note", "grid-area: note;"),
]
CSS += "".join(f"body.specviz-projector {selector} {{ {rules} }}\n" for selector, rules in RACE_BESIDE_RESULT)
# Gradio scopes the rules inside @media to its container, so none can start at body: "not in the projector
# layout" is said after the element
CSS += "@media (min-width: 1600px) {\n"
CSS += "".join(f"{selector}:not(.specviz-projector *) {{ {rules} }}\n" for selector, rules in RACE_BESIDE_RESULT)
CSS += "}\n"
# Gradio's cache (pictures, uploads, exports): every 15 minutes, files older than an hour are removed
CACHE_SWEEP = (900, 3600)
TOGGLE_LARGE = "(large) => { document.body.classList.toggle('specviz-large', large); }"
TOGGLE_DARK = "(dark) => { document.body.classList.toggle('dark', dark); }"
TOGGLE_PROJECTOR = "(on) => { document.body.classList.toggle('specviz-projector', on); }"
# a screen smaller than about 1400 x 800 (a projector) opens in the projector layout
PROJECTOR_ON_SMALL_SCREENS = """() => {
  if (window.innerWidth >= 1400 && window.innerHeight >= 800) return;
  const box = document.querySelector('#projector input');
  if (box && !box.checked) box.click();
}"""
# a plot drawn while its tab was hidden takes Plotly's default 700 px width, clipped in a narrower column:
# showing a tab tells Plotly to fit its plots to their boxes again
FIT_PLOTS_ON_TAB = """() => {
  document.addEventListener('click', (event) => {
    if (event.target.closest('button[role=tab]')) setTimeout(() => window.dispatchEvent(new Event('resize')), 60);
  });
}"""


@dataclass
class PresetRow:
    """The presets' row: a button per preset, the projector layout's switch, and Run and Stop for the
    projector layout (which hides the side panel)."""

    buttons: dict[str, gr.Button]
    projector: gr.Checkbox
    run: gr.Button
    stop: gr.Button


@dataclass
class Page:
    """The page's components: the session's runs, the side panel, the tabs and the presets' row."""

    runs: gr.State
    side: controls.Controls
    presets: PresetRow
    tabs: gr.Tabs
    race_tab: race.RaceTab
    inspect_tab: inspection.InspectTab
    inspect_buttons: dict
    compare_tab: compare.CompareTab
    replay_tab: replay.ReplayTab


def build() -> gr.Blocks:
    """The whole app, queued; `app.py` launches it."""
    presets = start_up()
    write_each_picture_once()  # a picture's file is never written again while a browser may be reading it
    with CheckedBlocks(title="specviz: speculative and Jacobi decoding, visible", delete_cache=CACHE_SWEEP) as demo:
        page = build_page(presets)
        wire(demo, page)
    # runs wait in one queue, one at a time per event, 32 waiting at most; the REST routes that would skip
    # the queue are closed even where Gradio opens them (off a Space)
    demo.queue(default_concurrency_limit=1, max_size=32, api_open=False)
    return demo


def start_up() -> list[Preset]:
    """What comes before the page: settings checked, models loaded, the prompt hint's encoder ready; returns
    the presets this deployment can run."""
    timings_wanted()  # a wrong SPECVIZ_TIMINGS is a message at start, not after a race
    load_at_startup()  # the first Run starts at once, and on ZeroGPU models are placed on CUDA before any GPU call
    offered = offered_models()
    if any(get_entry(name).known_prompts() and not get_entry(name).class_conditional for name in offered):
        from specviz.models.tiny.text import shared_text_encoder  # the prompt hint's encoder

        on_compute_thread(shared_text_encoder)
    return [preset for preset in PRESETS if preset.model in offered]  # a preset runs an offered model only


def build_page(presets: list[Preset]) -> Page:
    """The header, the presets' row, the side panel and the tabs."""
    runs = gr.State({})
    gr.Markdown(
        "# specviz\nSpeculative and Jacobi decoding for autoregressive image generation, made visible. "
        "Pick a method: it runs next to vanilla AR on the same prompt and seed, and every iteration is "
        f"recorded. Colours (colour-blind safe): {viz.swatches()}.",
        elem_id="specviz-header",
    )
    row = preset_row(presets)  # one press sets everything and races
    with gr.Row():
        with gr.Column(scale=1, min_width=300, elem_id="side-panel"):
            side = controls.build()
        with gr.Column(scale=3):
            with gr.Tabs() as tabs:
                race_tab = race.build()
                inspect_tab, inspect_buttons = inspection.build()
                compare_tab = compare.build(controls.methods_for(default_model()))
                replay_tab = replay.build()
            # what the tabs keep outside the tab bar: among the tabs, any component that is not a tab
            # (even a State) shifts Gradio's tab labels by one
            outside_tabs = (race_tab.activity, race_tab.press, inspect_tab.timer, inspect_tab.loaded)
            for outside in (*outside_tabs, compare_tab.comparing):
                outside.render()
    return Page(runs, side, row, tabs, race_tab, inspect_tab, inspect_buttons, compare_tab, replay_tab)


def preset_row(presets: list[Preset]) -> PresetRow:
    with gr.Row(elem_id="presets", equal_height=True, visible=bool(presets)):
        gr.Markdown("**Presets**: the papers' findings, live", elem_id="presets-title")
        # on a projector the side panel is hidden: Run and Stop for the settings it holds, here
        run = gr.Button("Run", variant="primary", size="sm", min_width=70, scale=0,
                        elem_id="projector-run", elem_classes="projector-only")  # fmt: skip
        stop = gr.Button("Stop", size="sm", min_width=70, scale=0, elem_id="projector-stop",
                         elem_classes="projector-only")  # fmt: skip
        buttons = {p.key: gr.Button(p.label, size="sm", min_width=100, elem_id=f"preset-{p.key}") for p in presets}
        projector = gr.Checkbox(False, label="Projector layout", elem_id="projector", container=False, scale=0)
    return PresetRow(buttons, projector, run, stop)


def wire(demo: gr.Blocks, page: Page) -> None:
    """Each tab's handlers, then what spans them: Run and the presets, Stop, and the page's own scripts."""
    side, race_tab, inspect_tab, compare_tab = page.side, page.race_tab, page.inspect_tab, page.compare_tab
    controls.wire(side, compare_tab.methods)
    refresh_after, contrast_runs, contrast_event = inspection.wire(
        inspect_tab, page.inspect_buttons, side, page.runs, page.presets.projector
    )
    racing = race.wire(race_tab, side, page.runs, inspect_tab.iteration, inspect_tab.loaded, page.replay_tab.downloads)
    races = wire_races(page, racing, refresh_after, contrast_runs)
    compare_event, measure_costs_after = compare.wire(compare_tab, side, page.runs)
    opened = race_tab.why.click(
        lambda: (gr.Tabs(selected="compare"), gr.Accordion(open=True)), None, [page.tabs, compare_tab.cost_panel]
    )
    measure_costs_after(opened)
    uploaded = replay.wire(page.replay_tab, side, page.runs, inspect_tab.iteration, inspect_tab.loaded)
    play_event, show_race_after = race.wire_play(race_tab, page.runs)
    show_race_after(uploaded)  # the Race tab shows an uploaded race at once; Play again races it
    wire_stop(page, cancels=[*races, compare_event, contrast_event, play_event])
    wire_scripts(demo, page)


def race_pressed(
    button: str, racing: activity.RaceActivity | None, comparing: bool | None, loading: str | None = None
) -> dict:
    """The answer to any press of Run or a preset, before its race holds the compute queue: the Race tab open,
    whichever tab was, a line saying the race starts (and what it waits for: `loading`, a model's first load),
    and the page's previous race ended (`compute.race_pressed`)."""
    press = compute.race_pressed(button)
    summary = activity.starting(racing, comparing, loading)
    return {"tabs": gr.Tabs(selected="race"), "summary": summary, "press": press}


def own_run_checked(side: controls.Controls, race_tab: race.RaceTab, comparing: gr.State) -> Callable[[dict], dict]:
    """Run's answer before its race: its settings checked (a refusal is the press's message, and no race
    follows it), no preset's story. A model not loaded yet is not loaded here: its prompt is checked, the rest
    by the race once it has loaded (a released model's first load held the press's answer for minutes)."""

    def own_run_shown(data: dict) -> dict:
        request = side.request(data)
        model = loaded_model(request.model)
        if model is None:
            check_prompt(request.prompt)
        else:
            request.check(model)
        loading = request.model if model is None else None
        return {"preset_note": "", **race_pressed("run", data[race_tab.activity], data[comparing], loading)}

    return own_run_shown


def preset_shown(key: str, racing: activity.RaceActivity | None, comparing: bool | None) -> dict:
    """A preset's answer before its race: the controls it sets (`controls.preset_controls`)."""
    return {**controls.preset_controls(key), **race_pressed(key, racing, comparing)}


def wire_races(page: Page, racing: tuple, refresh_after: Callable, contrast_runs: Callable) -> list[Dependency]:
    """Run (the side panel's and the projector layout's) and each preset, which sets the controls first
    (`controls.preset_controls`) and, where its finding is a contrast, adds that run; returns their events
    (Stop cancels them)."""
    racer, inputs, outputs, options = racing
    events = []
    own_race = racer()
    # what a press answers at once, in a queue of its own (not the compute queue; queued, a refusal is a message
    # on the page: unqueued, Gradio 6 drops it): the race on screen (pressed from Inspect, it ran unseen), a
    # line that it starts, and the page's previous race ended; then the race itself
    now = [page.race_tab.activity, page.compare_tab.comparing]
    pressed = {"tabs": page.tabs, "summary": page.race_tab.summary, "press": page.race_tab.press}
    own_shown = Outputs({"preset_note": page.race_tab.preset_note}, pressed)
    checked = user_errors(own_shown.set_by(own_run_checked(page.side, page.race_tab, page.compare_tab.comparing)))
    for run_button in (page.side.run_button, page.presets.run):
        shown_now = run_button.click(checked, inputs | set(now), own_shown.components)
        events.append(shown_now.success(own_race, inputs, outputs, **options))
    shown = Outputs(
        page.side.preset_outputs(page.compare_tab.methods, page.race_tab.preset_note, page.race_tab.speed), pressed
    )
    set_by_preset = shown.set_by(preset_shown)
    for key, button in page.presets.buttons.items():
        preset = PRESET_BY_KEY[key]
        raced = button.click(functools.partial(set_by_preset, key), now, shown.components).then(
            racer(preset.opens_on), inputs, outputs, **options
        )
        events.append(raced)
        if preset.contrast:  # the finding is a comparison of two runs in Inspect
            raced = raced.success(its_own_contrast(preset, contrast_runs), page.runs, page.runs, concurrency_id="gpu")
            events.append(raced)
            refresh_after(raced)
    return events


def its_own_contrast(preset: Preset, contrast_runs: Callable[[dict], dict]) -> Callable[[dict], dict]:
    """The preset's contrast run after its race, only where the page still holds that race's own runs, not yet
    contrasted, and pressed nothing since: a race a new press ended counts as finished (its chain goes on), and
    its contrast would otherwise run on the page's previous runs, or overwrite the new race's."""

    def contrast_of_its_own_race(state: dict | None) -> dict:
        trace = (state or {}).get("trace")
        ours = (preset.model, preset.method, preset.prompt, preset.seed)
        own = (
            trace is not None
            and "contrast" not in state
            and (trace.model, trace.method, trace.prompt, trace.seed) == ours
        )
        if not own or compute.last_pressed() not in (None, preset.key):
            return gr.skip()
        return contrast_runs(state)

    return contrast_of_its_own_race


def wire_stop(page: Page, cancels: list[Dependency]) -> None:
    """Stop (the side panel's and the projector layout's): `cancels` cancelled, and what they were doing said."""
    race_tab, compare_tab = page.race_tab, page.compare_tab
    outputs = Outputs(
        {"summary": race_tab.summary, "compare_note": compare_tab.note, "race_activity": race_tab.activity,
         "comparing": compare_tab.comparing, "timer": page.inspect_tab.timer}
    )  # fmt: skip

    def stop(*now) -> dict:
        """Cancel a race or a comparison and say so; stop playing back; a race pressed before it that has not
        begun (deferred behind the race it ended) never will."""
        compute.stop_pressed()
        return outputs.of({**activity.stopped(*now), "timer": gr.Timer(active=False)})

    now = [race_tab.activity, compare_tab.comparing, race_tab.summary]
    for stop_button in (page.side.stop_button, page.presets.stop):
        stop_button.click(stop, now, outputs.components, cancels=cancels)


def wire_scripts(demo: gr.Blocks, page: Page) -> None:
    """What the browser does alone: arrow keys, plots fitted to a shown tab, large type, dark mode, the
    projector layout (at once on a small screen); and the server told that the page opened in a browser."""
    demo.load(None, None, None, js=inspection.ARROW_KEYS)
    demo.load(None, None, None, js=FIT_PLOTS_ON_TAB)
    page.side.large.change(None, page.side.large, None, js=TOGGLE_LARGE)
    page.side.dark.change(None, page.side.dark, None, js=TOGGLE_DARK)
    page.presets.projector.change(None, page.presets.projector, None, js=TOGGLE_PROJECTOR)
    demo.load(None, None, None, js=PROJECTOR_ON_SMALL_SCREENS)
    demo.load(compute.page_opened, None, None, show_progress="hidden")  # a race's timing then waits for Inspect


def launch_options(demo: gr.Blocks) -> dict:
    """What `demo.launch` takes besides the address, as app.py and the tests launch it: the style sheet, errors
    without stack traces, the upload limit, no public monitoring dashboard (Gradio's printed its key into the
    log to anyone who asked), and `RequestGuard` in front of Gradio's routes."""
    guard = Middleware(
        RequestGuard, endpoints=lambda: len(demo.fns), files=MAX_REQUEST_FILES, upload_bytes=MAX_UPLOAD_BYTES
    )
    return {
        "css": CSS,
        "show_error": False,
        "max_file_size": MAX_UPLOAD_BYTES,
        "enable_monitoring": False,
        "app_kwargs": {"middleware": [guard]},
    }


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
