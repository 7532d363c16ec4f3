"""The Race tab: the chosen method and AR side by side, filling in live, with the method's window,
drafts and fates drawn on its picture, then a summary whose clocks come from undisturbed repeats."""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import gradio as gr
from gradio.events import Dependency

from specviz import metrics, viz
from specviz.core.catalogue import is_baseline
from specviz.core.settings import SettingsError
from specviz.core.timing import TIMING_BUDGET, timings_wanted
from specviz.decoding import RunStream
from specviz.measure.race import Race, needs_retiming, retimed
from specviz.models.protocol import ImageModel, decode_in_order
from specviz.trace import Trace
from specviz.ui.activity import RACING, STARTING, RaceActivity
from specviz.ui.compute import (
    OUT_OF_TIME,
    VIEWER_WORK,
    Deadline,
    Superseded,
    each_on_compute_thread,
    on_compute_thread,
    opened_in_a_browser,
    request_memory,
)
from specviz.ui.controls import Controls, RunRequest
from specviz.ui.errors import user_errors
from specviz.ui.handover import LOADS, opened_at
from specviz.ui.loading import decoder_for, get_model, gpu_seconds, gpu_work
from specviz.ui.outputs import Outputs
from specviz.ui.pictures import DISPLAY_SIZE, picture, show

# seconds between streamed UI updates during a race: the drawing (decode, PNG, browser) took the race to
# 1.7-2.1x the two runs' compute on 2 cores at 0.1 s, 1.32-1.74x at 0.2 s, 1.36-1.48x at 0.25 s
FRAME_INTERVAL = 0.25
SLOW_MOTION_PAUSE = 0.6  # seconds each pass of the method stays on screen in slow motion
PLAY_AGAIN_SECONDS = 120  # the longest a playback of a trace may last (a long one is played faster)
# the choices say it all: the radio sits without its label above the pictures
SPEEDS = [("race live", "live"), ("slow motion: a pause on every pass (the clocks count compute only)", "slow")]


COMPUTE_WORDS = " of compute"  # after a number of seconds on the compute clock
SECONDS_TITLE = {"wall": "seconds", "compute": "seconds of compute (CPU time of each run's own work)"}


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


def final_counter(trace: Trace, clock: str = "wall") -> str:
    """A finished run's counter, its seconds on `clock` (the verdict's: `metrics.verdict_clock`)."""
    nfe = metrics.summary(trace)["nfe"]
    seconds = metrics.clock_seconds(trace, clock)
    said = counter(trace.method, nfe, len(trace.tokens), len(trace.geometry.layout), seconds)
    return said + COMPUTE_WORDS if clock == "compute" else said


def race_summary(trace: Trace, ar: Trace, drawing_shared: bool = False, timing: int = 0) -> str:
    """The race's result in two lines: the headline ratios (the latency speedup with its spread where
    both runs were timed again), then passes, seconds and how they were timed. `drawing_shared`: the
    clocks are the race's own on a device where drawing competed with the model; `timing`: the undisturbed
    repeats planned, while they still run (the summary then starts with a line saying so)."""
    facts = metrics.summary(trace, ar)
    promise = viz.promise(trace.method, trace.lossless)
    if promise == "lossy":
        lossless = "**lossy**: its images follow a distribution that differs from AR's"
    elif promise != "lossless":  # close to exact: the catalogue's check measures the gap
        lossless = (
            f"**{promise}**: its images follow a distribution close to AR's, not exactly it "
            f"(`python -m specviz check-lossless --method {trace.method}` measures the gap)"
        )
    elif trace.tokens == ar.tokens:  # greedy decoding, or the same draws by chance
        lossless = "lossless: it samples exactly AR's distribution, and here made the very same image"
    else:
        lossless = (
            "lossless: it samples exactly AR's distribution, though not the same image, as the two spend their "
            "random numbers differently"
        )
    how = viz.timed_how(trace, ar)
    if how is not None:
        clock = "of compute" if metrics.verdict_clock(trace, ar) == "compute" else "on the wall clock"
        how = f"seconds {clock}; {how} (same seed, same tokens)"
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
    latency = "latency being timed" if timing else viz.run_verdict(trace, ar).sentence
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
            f"*Timing both runs again with nothing drawing: {rounds} of up to {timing} done: the clocks below are "
            "provisional.*\n\n"
        )
    clock = metrics.verdict_clock(trace, ar)
    unit = "s" + (COMPUTE_WORDS if clock == "compute" else "")
    return (
        f"{pending}{headline}\n"
        f"{trace.method} ({lossless}): {facts['nfe']} passes{tau}, {metrics.clock_seconds(trace, clock):.2f} {unit} · "
        f"AR: {ar.nfe} passes, {metrics.clock_seconds(ar, clock):.2f} {unit} · same prompt, seed and sampling; {how}."
    )


