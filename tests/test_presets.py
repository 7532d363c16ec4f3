"""Presets: every one sets a valid model, method, parameters and prompt, and the runs they quote are
what the embedded models do."""

from __future__ import annotations

import gradio as gr
import pytest

from specviz import metrics
from specviz.decoding import METHODS, run
from specviz.models.registry import get_entry, load_model
from specviz.ui.controls import PARAMETERS, methods_for, preset_controls
from specviz.ui.presets import PRESET_BY_KEY, PRESETS


@pytest.mark.parametrize("preset", PRESETS, ids=lambda preset: preset.key)
def test_a_preset_sets_every_control_to_something_that_runs(preset):
    assert preset.method in methods_for(preset.model)
    METHODS[preset.method].resolve(preset.params)  # raises on a parameter the method does not take
    updates = preset_controls(preset.key)
    assert set(updates) >= {"model", "method", *PARAMETERS, "lossy_note", "prompt", "seed", "top_k", "top_p"}
    assert updates["model"]["value"] == preset.model and updates["method"]["value"] == preset.method
    shown = {name: updates[name]["value"] for name in PARAMETERS if updates[name].get("visible")}
    assert {**shown, **preset.params} == shown  # the preset's values are on the visible controls
    assert updates["prompt"]["value"] == preset.prompt and updates["seed"]["value"] == preset.seed
    default = get_entry(preset.model).sampling()
    assert updates["temperature"]["value"] == (preset.temperature or default.temperature)
    assert updates["guidance"]["value"] == default.guidance_scale
    compared = updates["compare_methods"]
    assert set(compared["value"]) <= set(compared["choices"]) and updates["preset_note"]["value"] == preset.explanation
    assert updates["known_names"]["visible"] == bool(get_entry(preset.model).known_prompts())
    assert updates["speed"]["value"] == ("slow" if preset.slow_motion else "live")


def test_presets_whose_mechanism_is_over_in_a_second_race_in_slow_motion_for_under_a_minute(tiny):
    """A slow-motion preset shows each of the method's passes for SLOW_MOTION_PAUSE: a few dozen passes,
    so the class sees the mechanism and the race ends within a minute."""
    from specviz.ui.race import SLOW_MOTION_PAUSE

    slow = [preset for preset in PRESETS if preset.slow_motion]
    assert {preset.key for preset in slow} >= {"sjd-init", "sjd-pac"}
    for preset in slow:
        model = tiny if preset.model == "tiny" else load_model(preset.model)
        trace = run(model, preset.method, preset.prompt, preset.seed, params=preset.params)
        assert trace.nfe * SLOW_MOTION_PAUSE < 60, f"{preset.key}: {trace.nfe} passes in slow motion"


@pytest.mark.parametrize(
    ("key", "nfe"),
    [("sjd-init", 37), ("stall", 178), ("peanut-depth", 50), ("zipar", 136)],
)
def test_the_runs_a_preset_quotes_are_what_the_model_does(tiny, key, nfe):
    preset = PRESET_BY_KEY[key]
    trace = run(tiny, preset.method, preset.prompt, preset.seed, params=preset.params)
    assert trace.nfe == nfe and f"{nfe} passes" in preset.explanation
    if key == "stall":
        longest = current = 0
        for iteration in trace.iterations:
            current = current + 1 if iteration.accepted == 0 else 0
            longest = max(longest, current)
        assert longest == 83 and "stalls 83 passes" in preset.explanation
        # Inspect opens on the 83-pass stall's first pass (an 18-pass one comes first), not on the run's
        # first acceptance and rejection
        assert metrics.stalls(trace)[:2] == [(17, 18), (36, 83)]
        assert metrics.opening_iteration(trace, preset.opens_on) == 36
        # without the preset's focus it opens where a quarter of the picture is drawn, on the rule at work
        assert metrics.opening_iteration(trace) in metrics.passes_in_picture(trace)
        assert metrics.opening_iteration(trace) != 36
        assert "opens on the long stall's first pass" in preset.explanation


