"""The Compare tab: several methods against AR on one prompt and seed, timed as the race is; and what
a model pass costs on this device, which decides whether fewer passes are faster."""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass

import gradio as gr
from gradio.events import Dependency

from specviz import metrics, viz
from specviz.core.catalogue import BASELINE
from specviz.core.inputs import check_prompt
from specviz.core.settings import SamplingSettings, SettingsError
from specviz.core.timing import TIMING_BUDGET, timings_wanted
from specviz.decoding import run
from specviz.measure.cost import SIZES, PassCost, cost_sentence, pass_costs
from specviz.measure.race import needs_retiming, retimed
from specviz.trace import Trace
from specviz.ui.activity import FIRST_LOAD
from specviz.ui.compute import (
    OUT_OF_TIME,
    VIEWER_WORK,
    Deadline,
    each_on_compute_thread,
    on_compute_thread,
    request_memory,
)
from specviz.ui.controls import Controls, RunRequest, compared_methods, params_text, sampling_text
from specviz.ui.errors import user_errors
from specviz.ui.loading import get_model, gpu_seconds, gpu_work, loaded_model
from specviz.ui.outputs import Outputs

COMPARE_HEADERS = [
    "method", "parameters", "lossless", "NFE", "drafts changed", "step compression", "seconds", "latency against AR"
]  # fmt: skip


def _changed_text(trace: Trace) -> str:
    """The share of carried drafts whose token changed (the SCD effect), or a dash for a run that carries none."""
    share = metrics.changed_share(trace.iterations)
    return "-" if share is None else f"{share:.0%}"


def compare_rows(ar: Trace, traces: list[Trace]) -> tuple[list[list], list[dict]]:
    """Compare's table (AR first) and the rows of its chart; ratios in words, a slowdown as one, the latency
    in the race's verdict (`viz.run_verdict`) with its spread over the undisturbed timings where the runs had
    them."""
    same = viz.ratio_text(1.0)
    # seconds on the verdicts' clock (every row timed alike: the first row's tells); see `compare_caption`
    clock = metrics.verdict_clock(traces[0], ar) if traces else "wall"
    table = [
        [BASELINE, params_text(ar.params), "yes", ar.nfe, "-", same, round(metrics.clock_seconds(ar, clock), 3), same]
    ]
    rows = []
    for trace in traces:
        facts = metrics.summary(trace, ar)
        verdict = viz.run_verdict(trace, ar)
        rows.append(
            {
                "method": trace.method,
                "lossless": trace.lossless,
                **facts,
                "latency_speedup": verdict.value,
                "latency_spread": verdict.spread,
            }
        )
        table.append(
            [
                trace.method,
                params_text(trace.params),
                "yes" if trace.lossless else "no",
                trace.nfe,
                _changed_text(trace),
                viz.ratio_text(facts["step_compression"]),
                round(metrics.clock_seconds(trace, clock), 3),
                verdict.cell,
            ]
        )
    return table, rows


def compare_caption(ar: Trace) -> str:
    """What every row of Compare's table shares: model, prompt, seed, sampling, and how it was timed."""
    sampling = SamplingSettings(**ar.sampling.model_dump())
    if not ar.timings:
        how = "clocks of the runs themselves"
    else:
        clock = f"their {viz.COMPUTE_CLOCK}" if ar.compute_timings else "the wall clock"
        how = (
            f"seconds and latency: from {len(ar.timings)} runs of each with nothing drawing, all runs in turns, "
            f"as the race times its two (seconds their median), on {clock}"
        )
    return (
        f"**{ar.model}** · prompt {ar.prompt!r} · seed {ar.seed} · sampling: {sampling_text(sampling)} "
        f"(the same for every row) · {how}."
    )


@dataclass
class CompareTab:
    methods: gr.CheckboxGroup
    button: gr.Button
    note: gr.Markdown
    table: gr.Dataframe
    plot: gr.Plot
    cost_button: gr.Button
    cost_note: gr.Markdown
    cost_plot: gr.Plot
    cost_panel: gr.Accordion
    comparing: gr.State  # True while a comparison runs (Stop reads it)


