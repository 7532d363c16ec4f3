"""The side panel: model, method and its parameters, prompt, seed, sampling, display options.

`Controls` holds the components by name: handlers receive a `RunRequest` (named settings), never a list of
values to unpack. The pure functions here give the updates a change of model, method, preset or replayed
trace makes, by the names `Controls` gives the components they set, and are tested without a server.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import gradio as gr

from specviz.core.catalogue import BASELINE, is_baseline
from specviz.core.inputs import MAX_PROMPT_CHARS, brief, check_prompt, check_seed
from specviz.core.params import Parameters, all_fields
from specviz.core.settings import SamplingSettings, SettingsError
from specviz.decoding import METHODS, get_method
from specviz.decoding.budget import check_pass_memory
from specviz.models.protocol import ImageModel
from specviz.models.registry import MODELS, get_entry
from specviz.models.tiny.text import nearest_known
from specviz.trace import Trace
from specviz.ui.compute import on_compute_thread, request_memory
from specviz.ui.errors import user_errors
from specviz.ui.loading import default_model, offered_models
from specviz.ui.outputs import Outputs
from specviz.ui.presets import PRESET_BY_KEY
from specviz.viz.narration import promise

DEFAULT_METHOD = "sjd"  # what Run races first on a discrete model
COMPARED = ("sjd", "scd-mc", "scd-gs")  # Compare's first selection on a discrete model
EXAMPLES = ["red apple", "grinning face", "cat face", "rocket", "four leaf clover", "a smiling sun", "blue car"]


def method_label(name: str) -> str:
    method = METHODS[name]
    if method.lossless:
        return f"{name} (lossless)"
    if method.lossless_when_greedy:
        return f"{name} (lossy unless greedy)"
    return f"{name} ({promise(name, False)})"  # 'lossy', or README's 'close to exact, measured'


def model_choices() -> list[tuple[str, str]]:
    choices = []
    for entry in (MODELS[name] for name in offered_models()):
        reason = entry.offline()
        choices.append((entry.name if reason is None else f"{entry.name} (weights needed)", entry.name))
    return choices


def sampling_from(temperature: float, top_k: float | None, top_p: float, guidance: float) -> SamplingSettings:
    """UI values to settings; top-k 0 (or empty) in the UI means no top-k. SamplingSettings checks the rest."""
    if top_k in (None, 0):
        top_k = None
    elif isinstance(top_k, float) and top_k.is_integer():
        top_k = int(top_k)
    return SamplingSettings(temperature=temperature, top_k=top_k, top_p=top_p, guidance_scale=guidance)


def seed_from(value: float | None) -> int:
    """The UI's seed: an emptied box means 0; anything else must be an integer from 0 to 2**63 - 1."""
    return check_seed(0 if value is None else value)


METHOD_FIELDS = all_fields([method.parameters for method in METHODS.values()])
PARAMETERS = tuple(METHOD_FIELDS)  # the method controls, in order


def own_parameters(method: str) -> dict:
    """The method's parameter names and defaults."""
    return METHODS[method].parameters().to_dict()


def method_control(name: str, shown_for: str) -> gr.components.Component:
    """The control of one method parameter, built from its declaration."""
    kind, spec = METHOD_FIELDS[name]
    own = own_parameters(shown_for)
    visible, value = name in own, own.get(name, getattr(_first_owner(name).parameters(), name))
    if kind is bool:
        return gr.Checkbox(value, label=spec.label, info=spec.help, visible=visible)
    if spec.choices:
        return gr.Dropdown(list(spec.choices), value=value, label=spec.label, visible=visible)
    if kind is int:  # not a slider: a browser slider clamps a typed 500 to its maximum without a word
        return gr.Number(value, precision=0, minimum=spec.low, maximum=spec.high, label=spec.label, visible=visible)
    return gr.Slider(spec.low, spec.high, value=value, step=0.01, label=spec.label, visible=visible)


def _first_owner(name: str):
    return next(method for method in METHODS.values() if name in method.parameters().to_dict())