def test_the_scd_preset_shows_the_effect_it_quotes_on_the_uncertain_model():
    preset = PRESET_BY_KEY["scd-effect"]
    model = get_entry(preset.model).load()
    method, baseline = (
        run(model, name, preset.prompt, preset.seed, params=preset.params) for name in ("scd-mc", "sjd")
    )
    assert (method.nfe, baseline.nfe) == (72, 89) and "72 passes against SJD's 89" in preset.explanation

    def changed(trace) -> float:
        return sum(it.changed for it in trace.iterations) / sum(it.carried for it in trace.iterations)

    assert changed(method) < changed(baseline) - 0.1  # coupled redraws keep what SJD's fresh ones change


def test_the_sjd_pac_preset_quotes_what_compare_shows():
    """Compare runs each method on the side panel's controls, which methods share by parameter name: after this
    preset SJD runs at SJD-PAC's window of 53 (its other controls hidden, at their defaults on a fresh page), so
    the preset quotes that run of SJD, and its own window-16 average apart."""
    from specviz.ui.compare import LiveComparison
    from specviz.ui.controls import RunRequest, sampling_from

    preset = PRESET_BY_KEY["sjd-pac"]
    updates = preset_controls(preset.key)
    sampling = sampling_from(*(updates[name]["value"] for name in ("temperature", "top_k", "top_p", "guidance")))
    controls = {name: updates[name].get("value") for name in PARAMETERS}  # None: a hidden control's default
    request = RunRequest(preset.model, preset.method, preset.prompt, preset.seed, sampling, controls)
    *_, shown = LiveComparison(request, list(updates["compare_methods"]["value"])).runs()
    nfe = {row[0]: row[3] for row in shown["table"]}
    assert (nfe["sjd-pac"], nfe["sjd"]) == (62, 86) and METHODS["sjd"].resolve(request.params("sjd")).window == 53
    assert "62 passes; press Compare" in preset.explanation and "SJD at window 53 takes 86" in preset.explanation
    sjd = run(get_entry(preset.model).load(), "sjd", preset.prompt, preset.seed, sampling, {"window": 16})
    assert sjd.nfe == 103 and "(103 at window 16)" in preset.explanation


def test_the_pjd_preset_quotes_what_compare_shows():
    """Compare runs SJD at PJD's window of 8 (methods share controls by name), so the preset quotes that run
    beside its own window-16 figure; the run shows several rows in flight at once."""
    from specviz.ui.compare import LiveComparison
    from specviz.ui.controls import RunRequest, sampling_from

    preset = PRESET_BY_KEY["pjd"]
    updates = preset_controls(preset.key)
    sampling = sampling_from(*(updates[name]["value"] for name in ("temperature", "top_k", "top_p", "guidance")))
    controls = {name: updates[name].get("value") for name in PARAMETERS}
    request = RunRequest(preset.model, preset.method, preset.prompt, preset.seed, sampling, controls)
    runs = LiveComparison(request, list(updates["compare_methods"]["value"])).runs()
    *_, shown = runs
    nfe = {row[0]: row[3] for row in shown["table"]}
    assert (nfe["pjd"], nfe["sjd"], nfe["zipar"]) == (91, 119, 136)
    assert "seed 0: 91 passes" in preset.explanation and "window of 8 and takes 119" in preset.explanation
    model = get_entry(preset.model).load()
    assert run(model, "sjd", preset.prompt, preset.seed, sampling, {"window": 16}).nfe == 103
    assert "(103 at window 16)" in preset.explanation
    pjd = run(model, "pjd", preset.prompt, preset.seed, sampling)
    assert max(len(it.windows or []) for it in pjd.iterations) == 3  # the first pass, from the prefill, has none


def test_the_cspd_preset_quotes_its_run_and_the_run_without_pre_filling():
    preset = PRESET_BY_KEY["cspd"]
    pair = get_entry(preset.model).load()
    alphas = [
        metrics.draft_acceptance(
            run(pair, preset.method, preset.prompt, preset.seed, params={**preset.params, **off}).iterations
        )
        for off in ({}, {"prefill": 0.0})
    ]
    assert (
        preset.contrast
        and f"accepts {alphas[0]:.2f} of the drafts with pre-filling and {alphas[1]:.2f} without"
        in (preset.explanation)
    )


@pytest.fixture(scope="module")
def demo():
    from specviz.ui import build

    return build()


