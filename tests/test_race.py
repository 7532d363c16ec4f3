"""The race scheduler and its clocks (specviz.measure.race), the `race` command, the speedup's spread,
the nearest known caption for free text, and a replayed race's pair of traces."""

import re
import threading

import numpy as np
import pytest

import specviz.measure.race as race
from specviz.cli import main
from specviz.core.inputs import InputError
from specviz.core.settings import SettingsError
from specviz.core.timing import timings_wanted
from specviz.decoding import run
from specviz.metrics import Speedup, timed_speedup
from specviz.trace import Trace, TraceError
from specviz.viz.narration import spread_text


@pytest.fixture(scope="module")
def short_run(tiny):
    """A run of few passes (SJD at window 32) for the tests of timing again: what they check is how rounds are
    kept, abandoned and repeated, whatever the run; AR's 256 passes would only make each round longer."""
    return run(tiny, "sjd", "sun", 0, params={"window": 32})


def test_a_race_draws_exactly_the_two_runs_it_races(tiny):
    """Interleaving changes nothing of either run: each side's tokens and passes are those of its own run,
    and the side advanced is always the one behind on its own clock."""
    contest = race.Race(tiny, "sjd", "red apple", 2, params={"window": 8})
    while contest.running:
        behind = min(contest.running, key=lambda stream: stream.elapsed)
        assert contest.step() is behind
    trace, ar = contest.traces()
    alone = run(tiny, "sjd", "red apple", 2, params={"window": 8})
    assert trace.tokens == alone.tokens and trace.nfe == alone.nfe
    assert ar.tokens == run(tiny, "ar", "red apple", 2).tokens and ar.nfe == 256
    assert contest.finished and contest.step() is None


def test_timing_again_reports_each_round_and_refuses_a_run_that_changed(tiny, short_run, monkeypatch):
    trace = short_run
    rounds = list(race.retimed(tiny, [trace], repeats=3))
    assert [len(r.traces[0].timings) for r in rounds] == [1, 2, 3]  # the clocks so far after each round
    assert [r.done for r in rounds] == [1, 2, 3] and not any(r.abandoned for r in rounds)
    timed = rounds[-1].traces[0]
    assert timed.seconds == sorted(timed.timings)[1]  # the median of the three repeats
    assert timed.tokens == trace.tokens and trace.timings is None  # the original is left as it was

    def other_tokens(model, t):  # a repeat that does not reproduce its run times another computation
        yield t.model_copy(update={"tokens": [0] * len(t.tokens)})

    monkeypatch.setattr(race, "repeat_passes", other_tokens)
    (abandoned,) = race.retimed(tiny, [trace], repeats=3)
    assert abandoned.abandoned and abandoned.done == 0 and abandoned.traces == [trace]


def test_timing_stops_after_two_rounds_once_its_budget_is_spent(tiny, short_run):
    assert len(list(race.retimed(tiny, [short_run], repeats=5, budget=0.0))) == 2  # a spread needs two


def test_timing_gives_way_after_every_pass_and_times_a_disturbed_round_again(tiny, short_run):
    """With a count of the viewers' drawing, the repeats yield after every pass (the app's Inspect may then
    use the compute thread) and a round during which the count moved is not kept: it is timed again."""
    trace = short_run
    drawn = [0]
    items = []
    for item in race.retimed(tiny, [trace], repeats=2, interruptions=lambda: drawn[0]):
        items.append(item)
        if len(items) == 3:  # a viewer steps Inspect during the first round
            drawn[0] += 1
    rounds = [item for item in items if item is not None]
    assert items.count(None) == 3 * len(trace.iterations)  # a pause after every pass of three repeats
    assert [r.done for r in rounds] == [1, 2] and [r.disturbed for r in rounds] == [1, 1]
    assert len(rounds[-1].traces[0].timings) == 2  # the disturbed round's clock is not among them
    never_quiet = race.retimed(tiny, [trace], repeats=2, budget=0.0, interruptions=lambda: drawn[0])
    assert list(never_quiet) == []  # no time left and no quiet round: nothing timed, the race's clocks stay


def test_a_round_timed_inside_a_playback_sees_the_viewers_drawing(tiny, short_run):
    """Play again draws frames on the compute thread for as long as it plays: a round timed wholly inside it
    (no drawing started or ended meanwhile) is disturbed too, and timed again once the playback ends."""
    from specviz.ui.compute import ViewerWork

    work = ViewerWork()

    @work.drawing
    def playback():
        yield "first frame"
        yield "last frame"

    frames = playback()
    next(frames)  # playing: every look at the count sees a move
    assert work() != work()
    list(frames)  # over: the count is still
    assert work() == work()
    trace = short_run
    playing = playback()
    next(playing)
    rounds = [item for item in race.retimed(tiny, [trace], repeats=2, budget=0.01, interruptions=work) if item]
    assert rounds == []  # its one round overlapped the playback: not kept, and the race's own clocks stay
    list(playing)
    rounds = [item for item in race.retimed(tiny, [trace], repeats=2, interruptions=work) if item]
    assert [r.done for r in rounds] == [1, 2] and rounds[-1].disturbed == 0