def build(method_names: list[str]) -> CompareTab:
    with gr.Tab("Compare", id="compare"):
        methods = gr.CheckboxGroup(method_names, value=compared_methods(method_names), label="Methods")
        button = gr.Button("Compare on this prompt and seed")
        note = gr.Markdown(elem_id="compare-note")
        # widths that keep every column on a 1280 px screen in large type too, each header's longest word whole;
        # tall enough for every method's row without scrolling
        table = gr.Dataframe(
            headers=COMPARE_HEADERS,
            interactive=False,
            wrap=True,
            column_widths=["10%", "22%", "11%", "6%", "10%", "15%", "10%", "16%"],
            max_height=2000,
            elem_id="compare-table",
        )
        plot = gr.Plot()
        with gr.Accordion(
            "What a pass costs here (why fewer passes are not always faster)", open=False, elem_id="cost-panel"
        ) as cost_panel:
            cost_button = gr.Button("Measure pass costs on this device", size="sm")
            cost_note = gr.Markdown(elem_id="cost-note")
            cost_plot = gr.Plot()
    comparing = gr.State(False, render=False)  # rendered by the page outside the tab bar (`layout`)
    return CompareTab(methods, button, note, table, plot, cost_button, cost_note, cost_plot, cost_panel, comparing)


def compare_seconds(request: RunRequest, selected: list[str], big: bool, night: bool) -> int:
    """GPU time for a comparison: AR and each method, each at most one pass per token of the target and
    one of a draft model."""
    return gpu_seconds(2 * (1 + len(selected)) * get_model(request.model).geometry.seq_len)


def cost_seconds(model_name: str, prompt: str) -> int:
    """GPU time for the pass costs: one warm-up and five timed passes of each size (`pass_costs`)."""
    return gpu_seconds(6 * len(SIZES))


class LiveComparison:
    """A comparison as it runs, as frames keyed by name (plain values: inside a GPU call they cross processes):
    AR and the selected methods in turns, then (on a CPU) all timed again; its runs so far."""

    def __init__(self, request: RunRequest, selected: list[str]):
        self.request, self.selected = request, selected
        self.model = get_model(request.model)
        self.total = len(selected) + 1
        self.deadline = Deadline()  # every run and timing round of the comparison within one request's budget
        self.limits = {"memory": request_memory(self.model), "between_passes": self.deadline.check}
        self.ar: Trace | None = None
        self.traces: list[Trace] = []
        self.abandoned = ""  # why timing again stopped early, said after the caption

    def progress(self, note: str) -> str:
        return f"*Comparing AR and {', '.join(self.selected)}: {note}...*"

    def one(self, name: str, params: dict | None = None) -> Trace:
        """One run of `name` on the comparison's prompt, seed and sampling, within its budget."""
        work, request = functools.partial(run, **self.limits), self.request
        return on_compute_thread(work, self.model, name, request.prompt, request.seed, request.sampling, params)

    def runs(self) -> Iterator[dict[str, object]]:
        """AR, then each method in turn: the table grows by a row after each."""
        yield {"table": [], "plot": None, "note": self.progress(f"0 of {self.total} runs done"), "comparing": True}
        self.ar = self.one(BASELINE)
        for name in self.selected:
            self.traces.append(self.one(name, self.request.params(name)))
            note = self.progress(f"{len(self.traces) + 1} of {self.total} runs done")
            yield {"table": compare_rows(self.ar, self.traces)[0], "note": note}

    def timings(self) -> Generator[dict[str, object], None, bool]:
        """All the runs timed again in turns with nothing drawing, as the race times its two, the note saying how
        far; returns whether the visitor still waits."""
        wanted = timings_wanted()
        rounds = retimed(self.model, [self.ar, *self.traces], wanted, TIMING_BUDGET, interruptions=VIEWER_WORK)
        for timed in each_on_compute_thread(rounds):
            if not self.deadline.wanted():  # the visitor left: nobody reads the clocks
                return False
            if self.deadline.left < 0:  # the request's time is up: the clocks of the rounds done stand
                self.abandoned = OUT_OF_TIME
                break
            if timed is None:  # a pass done: Inspect's pictures may take the compute thread now
                continue
            self.ar, *self.traces = timed.traces
            if timed.abandoned:  # a repeat drew other tokens: keep the clocks so far, and say so
                self.abandoned = " Timing again was abandoned: a repeat drew other tokens."
                break
            note = f"timing all {self.total} runs again with nothing drawing, {timed.done} of {wanted}"
            yield {"note": self.progress(note)}
        return True

    def result(self, big: bool, night: bool) -> dict[str, object]:
        """The finished table, its chart and the caption every row shares."""
        table, rows = compare_rows(self.ar, self.traces)
        return {
            "table": table,
            "plot": viz.comparison_figure(rows, dark=night, large=big),
            "note": compare_caption(self.ar) + self.abandoned,
            "comparing": False,
        }


