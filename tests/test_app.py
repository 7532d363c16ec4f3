"""The app through gradio_client against a launched server: a run, a replay, bad input, two users."""

import json
import threading
from pathlib import Path

import numpy as np
import pytest
from gradio_client import Client, handle_file
from PIL import Image

import specviz
from specviz.decoding import METHODS, run
from specviz.models.settings import SamplingSettings
from specviz.ui import PARAMETERS, show

pytestmark = pytest.mark.xdist_group("app")  # one launched app per test run


def _controls(method: str) -> list:
    """The method controls (specviz.ui.PARAMETERS, in order) as the app shows them for `method`: its own
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
    return client.predict(*values, api_name="/race")


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


def test_a_race_shows_both_images_and_the_summary(server, tiny):
    client = Client(server, verbose=False)
    method_image, method_counter, ar_image, ar_counter, summary, iteration = _race(client)
    assert "step compression" in summary and "latency speedup over AR" in summary
    assert "timed again after the race" in summary  # on a CPU both deterministic runs are re-timed
    assert "256/256 tokens" in method_counter and "NFE 256" in ar_counter
    shown = [np.asarray(Image.open(image).convert("RGB")) for image in (method_image, ar_image)]
    assert np.array_equal(shown[0], _expected_image(tiny, "sjd", "red apple", 3))
    assert np.array_equal(shown[1], _expected_image(tiny, "ar", "red apple", 3))
    assert iteration["maximum"] >= 1  # the inspect slider spans the run's iterations


def test_replay_of_a_saved_trace(server, tiny, tmp_path):
    trace = run(tiny, "scd-mc", "sun", seed=1)
    path = tmp_path / "trace.json"
    trace.save(path)
    client = Client(server, verbose=False)
    status, _ = client.predict(handle_file(str(path)), False, False, api_name="/replay")
    assert f"{len(trace.iterations)} iterations, NFE {trace.nfe}" in status and "scd-mc" in status


def test_malformed_upload_gets_a_clear_message(server, tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"version": 1, "tokens": "nope"}')
    client = Client(server, verbose=False)
    with pytest.raises(Exception, match="invalid trace"):
        client.predict(handle_file(str(path)), False, False, api_name="/replay")


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"prompt": "   "}, "the prompt is empty"),
        ({"model": "dalle"}, "dalle is not in the list of choices"),
        ({"seed": 1, "method": "nope"}, "nope is not in the list"),
        ({"prompt": None}, "the prompt must be text"),
        ({"seed": 1e30}, "the seed must be an integer from 0"),
        ({"seed": -4}, "Seed: Value -4 is less than minimum value 0"),
    ],
)
def test_bad_input_is_a_message_not_a_stack_trace(server, changes, message, capfd):
    client = Client(server, verbose=False)
    capfd.readouterr()
    with pytest.raises(Exception, match=message) as raised:
        _race(client, **changes)
    assert "Traceback" not in str(raised.value)
    assert "Traceback" not in capfd.readouterr().err  # the server log has no stack trace either


def test_two_users_at_once_get_their_own_runs(server, tiny):
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
        (4 + PARAMETERS.index("window"), 2.5, "window must be an integer from 1 to 128, got 2.5"),
        (TEMPERATURE, "hot", "Temperature \\(0 = greedy\\): .*float"),
        (TEMPERATURE + 1, 2.5, r"Top-k \(0 = off\): 2.5 is not a whole number"),  # Gradio would round it to 2
    ]:
        values = list(RACE)
        values[position] = value
        with pytest.raises(Exception, match=message):
            client.predict(*values, api_name="/race")


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
        client.predict(handle_file(str(path)), False, False, api_name="/replay")


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
    client.predict(handle_file(str(path)), False, False, api_name="/replay")
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


def test_inspect_shows_the_tree_the_depth_map_and_the_shapes_of_a_tree_run(server, eagle2_trace, tmp_path):
    """A replayed eagle2 run: the iteration view is its tree, the depth map and the shape maps appear,
    the window methods' drafts-changed plot goes; a window run turns them back."""
    path = tmp_path / "eagle2.json"
    eagle2_trace.save(path)
    client = Client(server, verbose=False)
    client.predict(handle_file(str(path)), False, False, api_name="/replay")
    tree, image, depths, _, length, changed, _, shapes = client.predict(3, "redraws", False, False, api_name="/refresh")
    assert tree["label"] == "Draft tree of this iteration"
    assert "drafts in a tree" in json.loads(tree["value"]["plot"])["layout"]["title"]["text"]
    assert image is not None
    assert depths["visible"] and shapes["visible"] and not changed["visible"]
    assert "depth in its draft tree" in json.loads(depths["value"]["plot"])["layout"]["title"]["text"]
    assert length["label"] == "Tau per tree pass"
    tree, _, depths = client.predict(5, False, False, api_name="/at_iteration")
    assert "iteration 5/" in json.loads(tree["value"]["plot"])["layout"]["title"]["text"]
    assert "committed this iteration (5)" in depths["value"]["plot"]
    sjd = Path(specviz.__file__).parent / "data" / "examples" / "red-apple-sjd.json"
    client.predict(handle_file(str(sjd)), False, False, api_name="/replay")
    window, _, depths, _, length, changed, _, shapes = client.predict(3, "redraws", False, False, api_name="/refresh")
    assert window["label"] == "Jacobi window" and length["label"] == "Accepted length per iteration"
    assert changed["visible"] and not depths["visible"] and not shapes["visible"]