@pytest.mark.parametrize("value, ok", [("2", True), ("20", True), ("0", False), ("x", False), ("21", False)])
def test_the_deployment_chooses_how_often_runs_are_timed(monkeypatch, value, ok):
    monkeypatch.setenv("SPECVIZ_TIMINGS", value)
    if ok:
        assert timings_wanted() == int(value)
    else:
        with pytest.raises(InputError, match="SPECVIZ_TIMINGS must be a whole number from 1 to 20"):
            timings_wanted()


def test_the_speedup_spread_pairs_repeats_and_reads_as_people_say_it(short_run):
    trace = short_run
    method = trace.model_copy(update={"timings": [1.0, 2.0, 1.0]})
    ar = trace.model_copy(update={"method": "ar", "timings": [2.0, 2.0, 3.0]})
    assert timed_speedup(method, ar) == Speedup(2.0, 1.0, 3.0, 3)  # ratios 2, 1, 3 paired by repeat
    assert timed_speedup(method, trace) is None  # AR was not timed again: no spread to claim
    assert spread_text(Speedup(1.7, 1.6, 1.8, 3)) == "1.60-1.80x over 3 timings"
    assert spread_text(Speedup(0.8, 0.75, 0.8, 2)) == "1.25-1.33x slower over 2 timings"
    assert spread_text(Speedup(1.0, 0.95, 1.1, 3)) == "from 1.05x slower to 1.10x faster over 3 timings"
    assert Trace.model_validate_json(method.model_dump_json()).timings == [1.0, 2.0, 1.0]  # saved with the trace


def test_the_race_command_prints_passes_and_the_speedup_with_its_spread(capsys):
    assert main(["race", "--method", "sjd", "--prompt", "sun", "--window", "8", "--repeats", "2"]) == 0
    out = capsys.readouterr().out
    assert "median of 2 undisturbed runs of each, in turns, on compute time" in out  # the verdict's clock
    assert re.search(r"\| sjd \| \d+ \| 256 \| [\d.]+x \| [\d.]+ \| [\d.]+-[\d.]+ \|", out)
    assert re.search(r"\| ar \| 256 \| 256 \| 1.00x \|", out)
    verdict = r"(about the same latency as AR|[\d.]+x (latency speedup over AR|slower than AR))"
    assert re.search(rf"latency: {verdict} \(.* over 2 timings\)", out)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--method", "ar"], "race a method against AR"),
        (["--repeats", "-1"], "--repeats must be from 0 to 20"),
        (["--window", "0"], "window"),
    ],
)
def test_the_race_command_refuses_bad_input(capsys, arguments, message):
    assert main(["race", *arguments]) == 2
    assert message in capsys.readouterr().err


def test_free_text_is_offered_the_nearest_name_the_model_knows():
    from specviz.ui.controls import prompt_hint

    line, nearest = prompt_hint("tiny", "a slice of pizza")
    assert nearest == "pizza" and "*pizza* (0." in line and "was not trained on this text" in line
    assert prompt_hint("tiny", "Red Apple") == ("", None)  # a name it knows, in any case
    assert prompt_hint("tiny", "  ") == ("", None)
    assert prompt_hint("emu3", "a slice of pizza") == ("", None)  # no list of names for a hub model


def test_a_replayed_race_pairs_the_method_with_its_ar_run(tiny):
    from specviz.ui.replay import replayed

    trace, ar = run(tiny, "sjd", "sun", 1), run(tiny, "ar", "sun", 1)
    assert replayed([ar, trace]) == {"trace": trace, "ar": ar}  # in either order
    assert replayed([trace]) == {"trace": trace}
    with pytest.raises(TraceError, match="not of the same model, prompt, seed"):
        replayed([trace, run(tiny, "ar", "sun", 2)])
    with pytest.raises(TraceError, match="one must be the AR run"):
        replayed([trace, trace])
    with pytest.raises(TraceError, match="got 3 files"):
        replayed([trace, ar, ar])


