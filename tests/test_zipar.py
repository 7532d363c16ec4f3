"""ZipAR: its schedule (rows in flight, each s cells behind the row above), its runs on the tiny model
and its traces, whose positions are in the order the run decided them. Its deviation from AR is
measured in test_lossless.py."""

import json

import numpy as np
import pytest
import torch
from model_zoo import FAMILIES

from specviz.core.params import ZiparParameters
from specviz.core.settings import SamplingSettings
from specviz.decoding import run
from specviz.decoding.zipar import decision_geometry, row_spans, schedule
from specviz.metrics import acceptance_maps, grid_state
from specviz.models.protocol import BLANK, IMAGE_CELL, Geometry, decode_in_order, in_raster_order
from specviz.models.toys.discrete import rows_with_end_slots
from specviz.trace import Trace, TraceError, TraceGeometry


def _when_decided(geometry: Geometry, window: int) -> dict[int, int]:
    return {position: index for index, step in enumerate(schedule(geometry, window)) for position in step.decided}


@pytest.mark.parametrize("rows, cols, window", [(4, 5, 2), (16, 16, 8), (3, 7, 1), (5, 4, 4), (2, 3, 9)])
def test_a_plain_grid_takes_rows_minus_one_windows_plus_a_row_of_passes(rows, cols, window):
    geometry = Geometry.plain_grid(rows, cols, 10)
    passes = schedule(geometry, window)
    lead = min(window, cols)
    assert len(passes) == (rows - 1) * lead + cols  # records; the first draws from the prefill
    when = _when_decided(geometry, window)
    assert sorted(when) == list(range(rows * cols))
    for position, index in when.items():  # each row trails the row above by s cells
        row, col = divmod(position, cols)
        assert index == row * lead + col
    for step in passes:
        assert len(step.rows) == len(set(step.rows)) and list(step.rows) == sorted(step.rows)
        assert len(step.predictor) == (len(step.decided) if step.fed else 0)
        for decided, predictor in zip(step.decided, step.predictor, strict=False):
            assert step.fed[predictor] == decided - 1  # logits of the position before it


def test_a_window_of_the_row_or_more_is_raster_order_one_token_a_pass():
    geometry = Geometry.plain_grid(3, 4, 10)
    passes = schedule(geometry, 4)
    assert [step.decided for step in passes] == [(position,) for position in range(12)]
    assert all(step.stand_ins == 0 for step in passes)


def test_a_new_row_starts_from_a_stand_in_for_the_unfinished_end_of_the_row_above():
    passes = schedule(Geometry.plain_grid(4, 5, 10), 2)
    start = passes[2]  # row 0 holds cells 0 and 1: row 1 starts
    assert start.decided == (2, 5) and start.rows == (0, 1)
    assert dict(zip(start.fed, start.source, strict=True)) == {1: 1, 4: 1}  # (0, 4) stands in as (0, 1)
    assert start.stand_ins == 1
    finish = next(step for step in passes if 4 in step.fed and step.source[step.fed.index(4)] == 4)
    assert finish.fed.index(4) not in finish.predictor  # the real (0, 4), fed for the rows below only


def test_a_row_end_layout_token_is_fed_for_real_to_start_the_next_row():
    geometry = rows_with_end_slots(3, 4, 6)  # 4 cells and an end-of-row slot per row
    passes = schedule(geometry, 2)
    assert all(step.stand_ins == 0 for step in passes)
    assert row_spans(geometry) == [(0, 5), (5, 10), (10, 15)]
    when = _when_decided(geometry, 2)
    assert when[5] == when[2]  # the row-end slot 4 is known: row 1 starts beside cell (0, 2)
    assert sorted(when) == list(range(15))
    # a window of the row: exact raster AR, the row-end slot fed beside the row's last cell
    assert len(schedule(geometry, 4)) == 15 - 2


def test_the_decision_geometry_is_a_valid_trace_geometry():
    geometry = rows_with_end_slots(3, 4, 6)
    reordered = decision_geometry(geometry, ZiparParameters(window_size=1))
    TraceGeometry(**{**reordered.__dict__, "layout": list(reordered.layout), "order": list(reordered.order)})
    assert sorted(cell for cell in reordered.order if cell >= 0) == list(range(12))
    assert [entry != -1 for entry in reordered.layout] == [cell == -1 for cell in reordered.order]
    with pytest.raises(ValueError, match="own order"):
        schedule(reordered, 1)


@pytest.fixture(scope="module")
def zipar_trace(tiny) -> Trace:
    return run(tiny, "zipar", "rocket", seed=0)


def test_zipar_on_tiny_halves_the_passes_and_keeps_its_rows_in_flight(tiny, zipar_trace):
    g = tiny.geometry
    assert zipar_trace.nfe == (g.rows - 1) * 8 + g.cols == len(zipar_trace.iterations)
    assert zipar_trace.kind == "rows" and not zipar_trace.lossless
    widest = max(zipar_trace.iterations, key=lambda it: len(it.committed))
    assert len(widest.committed) == 2  # a row of 16 at s = 8: two rows in flight
    assert sum(it.stand_ins for it in zipar_trace.iterations) == g.rows - 1  # one per row started early
    assert Trace.from_json(zipar_trace.to_json()) == zipar_trace