def sampling_text(sampling: SamplingSettings) -> str:
    """Sampling settings as a table caption states them."""
    top_k = "off" if sampling.top_k is None else sampling.top_k
    return (
        f"temperature {sampling.temperature:g}, top-k {top_k}, top-p {sampling.top_p:g}, "
        f"guidance {sampling.guidance_scale:g}"
    )


def params_text(params: dict | None) -> str:
    """A method's parameters in one cell: 'window 16, init random'; AR has none."""
    return ", ".join(f"{name.replace('_', ' ')} {value}" for name, value in (params or {}).items()) or "none"


def sampling_updates(sampling: SamplingSettings) -> dict[str, dict]:
    """The sampling controls (`Controls.sampling`) set to these settings; top-k off is 0."""
    return {
        "temperature": gr.update(value=sampling.temperature),
        "top_k": gr.update(value=sampling.top_k or 0),
        "top_p": gr.update(value=sampling.top_p),
        "guidance": gr.update(value=sampling.guidance_scale),
    }


def known_prompts(name: str) -> tuple[list[str], str | None]:
    """The names the model was trained on, where the project knows them, and a line saying so."""
    if name not in MODELS:
        return [], None
    entry = get_entry(name)
    known = entry.known_prompts()
    if entry.class_conditional:
        return known, f"{name} draws the {len(known):,} ImageNet classes: pick one, or type a name or an index"
    return known, (f"{name} knows {len(known):,} names; free text gives the nearest it learned" if known else None)


def known_prompts_of(name: str) -> dict:
    """The known-names list for the chosen model, hidden where there is none."""
    known, info = known_prompts(name)
    return gr.update(choices=known, value=None, visible=bool(known), info=info)


def methods_for(name: str) -> list[str]:
    """The methods to race against AR on this model: those for its kind of tokens (and that its draft
    model allows: a pair without one races AR alone)."""
    entry = get_entry(name) if name in MODELS else None
    if entry is None or not entry.continuous:
        return [n for n, m in METHODS.items() if not is_baseline(n) and m.iterate]
    names = [n for n, m in METHODS.items() if not is_baseline(n) and m.iterate_continuous]
    return [n for n in names if entry.has_draft or not METHODS[n].needs_draft] or [BASELINE]


def default_method(names: list[str]) -> str:
    """The method Run races first among a model's methods."""
    return DEFAULT_METHOD if DEFAULT_METHOD in names else ("cspd" if "cspd" in names else names[0])


def compared_methods(names: list[str]) -> list[str]:
    """Compare's first selection among a model's methods."""
    return [n for n in COMPARED if n in names] or [n for n in names if METHODS[n].lossless][:2]


def methods_of(name: str) -> dict[str, dict]:
    """The method list, its default and parameters, and the Compare choices (`compare_methods`) for the
    chosen model."""
    names = methods_for(name)
    default = default_method(names)
    return {
        "method": gr.update(choices=[(method_label(n), n) for n in names], value=default),
        **method_updates(default),
        "compare_methods": gr.update(choices=names, value=compared_methods(names)),
    }


def model_defaults(name: str) -> dict[str, dict]:
    """The sampling controls at the chosen model's own defaults (its release settings), read from the
    registry without loading its weights."""
    return sampling_updates(get_entry(name).sampling())


def method_updates(name: str, values: dict | None = None) -> dict[str, dict]:
    """The method controls (`Controls.method_outputs`: each named by its parameter) showing only the method's
    own parameters, at `values` where given, else its defaults; then the lossy note."""
    own = {**own_parameters(name), **(values or {})}
    differs = "is close to AR's, not exactly it" if promise(name, False) != "lossy" else "differs from AR's"
    note = "" if METHODS[name].lossless else f"{method_label(name)}: its output distribution {differs}."
    hidden = gr.update(visible=False)
    shown = {p: gr.update(visible=True, value=own[p]) if p in own else hidden for p in PARAMETERS}
    return {**shown, "lossy_note": gr.update(value=note, visible=bool(note))}


