"""The app through gradio_client against a launched server: a run, a replay, bad input, two users."""

import json
import os
import re
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from gradio_client import Client, handle_file
from gradio_client.utils import is_file_obj_with_meta
from PIL import Image

import specviz
from specviz import metrics, viz
from specviz.core.settings import SamplingSettings
from specviz.decoding import METHODS, run
from specviz.ui.controls import PARAMETERS
from specviz.ui.pictures import show

pytestmark = pytest.mark.xdist_group("app")  # one launched app per test run


def _controls(method: str) -> list:
    """The method controls (specviz.ui.controls.PARAMETERS, in order) as the app shows them for `method`: its own
    parameters at its defaults, every other at the default of the first method that takes it."""
    values: dict = {}
    for spec in METHODS.values():
        for name, value in spec.parameters().to_dict().items():
            values.setdefault(name, value)
    return [{**values, **METHODS[method].parameters().to_dict()}[name] for name in PARAMETERS]


# model, method, prompt, seed, then the method controls, temperature, top-k, top-p, guidance
RACE = ["tiny", "sjd", "red apple", 3, *_controls("sjd"), 1.0, 0, 1.0, 3.0]
TEMPERATURE = 4 + len(PARAMETERS)  # its position in RACE


def _race(client: Client, **changes):
    values = list(RACE)
    names = ["model", "method", "prompt", "seed"]
    if "method" in changes and changes["method"] in METHODS:
        values[4:TEMPERATURE] = _controls(changes["method"])
    for key, value in changes.items():
        if key in PARAMETERS:
            values[4 + PARAMETERS.index(key)] = value
        else:
            values[names.index(key)] = value
    return _latest(client, values)


def _latest(client: Client, values: list) -> list:
    """A race's outputs as the page ends up showing them: each output's last value sent (the race sends
    its images when the runs finish, then only clocks and summary while it times them again), its files
    downloaded. gradio_client would download every image of every frame, each in a new HTTP client with
    its own TLS context: seconds per race, spent by the test, not the app."""
    downloads, client.download_files = client.download_files, False
    try:
        job = client.submit(*values, "live", api_name="/race")  # the race speed comes last
        job.result()
    finally:
        client.download_files = downloads
    frames = job.outputs()
    last = (next((frame[i] for frame in reversed(frames) if not _skip(frame[i])), None) for i in range(len(frames[-1])))
    return [_downloaded(value) for value in last]


def _downloaded(value):
    """A file output (the server's description of it) as a local copy; any other value as it is."""
    if not is_file_obj_with_meta(value):  # gradio_client's own test of a file output
        return value
    folder = Path(tempfile.mkdtemp(prefix="specviz-race-"))
    path = folder / Path(value["path"]).name
    with urllib.request.urlopen(value["url"]) as response:
        path.write_bytes(response.read())
    return str(path)


def _skip(value) -> bool:
    return value == {"__type__": "update"}  # an output this frame left as it was


def _expected_image(tiny, method, prompt, seed) -> np.ndarray:
    trace = run(
        tiny,
        method,
        prompt,
        seed,
        SamplingSettings(guidance_scale=3.0),
        {"window": 16, "init": "random"} if method != "ar" else None,
    )
    return np.asarray(show(tiny.decode(trace.tokens)))


def test_the_app_tests_share_one_worker(request):
    """Under pytest-xdist's loadgroup every test of the "app" group runs in one worker, beside one launched
    app; if the group stops being applied (pytest 9.2 with xdist 3.8 did that), two apps and two browsers
    share the cores and the browser tests time out."""
    if os.environ.get("PYTEST_XDIST_WORKER") and getattr(request.config.option, "loadgroup", False):
        assert request.node.nodeid.endswith("@app"), "the xdist_group is not applied: see requirements-dev.txt"