def comparison(request: RunRequest, selected: list[str], big: bool, night: bool) -> Iterator[dict[str, object]]:
    """AR and the selected methods run in turns, then (on a CPU) all timed again, as the race times its two;
    frames for the table, chart and note keyed by name (plain values: inside a GPU call they cross
    processes)."""
    live = LiveComparison(request, selected)
    yield from live.runs()
    if needs_retiming(live.model) and not (yield from live.timings()):
        return  # the visitor left while the runs were timed again
    yield live.result(big, night)


def measured_costs(model_name: str, prompt: str) -> list[PassCost]:
    """Passes of 1 to 33 tokens on the chosen model, timed."""
    return on_compute_thread(pass_costs, get_model(model_name), prompt)


def wire_compare(tab: CompareTab, controls: Controls) -> Dependency:
    """Compare: the selected methods against AR on the side panel's settings; returns its event (Stop cancels it)."""
    # entered as GPU work where the model sits on a GPU (decorated here, when the page is built)
    frames = gpu_work(model=lambda request, selected, big, night: request.model, duration=compare_seconds)(
        user_errors(comparison)
    )
    shown = Outputs({"table": tab.table, "plot": tab.plot, "note": tab.note, "comparing": tab.comparing})

    @user_errors
    @shown.set_by
    def compare(data: dict) -> Iterator[dict]:
        selected = data[tab.methods]
        if not selected:
            raise SettingsError("choose at least one method to compare")
        request = controls.request(data, method=BASELINE)
        if loaded_model(request.model) is None:  # its first load (minutes for a released model) said, not silent
            check_prompt(request.prompt)
            # comparing: Stop during the load then says it stopped, rather than leave this line standing
            yield {"note": f"*Comparing once {request.model} has loaded ({FIRST_LOAD})...*", "comparing": True}
            try:
                get_model(request.model)
            except Exception:  # the page shows the message; the note must not go on saying it loads
                yield {"note": "*Nothing was compared: the message above says why.*", "comparing": False}
                raise
        request.check(get_model(request.model), selected)  # refused here, before any work or GPU slot
        yield from frames(request, selected, data[controls.large], data[controls.dark])

    return tab.button.click(
        compare,
        controls.run_inputs - {controls.method} | {tab.methods, controls.large, controls.dark},
        shown.components,
        concurrency_limit=1,
        concurrency_id="gpu",
        show_progress_on=tab.note,  # the rows arrive one by one; a refusal marks the note, not the table
    )


def raced_verdict(state: dict) -> viz.LatencyVerdict | None:
    """The latency verdict the last run's race gave, in its words; None without its AR run, or for a draft
    model alone (its race gives a cost ratio)."""
    if not state or state.get("ar") is None or metrics.draft_alone(state["trace"]):
        return None
    return viz.run_verdict(state["trace"], state["ar"])


def wire_costs(tab: CompareTab, controls: Controls, runs: gr.State) -> Callable[[Dependency], Dependency]:
    """The cost panel's button; returns what chains the pass costs' measurement after another event."""
    costs = gpu_work(model=lambda model_name, prompt: model_name, duration=cost_seconds)(user_errors(measured_costs))

    @user_errors
    def measure_costs(model_name: str, text: str, state: dict, big: bool, night: bool):
        """Time passes of 1 to 33 tokens on the chosen model and say what that does to the last run's speedup,
        beside the latency its race measured, in the race's words."""
        measured = costs(model_name, check_prompt(text))
        compression = metrics.summary(state["trace"])["step_compression"] if state else None  # the last run's
        sentence = cost_sentence(measured, compression, measured=raced_verdict(state))
        return sentence, viz.pass_cost_figure(measured, dark=night, large=big)

    cost_inputs = [controls.model, controls.prompt, runs, controls.large, controls.dark]
    cost_options = {"concurrency_limit": 1, "concurrency_id": "gpu"}
    tab.cost_button.click(measure_costs, cost_inputs, [tab.cost_note, tab.cost_plot], **cost_options)

    def measure_after(event: Dependency) -> Dependency:
        """Chain the pass costs' measurement after `event` (the race tab's 'why' opens the panel first)."""
        return event.then(measure_costs, cost_inputs, [tab.cost_note, tab.cost_plot], **cost_options)

    return measure_after


def wire(tab: CompareTab, controls: Controls, runs: gr.State) -> tuple[Dependency, Callable[[Dependency], Dependency]]:
    """Compare and the cost panel; returns Compare's event, which Stop cancels, and what chains the pass
    costs' measurement after another event."""
    return wire_compare(tab, controls), wire_costs(tab, controls, runs)
