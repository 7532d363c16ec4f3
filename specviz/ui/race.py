"""The Race tab: the chosen method and AR side by side, filling in live, with the method's window,
drafts and fates drawn on its picture, then a summary whose clocks come from undisturbed repeats."""

from __future__ import annotations

import dataclasses
import html
import time
from collections.abc import Iterator
from dataclasses import dataclass

import gradio as gr

from specviz import metrics, viz
from specviz.decoding import RunStream
from specviz.decoding.race import TIMING_BUDGET, Race, needs_retiming, retimed, timings_wanted
from specviz.models.protocol import decode_in_order
from specviz.trace import Trace
from specviz.ui.activity import RACING, RaceActivity
from specviz.ui.controls import Controls, RunRequest
from specviz.ui.service import (
    DISPLAY_SIZE,
    decodable,
    each_on_compute_thread,
    get_model,
    gpu_seconds,
    gpu_work,
    on_compute_thread,
    opened_at,
    picture,
    show,
    user_errors,
)

# seconds between streamed UI updates during a race: the drawing (decode, PNG, browser) took the race to
# 1.7-2.1x the two runs' compute on 2 cores at 0.1 s, 1.32-1.74x at 0.2 s, 1.36-1.48x at 0.25 s
FRAME_INTERVAL = 0.25
SLOW_MOTION_PAUSE = 0.6  # seconds each pass of the method stays on screen in slow motion
# the choices say it all: the radio sits without its label above the pictures
SPEEDS = [("race live", "live"), ("slow motion: a pause on every pass (the clocks count compute only)", "slow")]


def counter(method: str, nfe: int, tokens: int, total: int, seconds: float) -> str:
    return f"**{method}** · NFE {nfe} · {tokens}/{total} tokens · {seconds:.2f} s"


def passes(stream: RunStream) -> int:
    """The passes so far of the model that draws the stream's tokens (the draft's for a draft alone)."""
    if metrics.only_the_draft_drew(stream.iterations):
        return stream.session.draft.nfe
    return stream.session.nfe


def live_counter(stream: RunStream) -> str:
    total = stream.session.geometry.seq_len
    return counter(stream.method, passes(stream), len(stream.tokens), total, stream.elapsed)


def final_counter(trace: Trace) -> str:
    nfe = metrics.summary(trace)["nfe"]
    return counter(trace.method, nfe, len(trace.tokens), len(trace.geometry.layout), trace.seconds)


