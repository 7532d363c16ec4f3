"""The app as a Hugging Face Space runs it: the models it offers, an allow-list without the embedded
`tiny`, ZeroGPU's conventions (a GPU slot only for GPU work, its duration from the request, arguments
and results that cross into its worker process), and a Space card that agrees with the code."""

from __future__ import annotations

import asyncio
import fnmatch
import inspect
import pickle
import types
from pathlib import Path

import gradio as gr
import pytest
import yaml
from gradio.state_holder import SessionState

from specviz.ui import loading

ROOT = Path(__file__).resolve().parents[1]
SPACE = ROOT / "spaces_config"


@pytest.fixture(autouse=True)
def embedded_models_on_the_cpu(monkeypatch):
    """The embedded models on the CPU, as on ZeroGPU, also where this suite runs beside a GPU (where they
    would otherwise take it: test_device_policy)."""
    monkeypatch.setenv(loading.DEVICE_ENV_VAR, "cpu")


@pytest.fixture
def on_a_space(monkeypatch):
    monkeypatch.setenv("SPACE_ID", "someone/specviz")
    monkeypatch.delenv(loading.MODELS_ENV_VAR, raising=False)


def _component(demo: gr.Blocks, label: str) -> gr.components.Component:
    return next(b for b in demo.blocks.values() if getattr(b, "label", None) == label)


def test_a_space_offers_both_embedded_models_and_an_owner_can_change_that(on_a_space, monkeypatch):
    assert loading.offered_models() == ["tiny", "tiny-uncertain", "tiny-continuous"] == loading.startup_models()
    assert loading.default_model() == "tiny"
    monkeypatch.setenv(loading.MODELS_ENV_VAR, "tiny-continuous, janus-pro")
    assert loading.offered_models() == ["tiny-continuous", "janus-pro"]
    assert loading.default_model() == "tiny-continuous"
    assert loading.startup_models() == ["tiny-continuous", "janus-pro"]  # named: loaded at start-up where it can


def test_the_cspd_preset_passes_every_check_where_tiny_continuous_is_offered(on_a_space):
    """On a Space the preset set the model to one the model menu did not offer, and the race refused it."""
    from specviz.ui.controls import preset_controls

    demo = app_demo()
    button = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "preset-cspd")
    pressed = next(fn for fn in demo.fns.values() if (button._id, "click") in fn.targets)
    race = next(fn for fn in demo.fns.values() if fn.api_name == "race")
    updates = pressed.fn(None, False)  # keyed by component, every output named; no race nor comparison going
    assert set(updates) == set(pressed.outputs)
    assert len(updates) == len(preset_controls("cspd")) + 3  # the tab, the summary and the press
    pressed_values = {c._id: u["value"] for c, u in updates.items() if isinstance(u, dict) and "value" in u}
    page = SessionState(demo)  # the visitor's page after the press: the preset's model, its methods
    asyncio.run(demo.postprocess_data(pressed, updates, page))
    values = [pressed_values.get(c._id, c.value) for c in race.inputs]
    assert asyncio.run(demo.preprocess_data(race, values, page))[:2] == ["tiny-continuous", "cspd"]


def app_demo() -> gr.Blocks:
    from specviz.ui import build

    return build()


@pytest.mark.parametrize("allowed", ["tiny-continuous", "janus-pro"])
def test_the_app_starts_with_an_allow_list_without_tiny(monkeypatch, allowed):
    """Opened on the first model offered, its methods and settings; presets of models not offered are
    not shown (none at all for a list without an embedded model)."""
    from specviz.models.registry import get_entry
    from specviz.ui.controls import methods_for

    monkeypatch.setenv(loading.MODELS_ENV_VAR, allowed)
    demo = app_demo()
    model, method = _component(demo, "Model"), _component(demo, "Method")
    assert model.value == allowed and [value for _, value in model.choices] == [allowed]
    assert method.value in methods_for(allowed)
    assert _component(demo, "Temperature (0 = greedy)").value == get_entry(allowed).sampling().temperature
    presets = [
        b.elem_id for b in demo.blocks.values() if isinstance(b, gr.Button) and (b.elem_id or "").startswith("preset-")
    ]
    assert presets == (["preset-cspd"] if allowed == "tiny-continuous" else [])


class FakeSpaces(types.ModuleType):
    """The `spaces` package as ZeroGPU runs it: a decorated call takes a GPU slot for the duration its
    callable gives, and its arguments and results cross into a worker process (pickled)."""

    def __init__(self):
        super().__init__("spaces")
        self.slots: list[tuple[str, int]] = []

    def disable_gradio_auto_wrap(self):
        pass

    def GPU(self, task, duration):  # the package spells it so
        def crossing(value):
            return pickle.loads(pickle.dumps(value))

        def generator(*args):
            self.slots.append((task.__name__, duration(*args)))
            for item in task(*crossing(args)):
                yield crossing(item)

        def function(*args):
            self.slots.append((task.__name__, duration(*args)))
            return crossing(task(*crossing(args)))

        return generator if inspect.isgeneratorfunction(task) else function