def _pressed(demo, button: gr.Button) -> list:
    """What the handlers a button's click sets off return for the page's tabs."""
    tabs = next(block for block in demo.blocks.values() if isinstance(block, gr.Tabs))
    shown = []
    for fn in demo.fns.values():
        if (button._id, "click") in fn.targets and tabs in fn.outputs:
            if len(fn.inputs) > 2:  # Run: its settings too, checked before the race is queued
                values = fn.fn({component: component.value for component in fn.inputs})
            else:  # a preset: the race's activity and Compare's, none going
                values = fn.fn(None, False)
            # queued (an unqueued refusal never reached the page), but not behind the compute queue's work
            assert fn.queue is not False and fn.concurrency_id != "gpu", f"{button.elem_id}'s first answer waits"
            summary = next(c for c in fn.outputs if getattr(c, "elem_id", None) == "race-summary")
            assert values[summary] == "*Starting the race...*", f"{button.elem_id}: {values[summary]}"
            shown.append(values[tabs])
    return shown


def test_run_and_every_preset_show_the_race_tab(demo):
    """Pressed from Inspect (or Compare), Run and each preset open the Race tab: the race no longer runs unseen
    while Inspect shows the previous run."""
    buttons = [block for block in demo.blocks.values() if isinstance(block, gr.Button)]
    runs = [button for button in buttons if button.elem_id in ("run-button", "projector-run")]
    presets = [button for button in buttons if (button.elem_id or "").startswith("preset-")]
    assert len(runs) == 2 and len(presets) == len(PRESETS)
    for button in runs + presets:
        shown = _pressed(demo, button)
        assert [getattr(tab, "selected", None) for tab in shown] == ["race"], f"{button.elem_id}: {shown}"


def test_run_refused_is_said_at_once_and_races_nothing(demo):
    """Run with settings the race would refuse (an empty prompt) says why at the press, before the compute
    queue, and no race follows (`.success`): before, the race was queued, and on a busy page the summary said it
    started while the refusal waited its turn."""
    button = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "run-button")
    press = next(fn for fn in demo.fns.values() if (button._id, "click") in fn.targets)
    prompt = next(c for c in press.inputs if isinstance(c, gr.Textbox) and c.label == "Prompt")
    data = {component: component.value for component in press.inputs} | {prompt: "   "}
    with pytest.raises(gr.Error, match="prompt"):
        press.fn(data)
    race = next(fn for fn in demo.fns.values() if fn.trigger_after == press._id)
    assert race.trigger_only_on_success and race.name == "race"


def test_a_presets_contrast_runs_only_on_its_own_fresh_race():
    """The CSpD preset's chain runs its contrast after its race; a race a new press ended also counts as done
    (its chain goes on), and the contrast then ran on the page's previous runs, or overwrote the new race's.
    It now runs only on the preset's own runs, not yet contrasted, with no press since."""
    from specviz.trace import Trace
    from specviz.ui import compute
    from specviz.ui.layout import its_own_contrast

    preset = PRESET_BY_KEY["cspd"]
    called = []
    contrast = its_own_contrast(preset, lambda state: called.append(state) or {**state, "contrast": ["second"]})
    trace = Trace.model_construct(model=preset.model, method=preset.method, prompt=preset.prompt, seed=preset.seed)
    other = Trace.model_construct(model="tiny", method="sjd", prompt="red apple", seed=0)
    assert contrast({"trace": other, "ar": other}) == gr.skip() and not called  # the page's previous runs
    assert contrast({"trace": trace, "contrast": ["done"]}) == gr.skip() and not called  # contrasted already
    token = compute.PAGE.set("a page")
    try:
        compute.race_pressed("stall")  # pressed since: the page wants another race
        assert contrast({"trace": trace}) == gr.skip() and not called
        compute.race_pressed(preset.key)
        assert contrast({"trace": trace})["contrast"] == ["second"] and len(called) == 1
    finally:
        compute.PAGE.reset(token)


def test_stop_after_a_press_says_the_race_never_began():
    from specviz.ui.activity import STARTING, RaceActivity, starting, stopped

    for summary in (STARTING, starting(RaceActivity("retiming", 1), False), starting(None, True)):
        said = stopped(None, False, summary)["summary"]  # its race still queued: "Starting..." would stay for good
        assert said.startswith("**Stopped** before the race began"), summary
    said = stopped(RaceActivity("retiming", 1), False, STARTING)["summary"]  # the old race's activity not yet cleared
    assert said.startswith("**Stopped** before the race began")