def preset_controls(key: str) -> dict[str, dict]:
    """Every control a preset sets (`Controls.preset_outputs`): model, method, method controls, lossy note,
    prompt, seed, sampling, Compare's selection, the known names, the explanation, the race's speed."""
    preset = PRESET_BY_KEY[key]
    names = methods_for(preset.model)
    sampling = get_entry(preset.model).sampling()
    if preset.temperature is not None:
        sampling = dataclasses.replace(sampling, temperature=preset.temperature)
    compared = list(preset.compare) or compared_methods(names) or [preset.method]
    return {
        "model": gr.update(value=preset.model),
        "method": gr.update(choices=[(method_label(n), n) for n in names], value=preset.method),
        **method_updates(preset.method, preset.params),
        "prompt": gr.update(value=preset.prompt),
        "seed": gr.update(value=preset.seed),
        **sampling_updates(sampling),
        "compare_methods": gr.update(choices=names, value=compared),
        "known_names": known_prompts_of(preset.model),
        "preset_note": gr.update(value=preset.explanation),
        "speed": gr.update(value="slow" if preset.slow_motion else "live"),
    }


def restored_controls(trace: Trace) -> tuple[dict[str, dict], list[str]]:
    """The controls set to an uploaded trace's settings, so that Run repeats it (`Controls.restored_outputs`:
    model, method, the method controls and the lossy note, prompt and seed, then sampling; those it cannot
    set are left as they are); and what could not be set, in words."""
    unchanged: list[str] = []
    restored = {}
    if trace.model in offered_models():
        restored["model"] = gr.update(value=trace.model)
    else:
        unchanged.append(f"model {trace.model} is not offered here")
    if trace.method in METHODS and not is_baseline(trace.method):
        # the method list of the trace's kind of tokens, which the model shown before may not offer
        raced = methods_for(trace.model)
        names = raced if trace.method in raced else [n for n in METHODS if not is_baseline(n)]
        choices = [(method_label(n), n) for n in names]
        restored["method"] = gr.update(value=trace.method, choices=choices)
        restored.update(method_updates(trace.method, trace.params))
    else:
        unchanged.append(f"{trace.method} is not a method to race against AR")
    restored.update(prompt=gr.update(value=trace.prompt), seed=gr.update(value=trace.seed))
    return {**restored, **sampling_updates(SamplingSettings(**trace.sampling.model_dump()))}, unchanged


def prompt_hint(model_name: str, text: str) -> tuple[str, str | None]:
    """For a prompt the model was not trained on: a line naming the nearest names it knows (by the
    prompt encoder's cosine similarity) and the nearest one to offer; nothing for a known name, an
    empty prompt, or a model without a list of names (a hub model, an ImageNet class model)."""
    if model_name not in MODELS or not text or not text.strip():
        return "", None
    entry = get_entry(model_name)
    known = [] if entry.class_conditional else entry.known_prompts()
    if not known or text.strip().lower() in {name.lower() for name in known}:
        return "", None
    nearest = nearest_known(text.strip(), tuple(known))
    names = ", ".join(f"*{name}* ({score:.2f})" for name, score in nearest)
    line = (
        f"{model_name} was not trained on this text; it draws what the prompt encoder puts near the names it "
        f"learned. Nearest: {names}."
    )
    return line, nearest[0][0]