def race_summary(trace: Trace, ar: Trace, drawing_shared: bool = False, timing: int = 0) -> str:
    """The race's result in two lines: the headline ratios (the latency speedup with its spread where
    both runs were timed again), then passes, seconds and how they were timed. `drawing_shared`: the
    clocks are the race's own on a device where drawing competed with the model; `timing`: the undisturbed
    repeats planned, while they still run (the summary then starts with a line saying so)."""
    facts = metrics.summary(trace, ar)
    if not trace.lossless:
        lossless = "**lossy**: its images follow a distribution that differs from AR's"
    elif trace.tokens == ar.tokens:  # greedy decoding, or the same draws by chance
        lossless = "lossless: it samples exactly AR's distribution, and here made the very same image"
    else:
        lossless = (
            "lossless: it samples exactly AR's distribution, though not the same image, as the two spend their "
            "random numbers differently"
        )
    spread = metrics.timed_speedup(trace, ar)
    if spread is not None:
        how = (
            f"seconds: the median of {spread.repeats} runs of each with nothing drawing, AR and "
            f"{trace.method} in turns (same seed, same tokens)"
        )
    elif drawing_shared:
        how = "seconds: the race's own clocks, which also paid for drawing it"
    else:
        how = "each side's clock counts only its own compute (the two runs are interleaved on one device)"
    tau = f", mean tau {metrics.per_tree(trace)['tau'].mean():.2f} per tree" if metrics.has_trees(trace) else ""
    stalled = metrics.stalls(trace)
    if stalled:  # where the passes went: runs of passes that accepted nothing
        longest = max(length for _, length in stalled)
        count = "a stall" if len(stalled) == 1 else f"{len(stalled)} stalls"
        tau += f", {count} (longest {longest} passes accepting nothing)"
    if trace.continuous:
        alpha = metrics.draft_acceptance(trace.iterations)
        rate = "" if alpha is None else f", {alpha:.0%} of drafts accepted"
        tau = f" of the target and {trace.draft_nfe} of the draft{rate}"  # each prefill counted, as the bars do
    # the stable result first (passes are the same on every press); latency only once timed undisturbed,
    # and "about the same" where its repeats disagree on the side
    latency = "latency being timed" if timing else viz.latency_verdict(facts["latency_speedup"], spread)
    headline = (
        f"### {trace.method}: {viz.ratio_text(facts['step_compression'])} step compression "
        f"({facts['nfe']} passes against AR's {ar.nfe}), {latency}"
    )
    if metrics.draft_alone(trace):  # another model, not a decoding of the target: its time is CSpD's cost ratio
        c = facts["cost_ratio"]
        headline = f"### {trace.method}: the draft model alone, {c:.2f}x the target's AR time (CSpD's cost ratio c)"
        lossless = "**lossy**: the draft's own images, never verified by the target"
        tau = " of the draft"
    pending = ""
    if timing:
        rounds = len(trace.timings or ())
        pending = (
            f"*Timing both runs again with nothing drawing: {rounds} of {timing} done: the clocks below are "
            "provisional.*\n\n"
        )
    return (
        f"{pending}{headline}\n"
        f"{trace.method} ({lossless}): {facts['nfe']} passes{tau}, {trace.seconds:.2f} s · "
        f"AR: {ar.nfe} passes, {ar.seconds:.2f} s · same prompt, seed and sampling; {how}."
    )


def racing(method: str) -> str:
    """The summary while a race runs, in place of the previous run's."""
    return f"*Racing {method} against AR...*"


def race_bars(sides: list[tuple[str, int, float]], total: int, dark: bool = False) -> str:
    """The race's NFE and clocks as bars that grow (HTML): passes on a fixed scale of `total` (AR's
    passes for the whole image), seconds on the scale of the longer clock so far; method then AR, in
    the colours of Inspect's race figure."""
    palette = viz.colors(dark)
    longest = max((seconds for _, _, seconds in sides), default=0.0) or 1.0
    rows = []
    for measure, value_of, scale, text in (
        ("model passes (NFE)", lambda nfe, seconds: nfe, total, lambda nfe, seconds: f"{nfe}"),
        ("seconds", lambda nfe, seconds: seconds, longest, lambda nfe, seconds: f"{seconds:.2f} s"),
    ):
        rows.append(f'<div class="race-bars-title">{measure}</div>')
        for index, (method, nfe, seconds) in enumerate(sides):
            colour = palette["committed"] if method == "ar" else palette["accepted"]
            width = min(100.0, 100.0 * value_of(nfe, seconds) / scale)
            rows.append(
                f'<div class="race-bar"><span class="race-bar-name">{html.escape(method)}</span>'
                f'<span class="race-bar-track"><span class="race-bar-fill" data-side="{index}" '
                f'style="width:{width:.1f}%;background:{colour}"></span></span>'
                f'<span class="race-bar-value">{text(nfe, seconds)}</span></div>'
            )
    return '<div class="race-bars">' + "".join(rows) + "</div>"


@dataclass
class RaceTab:
    method_image: gr.Image
    method_counter: gr.Markdown
    ar_image: gr.Image
    ar_counter: gr.Markdown
    summary: gr.Markdown
    preset_note: gr.Markdown  # what the pressed preset shows
    speed: gr.Radio
    bars: gr.HTML  # NFE and clocks of both sides, growing
    progress: gr.Image  # the method's acceptance map (trees: depth map) so far
    progress_title: gr.Markdown
    activity: gr.State  # a RaceActivity while a race runs (Stop reads it), else None