def test_a_window_of_the_row_reproduces_ar_token_for_token(tiny):
    ar = run(tiny, "ar", "rocket", seed=3)
    zipar = run(tiny, "zipar", "rocket", seed=3, params={"window_size": tiny.geometry.cols})
    assert zipar.tokens == ar.tokens and zipar.nfe == ar.nfe


def test_the_grid_shows_the_cells_a_pass_drew_together_on_a_diagonal_front(zipar_trace):
    cols = zipar_trace.geometry.cols
    j = 40
    state = grid_state(zipar_trace, j)
    rows, columns = np.nonzero(state.now)
    assert len(rows) == 2 and columns[0] - columns[1] == 8  # (r, c + 8) and (r + 1, c)
    assert (state.state[rows[1] + 1 :] == "pending").all()
    passes = acceptance_maps(zipar_trace)["iteration"]
    assert passes[1, 0] == passes[0, 8] and passes[0, cols - 1] == cols - 1


def test_a_partial_run_decodes_with_the_cells_not_decided_blank(tiny, zipar_trace):
    tokens = zipar_trace.tokens[:100]
    image = np.array(decode_in_order(tiny, tokens, zipar_trace.geometry.order))
    scale = image.shape[0] // tiny.geometry.rows
    decided = np.zeros(tiny.geometry.rows * tiny.geometry.cols, dtype=bool)
    decided[zipar_trace.geometry.order[:100]] = True
    blank = (image.reshape(tiny.geometry.rows, scale, tiny.geometry.cols, scale, 3) == BLANK).all(axis=(1, 3, 4))
    assert (blank == ~decided.reshape(blank.shape)).all()
    whole = decode_in_order(tiny, zipar_trace.tokens, zipar_trace.geometry.order)
    raster = [0] * len(zipar_trace.tokens)
    for token, cell in zip(zipar_trace.tokens, zipar_trace.geometry.order, strict=True):
        raster[cell] = token
    assert np.array_equal(np.array(whole), np.array(tiny.decode(raster)))


def test_a_rows_trace_needs_its_order_and_its_rows(zipar_trace):
    unordered = json.loads(zipar_trace.to_json())
    unordered["geometry"]["order"] = None
    with pytest.raises(TraceError, match="needs their order"):
        Trace.from_json(json.dumps(unordered))
    wrong = json.loads(zipar_trace.to_json())
    wrong["iterations"][3]["rows"] = [5]
    with pytest.raises(TraceError, match="outside the row"):
        Trace.from_json(json.dumps(wrong))


def test_a_session_that_cannot_feed_out_of_order_refuses_zipar(tiny, monkeypatch):
    from specviz.models.protocol import UnsupportedMethod
    from specviz.models.session import CachedSession

    monkeypatch.delattr(CachedSession, "forward_at")
    with pytest.raises(UnsupportedMethod, match="out of raster order"):
        run(tiny, "zipar", "rocket", seed=0)


def test_the_first_pass_draws_from_the_prefill_and_feeds_nothing():
    first = schedule(Geometry.plain_grid(2, 2, 4), 1)[0]
    assert first.decided == (0,) and first.fed == () and torch.tensor(first.predictor).numel() == 0


@pytest.mark.parametrize("name", [name for name in FAMILIES if name != "tiny"])
def test_zipar_on_every_family_keeps_its_rows_and_with_a_window_of_the_row_is_greedy_ar(name):
    """Each family's test model (model_zoo.py): with s = 1 as many rows in flight as the grid allows, a
    stand-in per row where there is no row-end token, a valid trace that decodes half done; with s of the
    row, the greedy image in raster order is greedy AR's, token for token."""
    family = FAMILIES[name]
    model = family.build()
    greedy = SamplingSettings(temperature=0, guidance_scale=family.guidance_scale)
    g = model.geometry
    trace = run(model, "zipar", family.prompt, 0, greedy, params={"window_size": 1})
    assert len(trace.iterations) == trace.nfe < g.seq_len and max(len(it.rows) for it in trace.iterations) > 1
    assert sum(it.stand_ins for it in trace.iterations) == (0 if g.layout[-1] != IMAGE_CELL else g.rows - 1)
    assert decode_in_order(model, trace.tokens[: len(trace.tokens) // 2], trace.geometry.order).size
    whole = run(model, "zipar", family.prompt, 0, greedy, params={"window_size": g.cols})
    raster, _ = in_raster_order(g, whole.tokens, whole.geometry.order)
    assert raster == run(model, "ar", family.prompt, 0, greedy).tokens


def test_inspect_says_which_rows_a_pass_drew_and_where_a_stand_in_was_fed(zipar_trace):
    from specviz.viz import iteration_sentence

    first_pair = next(j for j, it in enumerate(zipar_trace.iterations) if len(it.rows) == 2)
    told = iteration_sentence(zipar_trace, first_pair)
    assert "One pass drew 2 tokens at once, one in each of rows 0 and 1" in told
    assert "1 stood in for the unfinished end of the row above" in told
    assert "Row 0's token saw every token before it, as in AR" in told
    assert iteration_sentence(zipar_trace, 0).endswith("One pass drew one token, in row 0.")