@dataclass(frozen=True)
class RunRequest:
    """A run's settings as the side panel gives them, by name."""

    model: str
    method: str
    prompt: str
    seed: int
    sampling: SamplingSettings
    controls: dict  # every method control's value by parameter name, shown or not

    def params(self, method: str | None = None) -> Parameters:
        """The method's typed parameters (the request's method unless named), made from its controls by its
        parameter class, which refuses a bad value here; the run takes them as they are."""
        name = method or self.method
        return get_method(name).resolve({field: self.controls[field] for field in own_parameters(name)})

    def check(self, model: ImageModel, methods: list[str] | None = None) -> None:
        """Refuse what the runs would refuse (the prompt, each method's parameters and kind of tokens, the
        memory its passes need against a request's share) before any work starts, and before a GPU slot is
        taken for it; a method named twice (Compare) too: it would only hold the queue longer."""
        check_prompt(self.prompt)
        names = methods or [self.method]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise SettingsError(f"{brief(repeated[0])} is chosen more than once; compare each method once")
        geometry = model.geometry
        for name in names:
            spec, params = get_method(name), self.params(name)
            spec.runs_on(model)
            check_pass_memory(name, params, geometry.vocab_size, geometry.seq_len, request_memory(model))


@dataclass
class Controls:
    """The side panel's components, and the names under which handlers set them."""

    model: gr.Dropdown
    method: gr.Dropdown
    lossy_note: gr.Markdown
    prompt: gr.Textbox
    run_button: gr.Button
    stop_button: gr.Button
    prompt_hint: gr.Markdown
    use_nearest: gr.Button
    nearest: gr.State
    known_names: gr.Dropdown
    seed: gr.Number
    parameters: dict[str, gr.components.Component]
    temperature: gr.Slider
    top_k: gr.Number
    top_p: gr.Slider
    guidance: gr.Slider
    large: gr.Checkbox
    dark: gr.Checkbox

    @property
    def sampling(self) -> Outputs:
        """The sampling controls, named as `sampling_updates` and `sampling_from` name them."""
        named = {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p, "guidance": self.guidance}
        return Outputs(named)

    @property
    def method_outputs(self) -> Outputs:
        """What `method_updates` sets: the method controls, each named by its parameter, then the lossy note."""
        return Outputs(self.parameters, {"lossy_note": self.lossy_note})

    @property
    def run_inputs(self) -> set[gr.components.Component]:
        """A run's inputs; a handler given a set receives one dict keyed by component (`request`)."""
        return {self.model, self.method, self.prompt, self.seed, *self.parameters.values(), *self.sampling.values()}

    def request(self, data: dict, method: str | None = None) -> RunRequest:
        """The run's settings from a handler's dict of input values, checked (seed, sampling)."""
        return RunRequest(
            model=data[self.model],
            method=method or data[self.method],
            prompt=data[self.prompt],
            seed=seed_from(data[self.seed]),
            sampling=sampling_from(**{name: data[c] for name, c in self.sampling.items()}),
            controls={name: data[c] for name, c in self.parameters.items()},
        )

    def restored_outputs(self) -> Outputs:
        """What `restored_controls` sets."""
        return Outputs(
            {"model": self.model, "method": self.method},
            self.method_outputs,
            {"prompt": self.prompt, "seed": self.seed},
            self.sampling,
        )

    def preset_outputs(self, compare_methods: gr.CheckboxGroup, note: gr.Markdown, speed: gr.Radio) -> Outputs:
        """What `preset_controls` sets: the restored controls, Compare's selection, the known names, the
        preset's explanation (`note`) and the race's speed."""
        shown = {"compare_methods": compare_methods, "known_names": self.known_names, "preset_note": note}
        return Outputs(self.restored_outputs(), {**shown, "speed": speed})


