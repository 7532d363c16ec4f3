"""PJD: its schedule of rows in flight and their windows, its row-causal mask through a real model, its runs
on `tiny` and on every family's test model (plain grids and row-end layouts), its traces, whose positions
are in the order each run decided them, and the views on them. Its deviation from AR, and its exactness
with one row in flight and no draft reused, are checked in test_lossless.py from its catalogue entry."""

import json

import numpy as np
import pytest
import torch
from model_zoo import FAMILIES

from specviz import metrics, viz
from specviz.core.params import PjdParameters
from specviz.core.settings import SamplingSettings
from specviz.decoding import run
from specviz.decoding.zipar import row_spans
from specviz.models.protocol import IMAGE_CELL, Geometry, decode_in_order, in_raster_order
from specviz.trace import Trace, TraceError

ATOL = 1e-4  # logits of the same tokens by passes of different shapes (test_contract.py)


def check_schedule(trace: Trace, geometry: Geometry, params: PjdParameters) -> int:
    """Replays a run's records against PJD's schedule on the raster `geometry`: the rows in flight are
    exactly those whose row above has `row_start` cells decided (or is complete), top row first; the top
    row's window reaches at most the last position of its row but one and it commits one token after its
    accepted drafts; a row below feeds min(window, d_above - d_row) tokens, its drafts at most at column
    d_above - 2, and commits its accepted drafts only. Returns the most rows in flight in one pass."""
    spans, cells = row_spans(geometry), geometry.cell_of_position()
    frontier = [begin for begin, _ in spans]
    decided = [0] * len(spans)  # image cells decided per row

    def place(positions: list[int]) -> None:
        for position in positions:
            row = next(r for r, (begin, end) in enumerate(spans) if begin <= position < end)
            assert position == frontier[row]  # each row decides its positions in raster order
            frontier[row] += 1
            decided[row] += cells[position] >= 0

    place(trace.iterations[0].positions)
    widest = 1
    for it in trace.iterations[1:]:
        complete = [frontier[r] == end for r, (_, end) in enumerate(spans)]
        flight = [
            r
            for r in range(len(spans))
            if not complete[r] and (r == 0 or complete[r - 1] or decided[r - 1] >= params.row_start)
        ]
        assert [window.row for window in it.windows] == flight
        for index, window in enumerate(it.windows):
            r, count = window.row, len(window.drafts)
            assert window.head == frontier[r] - 1
            if index == 0:
                assert count == min(params.window - 1, spans[r][1] - frontier[r] - 1)
                assert window.committed == window.accepted + 1
            else:
                assert count == min(params.window - 1, decided[r - 1] - decided[r] - 1)
                columns = [cells[p] % geometry.cols for p in range(window.head + 1, window.head + 1 + count)]
                assert all(column <= decided[r - 1] - 2 for column in columns)
                assert window.committed == window.accepted
        place(it.positions)
        widest = max(widest, len(flight))
    assert all(frontier[r] == end for r, (_, end) in enumerate(spans))
    return widest


@pytest.fixture(scope="module")
def pjd_trace(tiny) -> Trace:
    return run(tiny, "pjd", "red apple", seed=0)


def test_pjd_on_tiny_keeps_its_schedule_and_a_valid_trace(tiny, pjd_trace):
    assert pjd_trace.kind == "rows" and not pjd_trace.lossless
    assert check_schedule(pjd_trace, tiny.geometry, PjdParameters()) >= 2
    assert len(pjd_trace.iterations) == pjd_trace.nfe < run(tiny, "ar", "red apple", seed=0).nfe
    assert sum(it.stand_ins for it in pjd_trace.iterations) > 0  # a plain grid: the row above's latest token
    assert Trace.from_json(pjd_trace.to_json()) == pjd_trace
    fates = {fate for it in pjd_trace.iterations for window in it.windows or [] for fate in window.fate}
    assert fates == {"accepted", "rejected", "kept", "redrawn"}