def disturbed_note(rounds: int) -> str:
    """Where viewers drew while the runs were timed again: how many rounds were timed once more."""
    if not rounds:
        return ""
    again = "a round was" if rounds == 1 else f"{rounds} rounds were"
    return f" ({again} timed once more: Inspect or an export drew during it and competed with the clocks.)"


def racing(method: str) -> str:
    """The summary while a race runs, in place of the previous run's."""
    return f"*Racing {method} against AR...*"


def race_bars(sides: list[tuple[str, int, float]], total: int, dark: bool = False, clock: str = "wall") -> str:
    """The race's NFE and clocks as bars that grow (HTML): passes on a fixed scale of `total` (AR's
    passes for the whole image), seconds on the scale of the longer clock so far; method then AR, in
    the colours of Inspect's race figure. `clock`: "compute" titles the seconds as compute time."""
    palette = viz.colors(dark)
    longest = max((seconds for _, _, seconds in sides), default=0.0) or 1.0
    rows = []
    for measure, value_of, scale, text in (
        ("model passes (NFE)", lambda nfe, seconds: nfe, total, lambda nfe, seconds: f"{nfe}"),
        (SECONDS_TITLE[clock], lambda nfe, seconds: seconds, longest, lambda nfe, seconds: f"{seconds:.2f} s"),
    ):
        rows.append(f'<div class="race-bars-title">{measure}</div>')
        for index, (method, nfe, seconds) in enumerate(sides):
            colour = palette["committed"] if is_baseline(method) else palette["accepted"]
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
    press: gr.State  # the page's last press of Run or a preset (`compute.race_pressed`): the race it started
    play_again: gr.Button
    why: gr.Button  # opens Compare's cost panel and measures


def build() -> RaceTab:
    with gr.Tab("Race", id="race"):
        # above the pictures, so that it is on the first screen of a 1280 x 720 projector, label hidden
        with gr.Row(equal_height=True):
            speed = gr.Radio(
                SPEEDS,
                value="live",
                label="Race speed",
                elem_id="race-speed",
                container=False,
            )
            # the last run, or an uploaded one, raced again from its trace: a GPU run shown in class
            play_again = gr.Button("Play again", size="sm", scale=0, min_width=110, elem_id="play-again")
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
                # no label and no buttons on the picture: Gradio lays them over the image's top rows, the first
                # to fill in (the whole run is saved from "Replay and export")
                progress = gr.Image(height=200, format="png", show_label=False, buttons=[], elem_id="race-map")
                progress_title = gr.Markdown(elem_id="race-map-title")
        summary = gr.Markdown(elem_id="race-summary")
        # the reason a latency speedup is not the step compression, one click away: Compare's cost panel, measured
        why = gr.Button(
            "Why is the latency speedup not the step compression? Measure what a pass costs here",
            size="sm",
            elem_id="why-latency",
        )
        preset_note = gr.Markdown(elem_id="preset-note")
    activity = gr.State(None, render=False)  # rendered by the page outside the tab bar (`layout`)
    press = gr.State(None, render=False)  # likewise
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
        press,
        play_again,
        why,
    )


def progress_view(run: Trace, when: str) -> dict:
    """The method's map so far beside the bars, and its title."""
    title, cells = viz.progress_map(run)
    shown_map = show(cells)
    shown_map.info["Description"] = f"{run.method}: map after {len(run.tokens)} tokens, {when}"
    return {"progress": shown_map, "progress_title": f"{run.method}: {title}"}


def contender_view(model: ImageModel | None, live: Trace, counter_text: str, when: str) -> dict:
    """The method's side after its newest pass: the picture with that pass's drafts drawn on it (without a
    model to decode, none), the counter with what the pass did, and the map so far."""
    newest = len(live.iterations) - 1
    view = {"method_counter": f"{counter_text}<br>{viz.pass_caption(live, newest)}", **progress_view(live, when)}
    if model is not None:
        description = f"{live.method}: {len(live.tokens)} tokens, {when}"
        guessed = metrics.drafted_tokens(live, newest)  # the window's guesses, drawn faded on their cells
        drafted = None if guessed is None else show(on_compute_thread(decode_in_order, model, guessed, None))
        image = picture(model, live.decodable, description, live.geometry.order)
        image = viz.pass_overlay(image, live, newest, dark=False, drafted=drafted)
        image.info["Description"] = description
        view["method_image"] = image
    return view