def test_a_race_shows_both_images_and_the_summary(server, tiny, monkeypatch):
    monkeypatch.setenv("SPECVIZ_TIMINGS", "2")  # two undisturbed timings: the summary gives their spread
    client = Client(server, verbose=False)
    method_image, method_counter, ar_image, ar_counter, summary, iteration, _, _, race_map, map_title, _ = _race(client)
    assert "step compression" in summary and re.search("speedup over AR|slower than AR|about the same", summary)
    assert "the median of 2 runs of each with nothing drawing" in summary  # on a CPU: re-timed undisturbed
    assert re.search(r"\((from )?\d\.\d\d.*x.* over 2 timings\)", summary.splitlines()[0])  # with its spread
    assert "256/256 tokens" in method_counter and "NFE 256" in ar_counter
    shown = [np.asarray(Image.open(image).convert("RGB")) for image in (method_image, ar_image)]
    assert np.array_equal(shown[0], _expected_image(tiny, "sjd", "red apple", 3))
    assert np.array_equal(shown[1], _expected_image(tiny, "ar", "red apple", 3))
    assert iteration["maximum"] >= 1  # the inspect slider spans the run's iterations
    assert map_title == "sjd: accepted run length of each cell (navy 1 to yellow 17)"  # with its colour key
    cells = np.asarray(Image.open(race_map).convert("RGB").resize((16, 16), Image.NEAREST))
    pending = np.array(Image.new("RGB", (1, 1), specviz.viz.colors()["pending"]))[0, 0]
    assert not (cells == pending).all(axis=-1).any()  # the finished run's map: every cell committed


def test_a_race_on_the_continuous_pair(server, untimed):
    client = Client(server, verbose=False)
    # choosing the model gives the method list of its kind of tokens, as the browser does
    client.predict("tiny-continuous", api_name="/methods_of")
    # gamma 4: half the draft passes of the default 8
    method_image, method_counter, ar_image, ar_counter, summary, _, _, _, race_map, map_title, _ = _race(
        client, model="tiny-continuous", method="cspd", gamma=4
    )
    assert "256/256 tokens" in method_counter and "NFE 256" in ar_counter
    assert "of the target and" in summary and "of the draft" in summary and "drafts accepted" in summary
    assert Image.open(method_image).size == Image.open(ar_image).size
    assert Image.open(race_map).size[0] > 16  # beside the bars, with its colour key
    assert map_title.startswith("cspd: where each token came from (green: draft accepted")


def test_replay_of_a_saved_trace(server, tiny, tmp_path):
    trace = run(tiny, "scd-mc", "sun", seed=1)
    path = tmp_path / "trace.json"
    trace.save(path)
    client = Client(server, verbose=False)
    status, *_ = client.predict([handle_file(str(path))], False, False, api_name="/replay")
    assert f"{len(trace.iterations)} iterations, NFE {trace.nfe}" in status and "scd-mc" in status


def test_malformed_upload_gets_a_clear_message(server, tmp_path):
    """Said on the status line (and in a toast); the run on screen and the controls are left as they were,
    so no control is marked with an error."""
    path = tmp_path / "broken.json"
    path.write_text('{"version": 1, "tokens": "nope"}')
    client = Client(server, verbose=False)
    status, *_ = client.predict([handle_file(str(path))], False, False, api_name="/replay")
    assert status.startswith("**Not loaded**: invalid trace")


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"prompt": "   "}, "the prompt is empty"),
        ({"model": "dalle"}, "Model: 'dalle' is not one of"),
        ({"seed": 1, "method": "nope"}, "Method: 'nope' is not one of"),
        ({"prompt": None}, "the prompt must be text"),
        ({"seed": 1e30}, "the seed must be an integer from 0"),
        ({"seed": -4}, r"Seed: -4 is out of range \(allowed: 0 or more\)"),
        ({"window": 500}, r"Window W: 500 is out of range \(allowed: 1 to 128\)"),
    ],
)
def test_bad_input_is_a_message_not_a_stack_trace(server, changes, message, capfd):
    client = Client(server, verbose=False)
    capfd.readouterr()
    with pytest.raises(Exception, match=message) as raised:
        _race(client, **changes)
    assert "Traceback" not in str(raised.value)
    assert "Traceback" not in capfd.readouterr().err  # the server log has no stack trace either


