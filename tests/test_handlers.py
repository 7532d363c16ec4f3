"""The app's handlers called directly, without a server: the Blocks are built, each handler is found by
its API name and given its inputs as the browser would (a dict keyed by component for set inputs)."""

import gradio as gr
import pytest

from specviz.models.registry import get_entry
from specviz.ui.activity import RACING, RaceActivity
from specviz.ui.controls import PARAMETERS


@pytest.fixture(scope="module")
def demo():
    from specviz.ui import build

    return build()


def handler(demo, api_name: str):
    return next(fn for fn in demo.fns.values() if fn.api_name == api_name)


def named(fn, **values) -> dict:
    """The handler's set inputs keyed by component, from values named by each component's label; the
    rest at the component's own value, as a fresh page sends them."""
    by_name = {}
    for component in fn.inputs:
        label = getattr(component, "label", None)
        by_name[component] = values.get(label, component.value)
    return by_name


def by_label(frame: dict) -> dict:
    """A frame's updates keyed by each component's label, or its element id where it has no label."""
    return {getattr(c, "label", None) or getattr(c, "elem_id", None): value for c, value in frame.items()}


def test_the_race_handler_clears_first_then_hands_inspect_its_timed_runs(demo, monkeypatch):
    monkeypatch.setenv("SPECVIZ_TIMINGS", "2")
    race = handler(demo, "race")
    assert race.inputs_as_dict  # named inputs, no positional unpacking
    data = named(race, Prompt="sun", Seed=1)
    frames = list(race.fn(data))
    first, last = by_label(frames[0]), by_label(frames[-1])
    assert first["Method"] is None and first["Vanilla AR"] is None and first["race-summary"].startswith("*Racing")
    activities = [v for f in frames for c, v in f.items() if isinstance(c, gr.State) and not isinstance(v, dict)]
    assert activities[0] == RACING and activities[-1] is None  # what Stop reads: racing, timing again, finished
    assert RaceActivity("retiming", 1) in activities
    state = next(v for c, v in frames[-1].items() if isinstance(c, gr.State) and isinstance(v, dict))
    trace, ar = state["trace"], state["ar"]
    assert (trace.method, ar.method, trace.prompt, trace.seed) == ("sjd", "ar", "sun", 1)
    assert len(trace.timings) == len(ar.timings) == 2 and "over 2 timings" in last["race-summary"]
    provisional = [by_label(f)["race-summary"] for f in frames if "race-summary" in by_label(f)]
    assert any(s.startswith("*Timing both runs again") for s in provisional)  # said while it timed
    assert not last["race-summary"].startswith("*Timing")


def test_the_compare_handler_refuses_no_method_and_reads_its_named_inputs(demo, monkeypatch):
    monkeypatch.setenv("SPECVIZ_TIMINGS", "1")
    compare = handler(demo, "compare")
    with pytest.raises(gr.Error, match="choose at least one method"):
        list(compare.fn(named(compare, Methods=[])))
    frames = list(compare.fn(named(compare, Methods=["scd-mc"], Prompt="sun", **{"Window W": 32})))
    note = next(v for c, v in frames[-1].items() if getattr(c, "elem_id", None) == "compare-note")
    table = next(v for c, v in frames[-1].items() if isinstance(c, gr.Dataframe))
    assert "'sun'" in note and [row[0] for row in table] == ["ar", "scd-mc"] and table[1][1].startswith("window 32")


def test_the_method_controls_follow_the_method(demo):
    changed = handler(demo, "method_changed")
    updates = changed.fn("peanut")  # keyed by component
    assert set(updates) == set(changed.outputs) and len(updates) == len(PARAMETERS) + 1  # and the lossy note
    shown = {label for label, update in by_label(updates).items() if update.get("visible")}
    assert {"Drafter", "Window W"} & shown == {"Drafter"}
    defaults = by_label(handler(demo, "model_defaults").fn("emu3"))  # its release settings
    assert defaults["Top-k (0 = off)"]["value"] == get_entry("emu3").sampling().top_k
    assert defaults["Guidance scale (1 = off)"]["value"] == 3.0


def test_the_acceptance_map_kinds_hide_for_a_continuous_run(demo):
    """A continuous run has one map (where each token came from): the radio of window-map kinds goes."""
    from types import SimpleNamespace

    kinds = handler(demo, "map_kinds")
    assert kinds.fn({"trace": SimpleNamespace(continuous=True)})["visible"] is False
    assert kinds.fn({"trace": SimpleNamespace(continuous=False)})["visible"] is True
    assert kinds.fn({})["visible"] is True  # a fresh page


def test_an_upload_claiming_a_generation_order_is_decoded_only_by_a_random_order_model(demo):
    """A tiny trace with a (reversed) generation order loads, but tiny decodes raster runs only: its views
    show no image rather than failing (`decode` of a raster model takes no order)."""
    from pathlib import Path

    import specviz
    from specviz.trace import Trace
    from specviz.ui.loading import decoder_for

    trace = Trace.load(Path(specviz.__file__).parent / "data" / "examples" / "red-apple-sjd.json")
    reordered = trace.model_copy(
        update={"geometry": trace.geometry.model_copy(update={"order": list(range(256))[::-1]})}
    )
    assert decoder_for(trace) is not None and decoder_for(reordered) is None