# a new race or playback first clears the pictures, counters, bars and map of the run shown before
CLEARED = {
    "method_image": None,
    "method_counter": "",
    "ar_image": None,
    "ar_counter": "",
    "bars": "",
    "progress": None,
    "progress_title": "",
}
NOTHING_TO_PLAY = "Nothing to play yet: press Run or a preset, or upload a trace under *Replay and export*."


def play_frames(runs: dict, slow: bool, animate: bool = True) -> Iterator[dict[str, object]]:
    """A finished or uploaded run played again as its race, from the trace alone (nothing is computed):
    the side behind on its recorded clock advances, at the pace the race had (each pass waits the time it
    took when it ran; in slow motion the method's passes pause instead); then the final frame and summary.
    `animate` False: the final frame at once (the Race tab after an upload)."""
    if not runs:
        raise SettingsError(NOTHING_TO_PLAY)
    trace, ar = runs["trace"], runs.get("ar")
    model = decoder_for(trace)
    sides = {"method": trace, "ar": ar} if ar is not None else {"method": trace}
    clocks = {name: metrics.clock_through(run) for name, run in sides.items()}
    at = dict.fromkeys(sides, -1)  # the iteration each side shows
    total = len(trace.geometry.layout)
    # an uploaded trace's clocks and length are its author's: a playback lasts PLAY_AGAIN_SECONDS at most, faster
    # than recorded where they would make it longer, so no trace holds the Play again button for hours
    recorded = sum(float(clock[-1]) for clock in clocks.values() if len(clock))
    pace = min(1.0, PLAY_AGAIN_SECONDS / recorded) if recorded > 0 else 1.0
    pause = min(SLOW_MOTION_PAUSE, PLAY_AGAIN_SECONDS / max(1, len(trace.iterations)))

    def now_of(name: str) -> float:
        return float(clocks[name][at[name]]) if at[name] >= 0 else 0.0

    def view(name: str) -> dict:
        run = metrics.trace_through(sides[name], at[name])
        count = counter(run.method, metrics.passes_through(sides[name], at[name]), len(run.tokens), total, run.seconds)
        if name == "method" and run.iterations:
            return contender_view(model, run, count, "played again")
        description = f"{run.method}: {len(run.tokens)} tokens, played again"
        image = None if model is None else picture(model, run.decodable, description, run.geometry.order)
        return {f"{name}_image": image, f"{name}_counter": count}

    def bars_now() -> str:
        shown = [(sides[n].method, metrics.passes_through(sides[n], at[n]), now_of(n)) for n in sides if at[n] >= 0]
        return race_bars(shown, total)

    versus = " against AR" if ar is not None else ""
    without = "" if ar is not None else "*This trace came without its AR run (`ar-trace.json`).*"
    yield {**CLEARED, "ar_counter": without, "summary": f"*Playing {trace.method}{versus} again from its trace...*"}
    started, last, sent = time.perf_counter(), 0.0, dict(at)
    while animate and (moving := [n for n, run in sides.items() if at[n] < len(run.iterations) - 1]):
        name = min(moving, key=now_of)  # as in the race: the side behind on its own clock moves
        at[name] += 1
        paced = slow and name == "method"
        if not slow:  # the recorded race's pace: both clocks, one device
            time.sleep(max(0.0, started + pace * sum(map(now_of, sides)) - time.perf_counter()))
        if paced or (not slow and time.perf_counter() - last > FRAME_INTERVAL):
            last = time.perf_counter()
            frame = {key: value for n in sides if sent[n] != at[n] for key, value in view(n).items()}
            sent = dict(at)
            yield {**frame, "bars": bars_now()}
            if paced:
                time.sleep(pause)
    at = {name: len(run.iterations) - 1 for name, run in sides.items()}
    final = {key: value for name in sides for key, value in view(name).items()}
    if model is not None:
        final.update({f"{name}_image": final_picture(model, run) for name, run in sides.items()})
    clock = "wall" if ar is None else metrics.verdict_clock(trace, ar)
    final.update({f"{name}_counter": final_counter(run, clock) for name, run in sides.items()})
    if ar is not None:
        summary = race_summary(trace, ar)
    else:
        summary = (
            f"### {trace.method}: {metrics.summary(trace)['nfe']} passes, {trace.seconds:.2f} s\n"
            "Upload its `ar-trace.json` beside it to see it race AR."
        )
    played = "*Played again from the recorded traces: each pass took the time it took when it ran.*"
    bars = bars_now() if ar is None else finished_bars(total, trace, ar)  # the clock its summary's verdict uses
    yield {**final, "bars": bars, "summary": f"{summary}\n\n{played}"}