def test_two_users_at_once_get_their_own_runs(server, tiny, untimed):
    results = {}

    def user(name, prompt, seed):
        results[name] = _race(Client(server, verbose=False), prompt=prompt, seed=seed)

    threads = [threading.Thread(target=user, args=a) for a in (("a", "rocket", 1), ("b", "cat face", 2))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    image_a = np.asarray(Image.open(results["a"][0]).convert("RGB"))
    image_b = np.asarray(Image.open(results["b"][0]).convert("RGB"))
    assert np.array_equal(image_a, _expected_image(tiny, "sjd", "rocket", 1))
    assert np.array_equal(image_b, _expected_image(tiny, "sjd", "cat face", 2))
    assert not np.array_equal(image_a, image_b)


def test_bad_sampling_and_parameters_are_messages(server):
    client = Client(server, verbose=False)
    for position, value, message in [
        (4 + PARAMETERS.index("window"), 2.5, r"Window W: 2.5 is not a whole number \(allowed: 1 to 128\)"),
        (TEMPERATURE, "hot", r"Temperature \(0 = greedy\): a number is needed, got 'hot'"),
        (TEMPERATURE + 1, 2.5, r"Top-k \(0 = off\): 2.5 is not a whole number"),  # Gradio would round it to 2
    ]:
        values = list(RACE)
        values[position] = value
        with pytest.raises(Exception, match=message):
            client.predict(*values, "live", api_name="/race")


def test_a_model_the_deployment_does_not_offer_is_refused(server, monkeypatch):
    monkeypatch.setenv("SPECVIZ_MODELS", "tiny")
    client = Client(server, verbose=False)
    with pytest.raises(Exception, match="model 'emu3' is not offered here"):
        _race(client, model="emu3")


def test_an_upload_over_the_size_limit_is_refused(server, tmp_path):
    from specviz.ui import MAX_UPLOAD_BYTES

    path = tmp_path / "huge.json"
    path.write_bytes(b" " * (MAX_UPLOAD_BYTES + 1))
    client = Client(server, verbose=False)
    with pytest.raises(Exception, match=r"(?i)file.*(large|size)"):
        client.predict([handle_file(str(path))], False, False, api_name="/replay")


def test_exporting_a_long_trace_is_bounded(server, tmp_path):
    """Three thousand iterations of a model this app does not have: the animation keeps at most
    MAX_FRAMES frames and takes seconds, not the half hour an unbounded export took."""
    import json
    import time

    from specviz.viz.frames import MAX_FRAMES

    count = 3000
    trace = {
        "version": 2,
        "model": "elsewhere",
        "method": "ar",
        "lossless": True,
        "prompt": "x",
        "seed": 0,
        "sampling": {"temperature": 1.0, "top_k": None, "top_p": 1.0, "guidance_scale": 1.0},
        "geometry": {"rows": 40, "cols": 75, "vocab_size": 4, "layout": [-1] * count},
        "tokens": [1] * count,
        "nfe": count,
        "seconds": 1.0,
        "iterations": [{"start": i, "committed": [1], "forward_ms": 1.0} for i in range(count)],
    }
    path = tmp_path / "long.json"
    path.write_text(json.dumps(trace))
    client = Client(server, verbose=False)
    client.predict([handle_file(str(path))], False, False, api_name="/replay")
    started = time.perf_counter()
    files = client.predict(0, False, api_name="/export")
    elapsed = time.perf_counter() - started
    gif = next(f for f in files if str(f).endswith(".gif"))
    with Image.open(gif) as animation:
        assert animation.n_frames <= MAX_FRAMES
    assert elapsed < 120, elapsed


def test_tree_method_controls_and_refusals(server):
    """Choosing a tree method shows its own controls at its defaults; a shape outside PEANUT's bounds is
    refused with the bounds before anything runs."""
    client = Client(server, verbose=False)
    updates = client.predict("peanut", api_name="/method_changed")
    shown = {name: update.get("value") for name, update in zip(PARAMETERS, updates, strict=False) if update["visible"]}
    assert shown == METHODS["peanut"].parameters().to_dict()
    with pytest.raises(Exception, match="tree_depth 12 must lie strictly between depth_min 0 and depth_max 10"):
        _race(client, method="peanut", tree_depth=12)


def test_inspect_shows_the_tree_the_depth_map_and_the_shapes_of_a_tree_run(server, tiny, eagle2_trace, tmp_path):
    """A replayed eagle2 run: the iteration view is its tree, the depth map and the shape maps appear,
    the window methods' drafts-changed plot goes; a window run turns them back."""
    path = tmp_path / "eagle2.json"
    eagle2_trace.save(path)
    client = Client(server, verbose=False)
    client.predict([handle_file(str(path))], False, False, api_name="/replay")
    tree, image, depths, _, length, changed, _, shapes, contrast, sentence = client.predict(
        3, "redraws", False, False, api_name="/refresh"
    )
    assert not contrast["visible"]  # a continuous run's view only
    assert sentence.startswith("Iteration 3")
    assert tree["label"] == "Draft tree of this iteration"
    assert "drafts in a tree" in json.loads(tree["value"]["plot"])["layout"]["title"]["text"].replace("<br>", " ")
    through_3 = show(tiny.decode(metrics.tokens_through(eagle2_trace, 3)))  # the image after iteration 3
    with Image.open(image) as shown:
        assert np.array_equal(np.asarray(shown.convert("RGB")), np.asarray(through_3.convert("RGB")))
    assert depths["visible"] and shapes["visible"] and not changed["visible"]
    assert "depth in its draft tree" in json.loads(depths["value"]["plot"])["layout"]["title"]["text"].replace(
        "<br>", " "
    )
    assert length["label"] == "Tau per tree pass"
    tree, _, depths, sentence = client.predict(5, False, False, api_name="/at_iteration")
    assert sentence.startswith("Iteration 5")
    assert "iteration 5/" in json.loads(tree["value"]["plot"])["layout"]["title"]["text"].replace("<br>", " ")
    assert "committed this iteration (5)" in depths["value"]["plot"]
    sjd = Path(specviz.__file__).parent / "data" / "examples" / "red-apple-sjd.json"
    client.predict([handle_file(str(sjd))], False, False, api_name="/replay")
    window, _, depths, _, length, changed, _, shapes, _, _ = client.predict(
        3, "redraws", False, False, api_name="/refresh"
    )
    assert window["label"] == "Jacobi window" and length["label"] == "Accepted length per iteration"
    assert changed["visible"] and not depths["visible"] and not shapes["visible"]


def _example(name: str = "red-apple-sjd.json") -> Path:
    return Path(specviz.__file__).parent / "data" / "examples" / name


def _figure(shown: dict) -> dict:
    """A plot output as plotly JSON, sent as a figure or as an update carrying one."""
    return json.loads(shown.get("value", shown)["plot"])


def test_a_slowdown_reads_as_one():
    """A method slower than AR is written '1.19x slower' in the race summary, its figure and Compare's
    table, never as a '0.84x' speedup."""
    from specviz.trace import Trace
    from specviz.ui.compare import compare_rows
    from specviz.ui.race import race_summary

    sjd = Trace.load(_example())
    ar = sjd.model_copy(update={"method": "ar", "nfe": 256, "seconds": sjd.seconds / 1.19})
    headline = race_summary(sjd, ar).splitlines()[0]
    assert "1.19x slower than AR" in headline and "speedup" not in headline
    assert "1.19x slower than AR" in viz.race_figure(sjd, ar).layout.title.text
    table, rows = compare_rows(ar, [sjd])
    assert table[1][0] == "sjd" and table[1][-1] == "1.19x slower"
    carried = sum(it.carried for it in sjd.iterations)
    assert table[1][4] == f"{sum(it.changed for it in sjd.iterations) / carried:.0%}" and table[0][4] == "-"
    assert list(viz.comparison_figure(rows).data[1].text) == ["1.19x slower"]


def test_the_headline_leads_with_passes_and_says_about_the_same_where_the_timings_disagree():
    """The stable result first: step compression and passes. Latency only once timed, and a spread that
    crosses 1 (noise on a shared machine) is 'about the same', never a gain or a loss."""
    from specviz.trace import Trace
    from specviz.ui.race import race_summary

    sjd = Trace.load(_example())
    ar = sjd.model_copy(update={"method": "ar", "nfe": 256, "seconds": sjd.seconds})
    crossing = sjd.model_copy(update={"timings": [1.0, 1.0, 1.0]})
    ar_timed = ar.model_copy(update={"timings": [0.9, 1.2, 1.05]})
    headline = race_summary(crossing, ar_timed).splitlines()[0]
    assert headline.startswith(f"### sjd: {256 / sjd.nfe:.2f}x step compression ({sjd.nfe} passes against AR's 256)")
    assert "about the same latency as AR (from 1.11x slower to 1.20x faster over 3 timings)" in headline
    faster = race_summary(crossing, ar.model_copy(update={"timings": [1.1, 1.3, 1.2]})).splitlines()[0]
    assert "1.20x latency speedup over AR (1.10-1.30x over 3 timings)" in faster
    provisional = race_summary(crossing, ar_timed, timing=3)
    assert "latency being timed" in provisional and "speedup" not in provisional.splitlines()[2]


def test_compare_is_timed_as_the_race_is_and_states_its_settings(server, monkeypatch):
    """Compare re-times every run after all have run, as the race does (one shared function), so its
    seconds are the median of the repeats'; its note states prompt, seed and sampling, its table each
    method's parameters and the speedup's spread."""
    import specviz.measure.race as race

    first_run = race.repeat_passes

    def marked(model, trace):  # the re-timed run, its clock marked so the table shows where it came from
        *passes, again = first_run(model, trace)
        yield from passes
        marked = {"seconds": again.seconds + 1000.0, "compute_seconds": again.compute_seconds + 1000.0}
        yield again.model_copy(update=marked)

    monkeypatch.setattr(race, "repeat_passes", marked)
    monkeypatch.setenv("SPECVIZ_TIMINGS", "2")
    client = Client(server, verbose=False)
    values = RACE[:1] + RACE[2:]  # model, prompt, seed, controls, sampling (no method)
    table, _, note = client.predict(*values, False, False, ["sjd"], api_name="/compare")
    rows = {row[0]: dict(zip(table["headers"], row, strict=True)) for row in table["data"]}
    assert rows["ar"]["seconds"] > 1000 and rows["sjd"]["seconds"] > 1000
    assert rows["sjd"]["parameters"].startswith("window 16, init random")
    assert "'red apple'" in note and "seed 3" in note and "guidance 3" in note and "top-k off" in note
    assert "from 2 runs of each" in note and rows["sjd"]["latency against AR"].endswith("over 2 timings)")
    monkeypatch.setenv("SPECVIZ_TIMINGS", "1")  # the race's re-timing is the same function: one round shows it
    ar_counter = _race(client)[3]
    assert float(re.search(r"([\d.]+) s of compute$", ar_counter).group(1)) > 1000  # the race's AR: the same


def test_inspect_has_the_runs_while_their_clocks_are_timed_and_a_step_does_not_wait(server, monkeypatch):
    """The race hands its runs to Inspect as soon as both images are complete; the re-timing that follows
    gives way after every pass, so an Inspect step answers before the timing ends, and the round it drew
    during is timed again and said so."""
    monkeypatch.setenv("SPECVIZ_TIMINGS", "2")  # a step taken in the second round
    client = Client(server, verbose=False, download_files=False)
    job = client.submit(*RACE, "live", api_name="/race")
    while not any("being timed" in str(frame[4]) for frame in job.outputs()):
        assert not job.done(), "the race ended without handing its runs over first"
        time.sleep(0.05)
    while not any("1 of up to 2 done" in str(frame[4]) for frame in job.outputs()):  # then step in the second round
        time.sleep(0.05)
    started = time.perf_counter()
    window, image, _, _ = client.predict(5, False, False, api_name="/at_iteration")
    seconds = time.perf_counter() - started
    print(f"Inspect step during the re-timing: {seconds:.2f} s")
    assert not job.done() and _figure(window)["data"] and image is not None  # answered while timing went on
    job.result()
    summary = [frame[4] for frame in job.outputs() if isinstance(frame[4], str)][-1]
    assert "timed once more: Inspect or an export drew during it" in summary and "being timed" not in summary


def test_a_new_race_clears_the_last_summary_and_downloads(server, untimed):
    client = Client(server, verbose=False, download_files=False)  # every frame's images stay on the server
    job = client.submit(*RACE, "live", api_name="/race")
    job.result()
    first = job.outputs()[0]
    method_image, method_counter, ar_image, ar_counter, summary, _, downloads, _, race_map, map_title, _ = first
    assert summary.startswith("*Racing sjd against AR") and downloads is None
    assert (method_image, method_counter, ar_image, ar_counter, race_map, map_title) == (None, "", None, "", None, "")


def test_stop_says_stopped_and_how_far_and_cancels_compare(server):
    from specviz.ui.activity import RACING, RaceActivity, stopped
    from specviz.ui.race import racing

    said = stopped(RACING, None, racing("sjd"))  # Compare never ran
    race_note, compare_note = said["summary"], said["compare_note"]
    assert race_note.startswith("**Stopped** before the end: the counters under the pictures say how far")
    assert compare_note == {"__type__": "update"}  # no comparison was running
    assert (said["race_activity"], said["comparing"]) == (None, False)  # both activities cleared
    retiming = "*Timing both runs again with nothing drawing: 1 of up to 3 done.*\n\n### sjd: 2.90x step compression"
    said = stopped(RaceActivity("retiming", 1), True, retiming)
    assert "while timing the runs again (1 rounds done)" in said["summary"]
    assert said["summary"].endswith("step compression") and said["compare_note"].startswith("**Stopped**")
    said = stopped(None, False, "### sjd: 2.90x step compression")
    assert said["summary"] == said["compare_note"] == {"__type__": "update"}  # nothing was running: the page stays
    config = Client(server, verbose=False).config
    api = {d["api_name"]: d["id"] for d in config["dependencies"] if d.get("api_name")}
    stop = next(d for d in config["dependencies"] if d.get("api_name") == "stop")
    cancelled = {i for d in config["dependencies"] if d["targets"] == stop["targets"] for i in d["cancels"]}
    assert {api["race"], api["compare"]} <= cancelled  # the Stop button cancels both


def test_replay_restores_the_controls_and_opens_at_an_instructive_iteration(server, tiny, tmp_path):
    sampling = SamplingSettings(temperature=0.9, top_k=50, top_p=0.95, guidance_scale=2.0)
    trace = run(tiny, "scd-mc", "sun", 1, sampling, {"window": 8, "init": "repeat-left"})
    path = tmp_path / "trace.json"
    trace.save(path)
    client = Client(server, verbose=False)
    status, iteration, _loaded, downloads, model, method, *rest = client.predict(
        [handle_file(str(path))], False, False, api_name="/replay"
    )
    controls = dict(zip(PARAMETERS, rest, strict=False))
    prompt, seed, temperature, top_k, top_p, guidance = (update["value"] for update in rest[-6:])
    assert model["value"] == "tiny" and method["value"] == "scd-mc" and (prompt, seed) == ("sun", 1)
    assert controls["window"]["value"] == 8 and controls["init"]["value"] == "repeat-left"
    assert controls["window"]["visible"] and not controls["tree_depth"]["visible"]
    assert (temperature, top_k, top_p, guidance) == (0.9, 50, 0.95, 2.0)
    assert downloads is None and "controls now show its settings" in status
    opened = trace.iterations[iteration["value"]]
    assert {"accepted", "rejected"} <= set(opened.outcome())  # not iteration 0: the rule at work
    band = metrics.passes_in_picture(trace)  # once a quarter of the picture is drawn
    assert iteration["value"] == min(j for j in band if {"accepted", "rejected"} <= set(trace.iterations[j].outcome()))
    *_, race_plot, _, _, _ = client.predict(iteration["value"], "run_length", False, False, api_name="/refresh")
    figure = _figure(race_plot)
    assert figure["layout"]["title"]["text"] == "NFE and latency against AR"
    assert "without an AR run" in figure["layout"]["annotations"][0]["text"]  # says why instead of a blank plot


def test_inspect_opens_a_tree_run_at_its_deepest_path_and_steps_between_acceptances(server, eagle2_trace, tmp_path):
    path = tmp_path / "eagle2.json"
    eagle2_trace.save(path)
    client = Client(server, verbose=False)
    _, iteration, *_ = client.predict([handle_file(str(path))], False, False, api_name="/replay")
    accepted = [it.accepted for it in eagle2_trace.iterations]
    assert accepted[iteration["value"]] == max(accepted)
    accepting = [j for j, n in enumerate(accepted) if n > 0 and eagle2_trace.iterations[j].kind == "tree"]
    moved, tree, _, _, sentence = client.predict(0, False, False, api_name="/next_acceptance")
    assert moved == accepting[0] and sentence.startswith(f"Iteration {accepting[0]}")  # one answer: all of it
    assert f"iteration {accepting[0]}/" in _figure(tree)["layout"]["title"]["text"].replace("<br>", " ")
    assert client.predict(accepting[1], False, False, api_name="/previous_acceptance")[0] == accepting[0]
    last = len(eagle2_trace.iterations) - 1  # nothing follows the last pass: the sentence says so
    assert (
        client.predict(last, False, False, api_name="/next_stall")[-1]
        == f"No stall after iteration {last} in this run."
    )
    config = client.config
    kind = next(c for c in config["components"] if c.get("props", {}).get("label") == "Acceptance map")
    assert kind["props"]["value"] == "run_length"


def test_sampling_controls_follow_the_model_without_loading_it(server, tiny):
    from specviz.models.emu3.adapter import Emu3Model
    from specviz.models.registry import MODELS

    client = Client(server, verbose=False)
    temperature, top_k, top_p, guidance = client.predict("emu3", api_name="/model_defaults")
    assert [u["value"] for u in (temperature, top_k, top_p, guidance)] == [1.0, 2048, 1.0, 3.0]
    assert MODELS["emu3"].sampling() == Emu3Model.default_sampling
    shown = client.predict("tiny", api_name="/model_defaults")
    expected = tiny.default_sampling  # read from assets/tiny/config.json, never written here
    assert [u["value"] for u in shown] == [
        expected.temperature,
        expected.top_k or 0,
        expected.top_p,
        expected.guidance_scale,
    ]
    labels = {c["props"].get("label"): c["props"].get("value") for c in client.config["components"] if "props" in c}
    assert labels["Guidance scale (1 = off)"] == expected.guidance_scale  # the page opens at tiny's own


def test_compare_with_no_method_is_one_line_in_the_log(server, capfd, caplog):
    client = Client(server, verbose=False)
    capfd.readouterr()
    with caplog.at_level("WARNING", logger="specviz.ui"), pytest.raises(Exception, match="choose at least one method"):
        client.predict(*(RACE[:1] + RACE[2:]), False, False, [], api_name="/compare")
    logged = [record for record in caplog.records if record.name == "specviz.ui"]
    assert [record.getMessage() for record in logged] == ["refused in compare: choose at least one method to compare"]
    assert logged[0].exc_info is None and "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize(
    "environ, address",
    [
        ({}, ("127.0.0.1", 7860)),
        ({"PORT": "8080", "SPACE_ID": "me/space"}, ("0.0.0.0", 8080)),
        ({"GRADIO_SERVER_NAME": "0.0.0.0", "GRADIO_SERVER_PORT": "9000", "PORT": "8080"}, ("0.0.0.0", 9000)),
    ],
)
def test_server_address_honours_gradio_variables_before_port(environ, address):
    from specviz.core.inputs import InputError
    from specviz.ui import server_address

    assert server_address(environ) == address
    with pytest.raises(InputError, match="GRADIO_SERVER_PORT must be a port number"):
        server_address({**environ, "GRADIO_SERVER_PORT": "http"})