def build() -> RaceTab:
    with gr.Tab("Race"):
        # above the pictures, so that it is on the first screen of a 1280 x 720 projector, label hidden
        speed = gr.Radio(
            SPEEDS,
            value="live",
            label="Race speed",
            elem_id="race-speed",
            container=False,
        )
        with gr.Row():
            with gr.Column():
                method_image = gr.Image(
                    label="Method", height=DISPLAY_SIZE, format="png", elem_id="method-image", elem_classes=["picture"]
                )
                method_counter = gr.Markdown(elem_id="method-counter")
            with gr.Column():
                ar_image = gr.Image(
                    label="Vanilla AR", height=DISPLAY_SIZE, format="png", elem_id="ar-image", elem_classes=["picture"]
                )
                ar_counter = gr.Markdown(elem_id="ar-counter")
        with gr.Row(equal_height=False):
            bars = gr.HTML(elem_id="race-bars")
            with gr.Column(scale=0, min_width=220, elem_id="race-map-column"):
                # no label on the picture: Gradio lays it over the image's top rows, the first to fill in
                progress = gr.Image(height=200, format="png", show_label=False, elem_id="race-map")
                progress_title = gr.Markdown(elem_id="race-map-title")
        summary = gr.Markdown(elem_id="race-summary")
        preset_note = gr.Markdown(elem_id="preset-note")
    activity = gr.State(None)
    return RaceTab(
        method_image,
        method_counter,
        ar_image,
        ar_counter,
        summary,
        preset_note,
        speed,
        bars,
        progress,
        progress_title,
        activity,
    )


def race_seconds(request: RunRequest, slow: bool) -> int:
    """GPU time for a race: AR's pass per token, the method's at most one per token and a draft model's,
    and in slow motion the pause after each of the method's passes."""
    tokens = get_model(request.model).geometry.seq_len
    return gpu_seconds(3 * tokens, tokens * SLOW_MOTION_PAUSE if slow else 0.0)