def race_seconds(request: RunRequest, slow: bool, opens_on: str | None = None, press: float | None = None) -> int:
    """GPU time for a race: AR's pass per token, the method's at most one per token and a draft model's,
    and in slow motion the pause after each of the method's passes (`opens_on`, the race's other
    argument, costs nothing)."""
    tokens = get_model(request.model).geometry.seq_len
    return gpu_seconds(3 * tokens, tokens * SLOW_MOTION_PAUSE if slow else 0.0)


class LiveRace:
    """A race as it runs, as frames: each side's picture and counter where it moved since the last frame,
    and the bars of both."""

    def __init__(self, model: ImageModel, contest: Race):
        self.model, self.contest = model, contest
        self.total = contest.baseline.session.geometry.seq_len  # the bars' scale of passes: AR's for the image
        self._shown: dict[RunStream, tuple[int, bool]] = {}  # each side's tokens at its last frame, and if at work

    def frames(self, deadline: Deadline, slow: bool) -> Iterator[dict[str, object]]:
        """The race stepped to its end: a frame every FRAME_INTERVAL at most, and in slow motion after every
        pass of the method, held for SLOW_MOTION_PAUSE."""
        last = 0.0
        while True:
            deadline.check()  # between passes: a request past its budget, or whose visitor left, stops
            if (advanced := on_compute_thread(self.contest.step)) is None:
                return
            paced = slow and advanced is self.contest.contender  # slow motion: every pass of the method, for a while
            # AR's passes show at the live pace in slow motion too: once the method is done, AR ran on unseen
            # to its end (a walk saw it jump from 96 to 256 tokens)
            if paced or time.perf_counter() - last > FRAME_INTERVAL:
                last = time.perf_counter()
                frame = self.moved()
                if frame:  # an empty frame (nothing moved) is not an update Gradio accepts
                    yield frame
                    if paced:
                        time.sleep(SLOW_MOTION_PAUSE)

    def moved(self) -> dict:
        """The sides that moved since the last frame, and the bars; nothing where neither moved."""
        moved = {**self.side(self.contest.contender, "method"), **self.side(self.contest.baseline, "ar")}
        return {**moved, "bars": self.bars()} if moved else {}

    def side(self, stream: RunStream, name: str) -> dict:
        """One side's image and counter (`{name}_image`, `{name}_counter`), where it has moved since the last
        frame. The method's picture shows its newest pass at work until its image is complete, then clean while
        AR runs on (its last pass's outlines stood there until AR finished)."""
        at_work = stream is self.contest.contender and stream in self.contest.running
        if self._shown.get(stream) == (len(stream.tokens), at_work):
            return {}
        self._shown[stream] = (len(stream.tokens), at_work)
        if at_work and stream.iterations:  # its newest pass drawn on its picture
            return contender_view(self.model, stream.trace(), live_counter(stream), "live")
        description = f"{stream.method}: {len(stream.tokens)} tokens, live"
        image = picture(self.model, stream.decodable, description, stream.order)
        return {f"{name}_image": image, f"{name}_counter": live_counter(stream)}

    def bars(self) -> str:
        streams = (self.contest.contender, self.contest.baseline)
        return race_bars([(s.method, passes(s), s.elapsed) for s in streams], self.total)


def finished_bars(total: int, trace: Trace, ar: Trace) -> str:
    """The bars of a finished run and its AR run, passes on the scale of `total`, seconds on the clock of
    their verdict."""
    clock = metrics.verdict_clock(trace, ar)
    sides = [(t.method, metrics.summary(t)["nfe"], metrics.clock_seconds(t, clock)) for t in (trace, ar)]
    return race_bars(sides, total, clock=clock)