def test_the_race_bars_grow_on_fixed_scales():
    """Passes on the scale of the image's tokens (AR's passes for the whole image), seconds on the longer
    clock so far; names escaped."""
    from specviz.ui.race import race_bars

    bars = race_bars([("sjd", 44, 0.5), ("ar", 128, 1.0)], total=256)
    widths = [float(w) for w in re.findall(r"width:([\d.]+)%", bars)]
    assert widths == [17.2, 50.0, 50.0, 100.0]  # sjd 44 of 256 passes, AR half; sjd half of AR's seconds
    assert "model passes (NFE)" in bars and "0.50 s" in bars
    assert "&lt;b&gt;" in race_bars([("<b>", 1, 0.0), ("ar", 1, 0.0)], total=4)


@pytest.mark.parametrize("method", ["sjd", "eagle2"])
def test_a_recorded_run_played_again_passes_through_its_states_at_its_pace(tiny, method):
    """Play again rebuilds each moment of a race from the trace alone: after iteration j the tokens fixed so
    far, the passes made (one per iteration, the prefill's included) and the seconds spent, the last of which
    are the run's reported seconds; the frames end on the whole run's final state."""
    from specviz import metrics
    from specviz.ui.race import play_frames

    trace = run(tiny, method, "sun", 1)
    ar = run(tiny, "ar", "sun", 1)
    clock = metrics.clock_through(trace)
    assert (np.diff(clock) >= 0).all()
    assert clock[-1] == pytest.approx(trace.seconds)
    for j in (0, len(trace.iterations) // 2, len(trace.iterations) - 1):
        moment = metrics.trace_through(trace, j)
        assert moment.tokens == metrics.tokens_through(trace, j) and len(moment.iterations) == j + 1
        assert moment.seconds == pytest.approx(clock[j])
    assert metrics.passes_through(trace, len(trace.iterations) - 1) == trace.nfe
    assert metrics.passes_through(ar, 0) == 1
    *_, last = play_frames({"trace": trace, "ar": ar}, slow=False, animate=False)
    assert f"NFE {trace.nfe} · 256/256" in last["method_counter"] and f"NFE {ar.nfe} · 256/256" in last["ar_counter"]
    assert last["summary"].startswith(f"### {method}:") and "Played again" in last["summary"]
    with pytest.raises(SettingsError, match="Nothing to play yet"):
        next(play_frames({}, slow=False))


def test_inspect_drawing_the_runs_a_race_hands_it_is_no_interruption(monkeypatch):
    """A finished race hands its runs to Inspect, whose views the browser asks for once it has them: a round
    trip that a busy laptop makes slower than the timing's wait for quiet. The timing waits for that drawing, so
    no round is timed again for it and the summary blames neither Inspect nor an export (each of a lecture's
    preset races said so)."""
    import time

    from specviz.core.settings import SamplingSettings
    from specviz.ui import race as race_tab
    from specviz.ui.compute import VIEWER_WORK
    from specviz.ui.controls import RunRequest, own_parameters

    monkeypatch.setenv("SPECVIZ_TIMINGS", "1")
    controls = {**own_parameters("sjd"), "window": 32}
    request = RunRequest("tiny", "sjd", "sun", 0, SamplingSettings(guidance_scale=3.0), controls)

    @VIEWER_WORK.drawing
    def inspect_views():  # Inspect's refresh of the runs handed to it, asked for by the browser
        time.sleep(0.5)

    def browser():
        time.sleep(0.6)  # the frame reaches the page, which then asks for Inspect's views
        inspect_views()

    frames = race_tab.race_frames(request, slow=False, opens_on=None)
    summaries = []
    for frame in frames:
        if "runs" in frame and "activity" in frame and frame["activity"] is not None:  # handed over, timing next
            threading.Thread(target=browser, daemon=True).start()
        summaries.append(frame.get("summary"))
    final = [summary for summary in summaries if summary][-1]
    assert "timed once more" not in final, final
    assert "the median of 1 runs of each with nothing drawing" in final


def test_a_race_that_fails_says_so_instead_of_racing_on(monkeypatch):
    """An error in the middle of a race reaches the page as its message; the summary, which said 'Racing...',
    says the race stopped (a PJD race once failed on its first frame and the page kept saying it raced)."""
    from specviz.core.settings import SamplingSettings
    from specviz.ui import race as race_tab
    from specviz.ui.controls import RunRequest, own_parameters

    def failing(self, deadline, slow):
        yield from ()
        raise RuntimeError("a bug in drawing the first frame")

    monkeypatch.setattr(race_tab.LiveRace, "frames", failing)
    request = RunRequest("tiny", "sjd", "sun", 0, SamplingSettings(), own_parameters("sjd"))
    summaries = []
    with pytest.raises(RuntimeError, match="first frame"):
        for frame in race_tab.race_frames(request, slow=False, opens_on=None):
            summaries.append(frame.get("summary"))
    assert summaries[0].startswith("*Racing sjd") and summaries[-1] == race_tab.RACE_STOPPED


def test_a_race_shows_it_started_before_the_compute_thread_is_free():
    """The first frame (the previous run cleared, 'Racing...') reaches the page while the compute thread is
    still busy with the work before the race; before, the page showed nothing new until it was free."""
    from specviz.core.settings import SamplingSettings
    from specviz.ui import race as race_tab
    from specviz.ui.compute import on_compute_thread
    from specviz.ui.controls import RunRequest, own_parameters

    release = threading.Event()
    busy = threading.Thread(target=on_compute_thread, args=(release.wait, 10), daemon=True)
    busy.start()
    request = RunRequest("tiny", "sjd", "sun", 0, SamplingSettings(), own_parameters("sjd"))
    frames = race_tab.race_frames(request, slow=False, opens_on=None)
    first = []
    shown = threading.Thread(target=lambda: first.append(next(frames)), daemon=True)
    shown.start()
    shown.join(3)
    answered_while_busy = bool(first)
    release.set()
    busy.join()
    shown.join()
    assert answered_while_busy, "the page saw nothing until the compute thread was free"
    assert first[0]["summary"].startswith("*Racing sjd") and first[0]["method_image"] is None
    frames.close()


def test_slow_motion_shows_ar_moving_after_the_method_is_done(monkeypatch):
    """In slow motion the method's passes are each held on screen; AR's passes show at the live pace, so once
    the method is done AR's picture keeps moving to its end (it jumped from 96 to 256 tokens unseen)."""
    from specviz.core.settings import SamplingSettings
    from specviz.ui import race as race_tab
    from specviz.ui.controls import RunRequest, own_parameters

    monkeypatch.setattr(race_tab, "SLOW_MOTION_PAUSE", 0.0)
    monkeypatch.setattr(race_tab, "FRAME_INTERVAL", 0.0)
    monkeypatch.setattr(race_tab, "needs_retiming", lambda model: False)
    controls = {**own_parameters("sjd"), "window": 16, "init": "repeat-above"}
    request = RunRequest("tiny", "sjd", "blue square", 0, SamplingSettings(), controls)
    method_done, ar_after, method_image = False, [], None
    for frame in race_tab.race_frames(request, slow=True, opens_on=None):
        if "runs" in frame:  # the finished race
            break
        if method_done and frame.get("ar_counter"):  # frames after the method's last
            ar_after.append(int(re.search(r"(\d+)/256 tokens", frame["ar_counter"]).group(1)))
        method_done = method_done or "256/256 tokens" in (frame.get("method_counter") or "")
        method_image = frame.get("method_image", method_image)
    assert method_done and len([n for n in ar_after if n < 256]) >= 10, ar_after  # one frame a pass here
    # while AR runs on, the method's complete picture is clean: its last pass's outlines are gone
    assert np.array_equal(np.asarray(method_image), np.asarray(frame["method_image"]))


def test_a_race_waits_for_inspects_views_only_on_a_page_opened_in_a_browser(monkeypatch):
    """A finished race waits (up to HANDOVER_SECONDS) for Inspect to draw the runs it hands over before timing
    them again; a client without a browser (gradio_client, a script) asks for no views, and every race it ran
    waited the whole 3 s for nothing. The wait is now kept only for a page whose browser ran its load events."""
    from specviz.core.settings import SamplingSettings
    from specviz.ui import compute
    from specviz.ui import race as race_tab
    from specviz.ui.controls import RunRequest, own_parameters

    class Settled(Exception):
        """What the race did next is all this test asks: its timing rounds are not run."""

    def settle(handed=None, **_):
        waited_for.append(handed)
        raise Settled

    monkeypatch.setenv("SPECVIZ_TIMINGS", "1")
    waited_for = []
    monkeypatch.setattr(compute.VIEWER_WORK, "settle", settle)
    request = RunRequest("tiny", "sjd", "sun", 0, SamplingSettings(), own_parameters("sjd"))
    for page, in_a_browser in (("a gradio_client session", False), ("a browser's page", True)):
        token = compute.PAGE.set(page)
        try:
            if in_a_browser:
                compute.page_opened()
            assert compute.opened_in_a_browser() == in_a_browser
            with pytest.raises(Settled):
                list(race_tab.race_frames(request, slow=False, opens_on=None))
        finally:
            compute.PAGE.reset(token)
    assert len(waited_for) == 2 and waited_for[0] is None and isinstance(waited_for[1], int), waited_for