def build() -> Controls:
    """The side panel, Run right under the prompt (on a 1280 x 720 projector it stays on the first screen),
    opened on the default model, its first method and its own sampling settings."""
    opened = default_model()
    method_names = methods_for(opened)
    first = default_method(method_names)
    defaults = get_entry(opened).sampling()  # read from the registry, without loading weights
    model = gr.Dropdown(model_choices(), value=opened, label="Model")
    method = gr.Dropdown(
        [(method_label(n), n) for n in method_names], value=first, label="Method", elem_id="method-choice"
    )
    lossy_note = gr.Markdown(visible=False, elem_classes="lossy-note")
    # the prompt limit in the browser too; the server refuses a longer one from any client (CheckedBlocks)
    # up to four lines before it scrolls: in large type a two-line box cut a three-line prompt's first line
    prompt = gr.Textbox(value="red apple", label="Prompt", max_lines=4, max_length=MAX_PROMPT_CHARS)
    with gr.Row():
        run_button = gr.Button("Run", variant="primary", elem_id="run-button")
        stop_button = gr.Button("Stop", elem_id="stop-button")
    prompt_hint = gr.Markdown(elem_id="prompt-hint")
    use_nearest = gr.Button(visible=False, size="sm", elem_id="use-nearest")
    nearest = gr.State(None)
    gr.Examples(EXAMPLES, inputs=prompt, label="Examples")
    known, known_info = known_prompts(opened)
    known_names = gr.Dropdown(
        known,
        value=None,
        filterable=True,
        label="Names it was trained on (type to search)",
        info=known_info,
        visible=bool(known),
    )
    seed = gr.Number(value=0, precision=0, label="Seed", minimum=0)
    parameters = {name: method_control(name, first) for name in PARAMETERS}
    with gr.Accordion("Sampling", open=False):
        temperature = gr.Slider(0.0, 2.0, value=defaults.temperature, step=0.05, label="Temperature (0 = greedy)")
        top_k = gr.Number(value=defaults.top_k or 0, precision=0, minimum=0, label="Top-k (0 = off)")
        top_p = gr.Slider(0.01, 1.0, value=defaults.top_p, step=0.01, label="Top-p")
        guidance = gr.Slider(0.0, 10.0, value=defaults.guidance_scale, step=0.5, label="Guidance scale (1 = off)")
    with gr.Row():
        large = gr.Checkbox(False, label="Large type")
        dark = gr.Checkbox(False, label="Dark")
    return Controls(
        model, method, lossy_note, prompt, run_button, stop_button, prompt_hint, use_nearest, nearest,
        known_names, seed, parameters, temperature, top_k, top_p, guidance, large, dark,
    )  # fmt: skip


def wire(controls: Controls, compare_methods: gr.CheckboxGroup) -> None:
    """What a change of model, method or prompt does to the other controls."""

    def method_changed(name: str) -> dict[str, dict]:
        """Show only the chosen method's own parameters, at its defaults where two methods share one."""
        return method_updates(name)

    # on the user's choice only (.input): a replay sets the method and its parameters together
    method_outputs = controls.method_outputs
    controls.method.input(method_outputs.set_by(method_changed), controls.method, method_outputs.components)
    sampling = controls.sampling
    controls.model.input(user_errors(sampling.set_by(model_defaults)), controls.model, sampling.components)
    controls.model.input(known_prompts_of, controls.model, controls.known_names)
    choices = Outputs({"method": controls.method}, method_outputs, {"compare_methods": compare_methods})
    controls.model.input(choices.set_by(methods_of), controls.model, choices.components)
    controls.known_names.input(lambda name: name or gr.update(), controls.known_names, controls.prompt)

    @user_errors
    def hint(model_name: str, text: str | None):
        """The nearest known names to the prompt being typed. The prompt is checked (its length first: the
        page's box and CheckedBlocks bound it) before any work, as a run checks it: a megabyte of text held
        the one compute thread for seconds."""
        if not text or not text.strip():  # an emptied box while typing: no hint, no complaint
            return "", gr.update(visible=False), None
        line, nearest = on_compute_thread(prompt_hint, model_name, check_prompt(text))
        offer = gr.update(value=f"Use \u201c{nearest}\u201d", visible=True) if nearest else gr.update(visible=False)
        return line, offer, nearest

    hint_outputs = [controls.prompt_hint, controls.use_nearest, controls.nearest]
    for trigger in (controls.prompt.change, controls.model.change):
        trigger(
            hint, [controls.model, controls.prompt], hint_outputs, show_progress="hidden", trigger_mode="always_last"
        )
    controls.use_nearest.click(lambda name: name or gr.update(), controls.nearest, controls.prompt)