RACE_STOPPED = "*The race stopped: the message above says why. Nothing of it was kept.*"
# a race's last frame where the page pressed for another: Gradio shows an event's last frame once more as it ends,
# which would put this race's summary back over the press's line until the new race's first frame
SUPERSEDED = {"summary": STARTING, "activity": None}
# a race whose page pressed Stop while it waited to begin: Stop's line stays, and nothing else changes
STOPPED_BEFORE_START = {"activity": None}


def race_frames(
    request: RunRequest, slow: bool, opens_on: str | None, press: float | None = None
) -> Iterator[dict[str, object]]:
    """The race as frames of output values keyed by name (plain values: inside a GPU call they cross
    processes); Inspect opens on the runs at `opening_iteration(trace, opens_on)`. `press`: the page's press
    that started it (`compute.race_pressed`); a later press ends it, even one made while it waited its turn, and
    a Stop made while it waited means it never begins."""
    # the queue is held from here: the prefill, the race, its pauses and its timing; a new press on the page ends it
    deadline = Deadline(superseded_by_press=True, press=press)
    if deadline.superseded():  # pressed for another race while this one waited in the queue: it never starts
        yield SUPERSEDED
        return
    if deadline.stopped():  # Stop pressed while it waited (its press deferred behind the race it ended, or queued)
        yield STOPPED_BEFORE_START
        return
    # the previous run's images, counters, summary and downloads go at once, before the model is loaded or the
    # compute thread is free: they describe another run, and the page must show that its press was taken
    yield {**CLEARED, "summary": racing(request.method), "activity": RACING, "downloads": None}
    try:
        chosen = get_model(request.model)
        contest = on_compute_thread(
            Race,
            chosen,
            request.method,
            request.prompt,
            request.seed,
            request.sampling,
            request.params(),
            request_memory(chosen),
        )
        live = LiveRace(chosen, contest)
        yield from live.frames(deadline, slow)
        trace, ar = contest.traces()
    except Superseded:  # the page's new race clears the screen as it starts
        yield SUPERSEDED
        return
    except Exception:  # the page shows the error's message; the summary must not go on saying it races
        yield {"summary": RACE_STOPPED, "activity": None}
        raise
    # on a CPU the live clocks also paid for drawing the race: both are timed again undisturbed, in turns,
    # while Inspect already has the runs (their tokens and passes are final; only the clocks are not)
    wanted = timings_wanted() if needs_retiming(chosen) else 0
    handed = VIEWER_WORK.count  # Inspect draws the runs once the browser has them: the timing waits for it
    yield {
        "method_image": final_picture(chosen, trace),
        "ar_image": final_picture(chosen, ar),
        "method_counter": final_counter(trace),
        "ar_counter": final_counter(ar),
        "summary": race_summary(trace, ar, drawing_shared=wanted > 0, timing=wanted),
        "bars": finished_bars(live.total, trace, ar),
        **progress_view(trace, "final"),
        "runs": {"trace": trace, "ar": ar},
        "iteration": opened_at(trace, opens_on),
        "loaded": next(LOADS),
        "activity": RaceActivity("retiming") if wanted else None,
    }
    if wanted:
        yield from retiming_frames(chosen, (trace, ar), wanted, deadline, live.total, handed)


def retiming_frames(
    model: ImageModel, runs: tuple[Trace, Trace], wanted: int, deadline: Deadline, total: int, handed: int
) -> Iterator[dict[str, object]]:
    """A finished race's two runs timed again undisturbed (`wanted` rounds at most): their counters, summary
    and bars after each round, then the final clocks handed to Inspect; nothing more once the visitor left.
    `handed`: the viewers' drawing count (`VIEWER_WORK.count`) when the runs were handed to Inspect."""
    trace, ar = runs
    note = ""
    # Inspect draws the runs it was just given before anything is timed (in a browser: a client without one asks
    # for no views, and waited HANDOVER_SECONDS for them before every race's timing)
    VIEWER_WORK.settle(handed if opened_in_a_browser() else None)
    # the repeats give way to Inspect after every pass, and a round it drew during is timed again
    rounds = retimed(model, [trace, ar], wanted, TIMING_BUDGET, interruptions=VIEWER_WORK)
    for timed in each_on_compute_thread(rounds):
        if deadline.superseded():  # the page pressed for another race, which waits for this one to end
            yield SUPERSEDED
            return
        if not deadline.wanted():  # the visitor left: nobody reads the clocks
            return
        if deadline.left < 0:  # the request's time is up: the clocks of the rounds done stand
            note += OUT_OF_TIME
            break
        if timed is None:  # a pass done: Inspect's pictures may take the compute thread now
            continue
        if timed.abandoned:  # a repeat drew other tokens: its clock would time another computation
            note = " Timing again was abandoned: a repeat drew other tokens, so its clock would time another run."
            break
        trace, ar = timed.traces
        note = disturbed_note(timed.disturbed)
        yield {
            "method_counter": final_counter(trace, metrics.verdict_clock(trace, ar)),
            "ar_counter": final_counter(ar, metrics.verdict_clock(trace, ar)),
            "summary": race_summary(trace, ar, drawing_shared=True, timing=wanted) + note,
            "bars": finished_bars(total, trace, ar),
            "activity": RaceActivity("retiming", timed.done),
        }
    # Inspect's race panel takes the final clocks; the iteration a viewer chose stays
    yield {
        "summary": race_summary(trace, ar, drawing_shared=True) + note,
        "runs": {"trace": trace, "ar": ar},
        "loaded": next(LOADS),
        "activity": None,
    }