@pytest.mark.parametrize("settings", [{"row_start": 1, "window": 4}, {"row_start": 3, "residual_all_rows": True}])
def test_more_rows_in_flight_keep_the_schedule(tiny, settings):
    params = PjdParameters(**settings)
    trace = run(tiny, "pjd", "red apple", seed=1, params=params)
    if params.residual_all_rows:  # every row resamples: windows one draft shorter below the top row
        assert all(w.committed == w.accepted + 1 for it in trace.iterations[1:] for w in it.windows)
    else:
        assert check_schedule(trace, tiny.geometry, params) >= 4


def test_a_trace_whose_positions_disagree_with_its_order_is_refused(pjd_trace):
    swapped = json.loads(pjd_trace.to_json())
    order = swapped["geometry"]["order"]
    order[20], order[21] = order[21], order[20]
    with pytest.raises(TraceError, match="order does not list the cells"):
        Trace.from_json(json.dumps(swapped))
    elsewhere = json.loads(pjd_trace.to_json())
    window = next(it for it in elsewhere["iterations"] if it.get("windows") and it["windows"][0]["committed"] > 1)
    window["positions"][0] += 1
    with pytest.raises(TraceError, match=r"positions after its head|distinct position"):
        Trace.from_json(json.dumps(elsewhere))


class Spy:
    """A session whose first pass in which some token may not see an earlier one (a row above's drafts,
    hidden by the row-causal mask) is fed twice more before the real one: without those drafts (every other
    token's logits must be the same), and with every earlier token seen (the rows below must change)."""

    def __init__(self, session):
        self.session = session
        self.checked: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def __getattr__(self, name: str):
        return getattr(self.session, name)

    def forward_at(self, tokens, positions, sees=None):
        if sees is not None and not self.checked:
            at = torch.tensor(positions)
            hidden = ~sees & (at[None, :] < at[:, None])  # (i, j): j before i, and unseen by i
            drafts = hidden.any(0)
            if drafts.any():
                rest = (~drafts).nonzero().flatten()
                full = self.session.forward_at(tokens, positions, sees)
                alone = self.session.forward_at(tokens[rest], [positions[i] for i in rest], sees[rest][:, rest])
                everything = self.session.forward_at(tokens, positions, sees | (at[None, :] < at[:, None]))
                below = hidden.any(1)
                self.checked.append((full[rest], alone, full[below], everything[below]))
        return self.session.forward_at(tokens, positions, sees)


class Spying:
    def __init__(self, model):
        self.model = model
        self.spies: list[Spy] = []

    def __getattr__(self, name: str):
        return getattr(self.model, name)

    def session(self, prompt: str, guidance_scale: float) -> Spy:
        self.spies.append(Spy(self.model.session(prompt, guidance_scale)))
        return self.spies[-1]


@pytest.mark.parametrize("name", ["tiny", "lumina-mgpt"])
def test_a_row_below_does_not_see_the_drafts_of_the_rows_above(tiny, name):
    """The row-causal mask through the model: each token's logits are those of a pass without the drafts
    it may not see, and not those of a pass that lets it see them."""
    model = Spying(tiny if name == "tiny" else FAMILIES[name].build())
    prompt = "red apple" if name == "tiny" else FAMILIES[name].prompt
    run(model, "pjd", prompt, seed=0, params={"row_start": 1} if name != "tiny" else None)
    (spy,) = model.spies
    ((kept, alone, below, seeing),) = spy.checked
    assert len(below) > 0
    torch.testing.assert_close(kept, alone, atol=ATOL, rtol=0)
    finite = below.isfinite()
    assert (below[finite] - seeing[finite]).abs().max() > 100 * ATOL


def test_the_command_line_runs_pjd_on_tiny(tmp_path):
    from specviz.cli import main

    assert main(["run", "--method", "pjd", "--prompt", "red apple", "--seed", "2", "--out", str(tmp_path)]) == 0
    trace = Trace.load(next(tmp_path.rglob("*.json")))
    assert trace.method == "pjd" and trace.geometry.order is not None and len(trace.tokens) == 256