def test_only_gpu_work_takes_a_gpu_slot_for_as_long_as_the_request_needs(monkeypatch):
    spaces = FakeSpaces()
    monkeypatch.setattr(loading, "spaces", spaces)
    monkeypatch.setattr(loading, "needs_gpu", lambda name: name == "on-gpu")

    @loading.gpu_work(model=lambda name, passes: name, duration=lambda name, passes: loading.gpu_seconds(passes))
    def work(name: str, passes: int):
        yield from range(passes)

    assert list(work("on-cpu", 3)) == [0, 1, 2] and spaces.slots == []
    assert list(work("on-gpu", 300)) == list(range(300))
    assert spaces.slots == [("work", loading.GPU_START_SECONDS + 30)]


def test_a_race_on_a_gpu_model_runs_in_one_gpu_call_and_one_on_the_cpu_in_none(monkeypatch):
    """With `tiny` taken for a GPU model, the race enters spaces.GPU once, asks for a duration computed
    from the request (at most three passes per token: AR's, the method's and a draft's; slow motion's
    pauses) and sends only values that cross processes; on the CPU model, as it is, nothing takes a slot."""
    from specviz.core.settings import SamplingSettings
    from specviz.ui import race as race_tab
    from specviz.ui.controls import RunRequest
    from specviz.ui.race import race_seconds

    monkeypatch.setattr(race_tab, "needs_retiming", lambda model: False)  # a GPU's own clock is trusted
    on_the_cpu = loading.needs_gpu
    assert not on_the_cpu("tiny")
    spaces = FakeSpaces()
    monkeypatch.setattr(loading, "spaces", spaces)
    demo = app_demo()
    monkeypatch.setattr(loading, "needs_gpu", lambda name: name == "tiny")
    race = next(fn for fn in demo.fns.values() if fn.api_name == "race")
    frames = list(race.fn({c: c.value for c in race.inputs}))
    assert any(isinstance(c, gr.State) for c in frames[-1])  # the runs reached Inspect
    assert spaces.slots == [("race_frames", loading.gpu_seconds(3 * 256))]
    request = RunRequest("tiny", "sjd", "red apple", 0, SamplingSettings(), {})
    assert race_seconds(request, True) == loading.gpu_seconds(3 * 256, 256 * 0.6)
    monkeypatch.setattr(loading, "needs_gpu", on_the_cpu)
    costs = next(fn for fn in demo.fns.values() if fn.api_name == "measure_costs")
    note, _ = costs.fn("tiny", "red apple", {}, False, False)
    assert "pass" in note and len(spaces.slots) == 1


def test_models_sit_where_zerogpu_expects_them(monkeypatch):
    """On ZeroGPU the embedded models on the CPU though its torch says CUDA is there (no GPU slot for them);
    the others on CUDA, placed at start-up. (Off ZeroGPU the embedded ones take the GPU: test_device_policy.)"""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv(loading.ZERO_GPU_ENV_VAR, "true")
    monkeypatch.delenv(loading.DEVICE_ENV_VAR, raising=False)
    assert [loading.device_for(name) for name in ("tiny", "tiny-continuous", "janus-pro")] == ["cpu", "cpu", "cuda"]


def _card() -> dict:
    text = (SPACE / "README.md").read_text()
    return yaml.safe_load(text.split("---")[1])


def test_the_space_card_agrees_with_the_code_and_zerogpu():
    card = _card()
    assert card["sdk"] == "gradio" and card["app_file"] == "app.py" and (ROOT / card["app_file"]).is_file()
    assert card["sdk_version"] == gr.__version__  # the version the suite runs
    assert str(card["python_version"]).startswith(("3.12", "3.10"))  # ZeroGPU's Pythons; the code needs 3.11+
    assert str(card["python_version"]).startswith("3.12")
    assert "suggested_hardware" not in card  # it assigns nothing; the deploy steps say what the owner picks
    assert card["license"] == "other" and (SPACE / card["license_link"]).is_file()
    assert "apache-2.0" in card["license_name"] and "cc-by-sa-4.0" in card["license_name"]  # code, weights
    torch = next(line for line in (SPACE / "requirements.txt").read_text().splitlines() if line.startswith("torch"))
    assert torch.split("==")[1] in ("2.8.0", "2.9.1", "2.10.0", "2.11.0")  # the versions ZeroGPU lists


def test_the_space_stores_every_binary_file_with_xet():
    """The Hub refuses binary files pushed as plain git objects: the Space's .gitattributes sends each
    through Git LFS / Xet."""
    patterns = [
        line.split()[0]
        for line in (SPACE / ".gitattributes").read_text().splitlines()
        if "filter=lfs" in line and not line.startswith("#")
    ]
    binaries = [p for p in ROOT.glob("*/**/*") if p.suffix in (".safetensors", ".png") and ".cache" not in p.parts]
    binaries = [p for p in binaries if ".venv" not in p.parts]
    assert len(binaries) >= 10
    for path in binaries:
        assert any(fnmatch.fnmatch(path.name, pattern) for pattern in patterns), path