def wire(tab: RaceTab, controls: Controls, runs: gr.State, iteration: gr.Slider, downloads: gr.File):
    """The race handler; returns it with its inputs, outputs and options, for Run and the presets."""
    outputs = {field.name: getattr(tab, field.name) for field in dataclasses.fields(tab)}
    outputs.update(runs=runs, iteration=iteration, downloads=downloads)

    @gpu_work(model=lambda request, slow: request.model, duration=race_seconds)
    @user_errors
    def race_frames(request: RunRequest, slow: bool) -> Iterator[dict[str, object]]:
        """The race as frames of output values keyed by name (plain values: inside a GPU call they cross
        processes)."""
        chosen = get_model(request.model)
        contest = on_compute_thread(
            Race, chosen, request.method, request.prompt, request.seed, request.sampling, request.params()
        )
        shown: dict[RunStream, int] = {}
        # the previous run's images, counters, summary and downloads go at once: they describe another run
        yield {
            "method_image": None,
            "method_counter": "",
            "ar_image": None,
            "ar_counter": "",
            "summary": racing(request.method),
            "activity": RACING,
            "downloads": None,
            "bars": "",
            "progress": None,
            "progress_title": "",
        }

        def side(stream: RunStream, image: str, count: str) -> dict:
            """One side's image and counter, where it has moved since the last frame."""
            if shown.get(stream) == len(stream.tokens):
                return {}
            shown[stream] = len(stream.tokens)
            description = f"{stream.method}: {len(stream.tokens)} tokens, live"
            picture_now = picture(chosen, stream.decodable, description, stream.order)
            if stream is not contest.contender or not stream.iterations:
                return {image: picture_now, count: live_counter(stream)}
            live = stream.trace()  # the last pass's drafts on the picture, and the map so far beside the bars
            newest = len(stream.iterations) - 1
            guessed = metrics.drafted_tokens(live, newest)  # the window's guesses, drawn faded on their cells
            drafted = None if guessed is None else show(on_compute_thread(decode_in_order, chosen, guessed, None))
            picture_now = viz.pass_overlay(picture_now, live, newest, dark=False, drafted=drafted)
            picture_now.info["Description"] = description
            caption = f"{live_counter(stream)}<br>{viz.pass_caption(live, newest)}"  # what the newest pass did
            return {image: picture_now, count: caption, **progress(live, "live")}

        total = contest.baseline.session.geometry.seq_len

        def progress(run: Trace, when: str) -> dict:
            title, cells = viz.progress_map(run)
            shown_map = show(cells)
            shown_map.info["Description"] = f"{run.method}: map after {len(run.tokens)} tokens, {when}"
            return {"progress": shown_map, "progress_title": f"{run.method}: {title}"}

        def bars(*done: Trace) -> str:
            return race_bars([(t.method, metrics.summary(t)["nfe"], t.seconds) for t in done], total)

        def live_bars() -> str:
            streams = (contest.contender, contest.baseline)
            return race_bars([(s.method, passes(s), s.elapsed) for s in streams], total)

        def both() -> dict:
            moved = {
                **side(contest.contender, "method_image", "method_counter"),
                **side(contest.baseline, "ar_image", "ar_counter"),
            }
            return {**moved, "bars": live_bars()} if moved else {}

        last = 0.0
        while (advanced := on_compute_thread(contest.step)) is not None:
            paced = slow and advanced is contest.contender  # slow motion: every pass of the method, for a while
            if paced or (not slow and time.perf_counter() - last > FRAME_INTERVAL):
                last = time.perf_counter()
                frame = both()
                if frame:  # an empty frame (nothing moved) is not an update Gradio accepts
                    yield frame
                    if paced:
                        time.sleep(SLOW_MOTION_PAUSE)
        trace, ar = contest.traces()
        # on a CPU the live clocks also paid for drawing the race: both are timed again undisturbed, in turns
        wanted = timings_wanted() if needs_retiming(chosen) else 0
        finished = {
            "method_image": final_picture(chosen, trace),
            "ar_image": final_picture(chosen, ar),
            "method_counter": final_counter(trace),
            "ar_counter": final_counter(ar),
            "summary": race_summary(trace, ar, drawing_shared=wanted > 0, timing=wanted),
            "bars": bars(trace, ar),
            **progress(trace, "final"),
        }
        if not wanted:
            yield {**finished, "runs": {"trace": trace, "ar": ar}, "iteration": opened_at(trace), "activity": None}
            return
        # Inspect takes the runs once their clocks are final: its views are drawn after the race, whole
        yield {**finished, "activity": RaceActivity("retiming")}
        note = ""
        for timed in each_on_compute_thread(retimed(chosen, [trace, ar], wanted, TIMING_BUDGET)):
            trace, ar = timed.traces
            if timed.abandoned:  # a repeat drew other tokens: its clock would time another computation
                note = " Timing again was abandoned: a repeat drew other tokens, so its clock would time another run."
                break
            yield {
                "method_counter": final_counter(trace),
                "ar_counter": final_counter(ar),
                "summary": race_summary(trace, ar, drawing_shared=True, timing=wanted),
                "bars": bars(trace, ar),
                "activity": RaceActivity("retiming", timed.done),
            }
        yield {
            "summary": race_summary(trace, ar, drawing_shared=True) + note,
            "runs": {"trace": trace, "ar": ar},
            "iteration": opened_at(trace),
            "activity": None,
        }

    @user_errors
    def race(data: dict) -> Iterator[dict]:
        request = controls.request(data)
        request.check(get_model(request.model))  # refused here, before any work or GPU slot
        for frame in race_frames(request, data[tab.speed] == "slow"):
            yield {outputs[name]: value for name, value in frame.items()}

    inputs = controls.run_inputs | {tab.speed}
    options = {
        "concurrency_limit": 1,
        "concurrency_id": "gpu",
        "show_progress": "hidden",  # the images and counters are the progress; a spinner only costs CPU
    }
    shown = ["method_image", "method_counter", "ar_image", "ar_counter", "summary", "runs", "iteration"]
    shown += ["downloads", "bars", "progress", "progress_title", "activity"]
    return race, inputs, [outputs[name] for name in shown], options


def final_picture(model, trace: Trace):
    """A finished run's displayed image."""
    return picture(
        model, decodable(trace), f"{trace.method}: {trace.prompt!r}, seed {trace.seed}", trace.geometry.order
    )