@pytest.mark.parametrize("name", [name for name in FAMILIES if name != "tiny"])
def test_pjd_on_every_family_keeps_its_schedule_and_with_one_row_at_a_time_is_greedy_ar(name):
    """Each family's test model: rows starting after one cell, a valid trace that decodes half done, a
    stand-in where the grid has no row-end token (the real row-end token where it has one, Lumina-mGPT
    and Emu3); with one row in flight at a time, greedy PJD is SJD row by row, so greedy AR token for token."""
    family = FAMILIES[name]
    model = family.build()
    g = model.geometry
    params = PjdParameters(row_start=1, window=3)
    trace = run(model, "pjd", family.prompt, 0, SamplingSettings(guidance_scale=family.guidance_scale), params)
    assert check_schedule(trace, g, params) > 1 and Trace.from_json(trace.to_json()) == trace
    stand_ins = sum(it.stand_ins for it in trace.iterations)
    assert (stand_ins == 0) == (g.layout[-1] != IMAGE_CELL)
    assert decode_in_order(model, trace.tokens[: len(trace.tokens) // 2], trace.geometry.order).size
    greedy = SamplingSettings(temperature=0, guidance_scale=family.guidance_scale)
    whole = run(model, "pjd", family.prompt, 0, greedy, params={"row_start": g.cols})
    raster, _ = in_raster_order(g, whole.tokens, whole.geometry.order)
    assert raster == run(model, "ar", family.prompt, 0, greedy).tokens


def test_a_run_stopped_early_has_the_decided_positions_first_and_the_rest_in_raster_order(tiny):
    from specviz.decoding.runner import RunStream

    stream = RunStream(tiny, "pjd", "red apple", 0)
    for _ in range(12):
        stream.step()
    trace = stream.trace()
    cells = trace.geometry.order
    decided = len(trace.tokens)
    assert sorted(cells[decided:]) == cells[decided:] and set(cells[:decided]).isdisjoint(cells[decided:])
    assert Trace.from_json(trace.to_json()) == trace


def test_the_views_draw_a_pjd_run(tiny, pjd_trace):
    """Inspect, the race picture, the maps and the bench's numbers on a PJD trace, and Inspect's jumps find
    its rejections (it verifies drafts, unlike ZipAR)."""
    from specviz.measure.bench import job_metrics
    from specviz.ui import inspection
    from specviz.ui.loading import decoder_for

    ar = run(tiny, "ar", "red apple", seed=0)
    runs = {"trace": pjd_trace, "ar": ar}
    assert decoder_for(pjd_trace) is not None
    j = metrics.opening_iteration(pjd_trace)
    assert len(pjd_trace.iterations[j].committed) > 1
    for k in (0, 1, j, len(pjd_trace.iterations) - 1):
        state = metrics.grid_state(pjd_trace, k)
        assert state.now.sum() == len(pjd_trace.iterations[k].committed)
        assert viz.iteration_sentence(pjd_trace, k)
        assert viz.window_figure(pjd_trace, k).data
        image = decode_in_order(tiny, metrics.tokens_through(pjd_trace, k), pjd_trace.geometry.order)
        assert viz.frame(pjd_trace, k, image).size
        assert inspection.iteration_views(runs, k, large=False, dark=False)["iteration_image"] is not None
    for kind in ("run_length", "iteration", "redraws"):
        assert viz.acceptance_map_figure(pjd_trace, kind).data
        assert inspection.overview_figures(runs, kind, large=False, dark=False)["race_plot"] is not None
    title, picture = viz.progress_map(pjd_trace)
    assert title.startswith("tokens each cell's row committed") and picture.size == (16, 16)
    lengths = metrics.row_run_lengths(pjd_trace)
    assert np.nanmax(lengths) <= PjdParameters().window and not np.isnan(lengths).any()
    target, _ = inspection.next_of_kind("rejection", {"trace": pjd_trace}, 0)
    assert isinstance(target, int) and pjd_trace.iterations[target].rejects()
    numbers = job_metrics(tiny, pjd_trace, tiny.default_sampling)
    assert numbers["accepted"] == sum(it.accepted for it in pjd_trace.iterations) > 0


def test_a_live_race_draws_pjd_from_its_first_pass(tiny):
    """The race draws a run as it goes: after PJD's first pass (drawn from the prefill, no window yet) its map,
    frame and Inspect views already take it for PJD, not ZipAR (whose map reads another parameter)."""
    from specviz.decoding.runner import RunStream

    stream = RunStream(tiny, "pjd", "rocket", 0)
    stream.step()
    first = stream.trace()
    assert len(first.iterations) == 1 and first.iterations[0].windows is None and metrics.has_row_windows(first)
    title, _ = viz.progress_map(first)
    assert title.startswith("tokens each cell's row committed")
    assert viz.window_figure(first, 0).data and viz.iteration_sentence(first, 0)


def test_the_race_picture_and_inspect_show_every_row_in_flight_with_its_window(pjd_trace):
    """A pass over several rows shows each row's drafts at their own cells by fate (not only the cells it
    committed), and Inspect's bars give every row's drafts in turn, top row first."""
    k = max(range(len(pjd_trace.iterations)), key=lambda i: len(pjd_trace.iterations[i].windows or []))
    it = pjd_trace.iterations[k]
    assert len(it.windows) >= 2
    grid = metrics.grid_state(pjd_trace, k)
    cols = pjd_trace.geometry.cols
    for window in it.windows:
        for offset, shown in window.shown():
            cell = window.head + 1 + offset  # tiny has no layout slots: a position is its raster cell
            assert grid.state[cell // cols, cell % cols] == shown
    figure = viz.window_figure(pjd_trace, k)
    bars = next(trace for trace in figure.data if trace.name == "window")
    assert list(bars.y) == [ratio for window in it.windows for ratio in window.ratio]
    assert f"row {it.windows[-1].row}, draft 1" in bars.customdata[-len(it.windows[-1].drafts)]
    rows = [f"row {window.row}" for window in it.windows if window.drafts]
    assert list(figure.layout.xaxis2.ticktext) == rows  # each group of bars named by its row
    assert figure.layout.title.text.replace("<br>", " ").endswith(f"{len(it.committed)} tokens committed")


def test_the_app_offers_pjd_with_its_own_parameters():
    """The method list and its controls come from the catalogue: PJD among the discrete methods, its five
    parameters shown at the code's defaults and every other hidden, its lossy note said."""
    from specviz.ui.controls import METHOD_FIELDS, method_updates, methods_for

    assert "pjd" in methods_for("tiny") and "pjd" not in methods_for("tiny-continuous")
    updates = method_updates("pjd")
    shown = {
        name: update["value"] for name, update in updates.items() if update.get("visible") and name in METHOD_FIELDS
    }
    assert (
        shown
        == PjdParameters().to_dict()
        == {
            "window": 8,
            "row_start": 8,
            "reuse_threshold": 0.5,
            "row_mask": True,
            "residual_all_rows": False,
        }
    )
    assert "differs from AR" in updates["lossy_note"]["value"]


def test_inspect_says_a_pjd_pass_row_by_row_and_opens_on_the_most_rows_in_flight():
    from specviz import metrics
    from specviz.decoding import run
    from specviz.models.registry import load_model
    from specviz.viz.narration import iteration_sentence

    trace = run(load_model("tiny"), "pjd", "red apple", 0)
    j = metrics.opening_iteration(trace)
    opened = trace.iterations[j]
    band = metrics.passes_in_picture(trace)
    assert len(opened.windows) == max(len(trace.iterations[k].windows or ()) for k in band) >= 2
    said = iteration_sentence(trace, j)
    assert f"verified {len(opened.windows)} rows' windows at once" in said and "ZipAR" not in said
    assert all(f"row {window.row}: {window.accepted} of {len(window.drafts)}" in said for window in opened.windows)
    for k, it in enumerate(trace.iterations):  # every row's rejection is named, the lower rows' too
        for window in it.windows or ():
            if "rejected" in window.fate:
                at = window.fate.index("rejected")
                ordinal = {1: "1st", 2: "2nd", 3: "3rd"}.get(at + 1, f"{at + 1}th")
                accepted = f"{window.accepted} of {len(window.drafts)} drafts accepted"
                assert f"row {window.row}: {accepted}, the {ordinal} rejected" in iteration_sentence(trace, k)