def _lab(color: str) -> tuple[float, float, float]:
    """CIELAB (D65) of a #RRGGBB colour, to measure how far apart two colours look."""
    channels = [int(color[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    xyz = (
        (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047,
        0.2126 * r + 0.7152 * g + 0.0722 * b,
        (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883,
    )
    fx, fy, fz = (t ** (1 / 3) if t > 216 / 24389 else (24389 / 27 * t + 16) / 116 for t in xyz)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


@pytest.mark.parametrize("dark", [False, True])
def test_rejected_and_redrawn_look_different_and_the_header_shows_them(server, dark):
    """Vermillion against orange was about 33 apart in CIELAB (hard on a projector); the fates beside
    each other in a window must be at least 50 apart, and the header shows a swatch of each colour it names."""
    import math

    from specviz.viz.palette import OKABE_ITO, colors

    palette = colors(dark)
    assert set(palette[fate] for fate in ("rejected", "redrawn")) <= set(OKABE_ITO.values())
    assert math.dist(_lab(palette["rejected"]), _lab(palette["redrawn"])) >= 50
    header = next(
        c["props"]["value"]
        for c in Client(server, verbose=False).config["components"]
        if c.get("props", {}).get("elem_id") == "specviz-header"
    )
    for fate in ("accepted", "rejected", "kept", "redrawn", "new"):
        assert f"background:{colors()[fate]}" in header, fate


def test_the_names_tiny_knows_are_offered_and_follow_the_model(server):
    client = Client(server, verbose=False)
    known = client.predict("tiny", api_name="/known_prompts_of")
    names = [choice[1] if isinstance(choice, list | tuple) else choice for choice in known["choices"]]
    assert len(names) == 1915 and "red apple" in names and known["visible"]  # the shipped weights' captions
    assert "1,915 names" in known["info"]
    assert client.predict("cat face", api_name="/lambda") == "cat face"  # picking a name fills the prompt
    assert not client.predict("emu3", api_name="/known_prompts_of")["visible"]  # no list for a hub model


def test_the_animation_after_a_race_sets_the_method_beside_ar(server, untimed):
    """By default the exported animation is a 1280x720 slide of the method beside AR, one frame per AR
    pass (AR needs the most); without the box ticked, the method alone, one frame per pass of its own."""
    client = Client(server, verbose=False)
    _race(client)
    counts = []
    for beside_ar in (True, False):
        files = client.predict(0, False, beside_ar, api_name="/export")
        gif = next(f for f in files if str(f).endswith(".gif"))
        with Image.open(gif) as animation:
            assert animation.size == (1280, 720)
            counts.append(animation.n_frames)
    assert counts[0] == 256 and counts[1] < 256


def test_inspect_explains_how_to_read_each_view(server):
    client = Client(server, verbose=False)
    guide = next(c for c in client.config["components"] if c.get("props", {}).get("elem_id") == "reading-guide")
    text = guide["props"]["value"]
    for view in ("Window", "Draft tree", "Acceptance map", "Depth map", "NFE and latency"):
        assert f"**{view}" in text, view


def test_slow_motion_shows_every_pass_of_the_method(server, monkeypatch, untimed):
    """In slow motion the race sends a frame after each of the method's passes (here without the pause,
    which only holds each frame on screen); live it sends one every FRAME_INTERVAL."""
    import specviz.ui.race as race_tab

    monkeypatch.setattr(race_tab, "SLOW_MOTION_PAUSE", 0.0)
    client = Client(server, verbose=False, download_files=False)
    values = list(RACE)
    values[4 + PARAMETERS.index("window")] = 64
    job = client.submit(*values, "slow", api_name="/race")
    job.result()
    counters = [frame[1] for frame in job.outputs() if isinstance(frame[1], str) and "NFE" in frame[1]]
    passes = sorted({int(re.search(r"NFE (\d+)", counter).group(1)) for counter in counters})
    assert passes == list(range(1, passes[-1] + 1))  # not one pass of the method skipped


def test_the_seconds_beside_a_verdict_are_the_clock_it_compared():
    """On a busy machine the wall clock also counts other programs' work: a walk saw bars of scd-mc 1.81 s
    against AR's 1.66 s beside a compute-time verdict of 1.40x faster. The race's bars, counters and summary,
    Inspect's race figure and Compare's table show the seconds of the verdict's clock, and say which."""
    from specviz.trace import Trace
    from specviz.ui.compare import compare_rows
    from specviz.ui.race import final_counter, finished_bars, race_summary

    sjd = Trace.load(_example())
    method = sjd.model_copy(
        update={"seconds": 1.81, "timings": [1.8, 1.81, 1.9], "compute_seconds": 1.0, "compute_timings": [1.0] * 3}
    )
    ar = sjd.model_copy(
        update={
            "method": "ar",
            "nfe": 256,
            "seconds": 1.66,
            "timings": [1.6, 1.66, 1.7],
            "compute_seconds": 1.4,
            "compute_timings": [1.4] * 3,
        }
    )
    assert "1.40x latency speedup over AR" in race_summary(method, ar).splitlines()[0]
    assert "1.00 s of compute" in race_summary(method, ar) and "1.40 s of compute" in race_summary(method, ar)
    bars = finished_bars(256, method, ar)
    assert "seconds of compute" in bars and "1.00 s" in bars and "1.40 s" in bars and "1.81 s" not in bars
    assert final_counter(method, "compute").endswith("1.00 s of compute")
    figure = viz.race_figure(method, ar)
    assert [bar.y[0] for bar in figure.data if bar.xaxis == "x2"] == [1.4, 1.0]
    assert "compute time (seconds)" in [a.text for a in figure.layout.annotations]
    table, _ = compare_rows(ar, [method])
    assert [table[0][6], table[1][6]] == [1.4, 1.0]
    untimed = sjd.model_copy(update={"method": "ar", "nfe": 256})  # a run not timed again: its own wall clock
    assert "seconds" in finished_bars(256, sjd, untimed) and "of compute" not in finished_bars(256, sjd, untimed)