def wire(tab: RaceTab, controls: Controls, runs: gr.State, iteration: gr.Slider, loaded: gr.Number, downloads: gr.File):
    """The race: a maker of its handler (`racer(opens_on)`, one for Run and one for each preset), with its
    inputs, outputs and options."""
    outputs = Outputs(
        {"method_image": tab.method_image, "method_counter": tab.method_counter, "ar_image": tab.ar_image,
         "ar_counter": tab.ar_counter, "summary": tab.summary, "runs": runs, "iteration": iteration,
         "downloads": downloads, "bars": tab.bars, "progress": tab.progress, "progress_title": tab.progress_title,
         "activity": tab.activity, "loaded": loaded}
    )  # fmt: skip
    # entered as GPU work where the model sits on a GPU (decorated here, when the page is built)
    frames = gpu_work(model=lambda request, *others: request.model, duration=race_seconds)(user_errors(race_frames))

    def racer(opens_on: str | None = None) -> Callable[[dict], Iterator[dict]]:
        """The handler of Run (`opens_on` None) or of a preset (its `opens_on`)."""

        @user_errors
        @outputs.set_by
        def race(data: dict) -> Iterator[dict]:
            request = controls.request(data)
            try:  # refused here, before any work or GPU slot (a model not loaded yet loads here, first)
                request.check(get_model(request.model))
            except Exception:  # the page shows the message; the summary must not go on saying the race starts
                yield {"summary": RACE_STOPPED, "activity": None}
                raise
            yield from frames(request, data[tab.speed] == "slow", opens_on, data[tab.press])

        return race

    inputs = controls.run_inputs | {tab.speed, tab.press}
    options = {
        "concurrency_limit": 1,
        "concurrency_id": "gpu",
        # pressed again while its race runs (the same preset, Run twice), the press ends that race and the
        # page runs the new one after it (Gradio's default, "once", dropped the new one: nothing restarted)
        "trigger_mode": "always_last",
        "show_progress": "hidden",  # the images and counters are the progress; a spinner only costs CPU
    }
    return racer, inputs, outputs.components, options


def final_picture(model, trace: Trace):
    """A finished run's displayed image."""
    return picture(model, trace.decodable, f"{trace.method}: {trace.prompt!r}, seed {trace.seed}", trace.geometry.order)


def wire_play(tab: RaceTab, runs: gr.State) -> tuple[Dependency, Callable[[Dependency], Dependency]]:
    """Play again: the run in `runs` raced again from its traces. Returns the button's event (Stop cancels
    it) and what chains the finished race's view after an event that sets `runs` (an upload)."""
    names = ["method_image", "method_counter", "ar_image", "ar_counter", "summary", "bars", "progress"]
    names += ["progress_title"]
    outputs = Outputs({name: getattr(tab, name) for name in names})

    @user_errors
    @VIEWER_WORK.drawing  # it draws on the compute thread: a timing round it overlaps is timed again
    @outputs.set_by
    def play(state: dict, speed: str) -> Iterator[dict]:
        yield from play_frames(state, speed == "slow")

    @user_errors
    @outputs.set_by
    def played(state: dict) -> Iterator[dict]:
        if state:  # an upload that was refused leaves the race as it was
            yield from play_frames(state, slow=False, animate=False)

    event = tab.play_again.click(play, [runs, tab.speed], outputs.components, show_progress="hidden")

    def show_after(loaded: Dependency) -> Dependency:
        return loaded.then(played, runs, outputs.components, show_progress="hidden")

    return event, show_after
