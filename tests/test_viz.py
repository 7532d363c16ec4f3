"""specviz.viz on hand-made traces whose every number is worked out below, no model needed (and the
window view on a real SJD run of the embedded model, at the end).

The main trace: a 2x4 grid with one forced layout token (7) after the first row, so 9 sequence
positions; position 4 is the layout slot and positions 5..8 are cells 4..7. A window of 4:

    it  start  drafts (positions)  accepted  rejected_at  new  after the rejection   committed (positions)
    0   0      -                   0         -            0    -                     [1]        (0)
    1   1      [2,3,5,6]  (1..4)   2         2            4    redrawn               [2,3,4]    (1..3)
    2   4      [7,1,2,3]  (4..7)   1         1            3    redrawn, kept         [7,5]      (4..5)
    3   6      [6,3,1]    (6..8)   0         0            1    kept, redrawn         [2]        (6)
    4   7      [3,4]      (7..8)   2         -            0    -                     [3,4]      (7..8)

(A draft after the rejection is kept when the next window starts with the same token there.)
"""

import importlib.util
import itertools

import imageio.v3 as iio
import numpy as np
import plotly.graph_objects as go
import pytest
from PIL import Image

from specviz.decoding import run
from specviz.metrics import (
    Speedup,
    acceptance_maps,
    committed_before,
    grid_state,
    per_iteration,
    stalls,
    summary,
    tokens_through,
    window_size,
)
from specviz.trace import Iteration, TokenRecord, Trace, TraceGeometry, TraceSampling, WindowRecord
from specviz.viz import (
    STATES,
    acceptance_map_figure,
    accepted_length_figure,
    animation,
    changed_figure,
    colors,
    comparison_figure,
    frame,
    race_figure,
    save_gif,
    save_mp4,
    theme,
    window_figure,
)
from specviz.viz.figures import OFFSET_TITLE, RATIO_TITLE, TITLE_CHARS
from specviz.viz.palette import LABELS, NOW_LABEL, OPTIONAL_STATES, legend_states

LAYOUT = [-1, -1, -1, -1, 7, -1, -1, -1, -1]
TOKENS = [1, 2, 3, 4, 7, 5, 2, 3, 4]


def _trace(iterations: list[Iteration], layout: list[int], rows: int, cols: int, **fields) -> Trace:
    tokens = [t for it in iterations for t in it.committed]
    return Trace(
        model="synthetic",
        method=fields.pop("method", "sjd"),
        lossless=True,
        prompt="test",
        seed=0,
        sampling=TraceSampling(temperature=1.0, top_k=None, top_p=1.0, guidance_scale=0.0),
        geometry=TraceGeometry(rows=rows, cols=cols, vocab_size=8, layout=layout),
        tokens=tokens,
        nfe=fields.pop("nfe", len(iterations)),
        seconds=fields.pop("seconds", 0.5),
        iterations=iterations,
    )


def _window(start, drafts, accepted, new, later, committed, ratio) -> WindowRecord:
    rejected = accepted < len(drafts)
    return WindowRecord(
        start=start,
        drafts=drafts,
        p_old=[0.5] * len(drafts),
        p_new=[r / 2 for r in ratio],
        ratio=ratio,
        uniform=[0.3] * len(drafts),
        tv=[0.2] * len(drafts),
        fate=["accepted"] * accepted + (["rejected"] if rejected else []) + later,
        accepted=accepted,
        rejected_at=accepted if rejected else None,
        resampled=committed[-1] if rejected else None,
        new_init=["random"] * new,
        new_source=[-1] * new,
        committed=committed,
        forward_ms=10.0,
        verify_ms=1.0,
    )


@pytest.fixture(scope="module")
def trace() -> Trace:
    return _trace(
        [
            TokenRecord(start=0, committed=[1], forward_ms=0.0),
            _window(1, [2, 3, 5, 6], 2, 4, ["redrawn"], [2, 3, 4], [0.5, 1.0, 0.25, 0.125]),
            _window(4, [7, 1, 2, 3], 1, 3, ["redrawn", "kept"], [7, 5], [1.0, 0.0, 0.5, 0.5]),
            _window(6, [6, 3, 1], 0, 1, ["kept", "redrawn"], [2], [0.25, 0.75, 1.0]),
            _window(7, [3, 4], 2, 0, [], [3, 4], [1.0, 0.875]),
        ],
        LAYOUT,
        rows=2,
        cols=4,
    )


@pytest.fixture(scope="module")
def ar() -> Trace:
    its = [TokenRecord(start=i, committed=[t], forward_ms=5.0) for i, t in enumerate(TOKENS)]
    return _trace(its, LAYOUT, rows=2, cols=4, method="ar", seconds=1.5)


@pytest.fixture(scope="module")
def bonus() -> Trace:
    """A 1x3 grid whose one-draft window is accepted whole, so a token is sampled after it."""
    return _trace(
        [TokenRecord(start=0, committed=[1], forward_ms=0.0), _window(1, [2], 1, 1, [], [2, 6], [0.9])],
        [-1, -1, -1],
        rows=1,
        cols=3,
    )


def test_trace_is_the_one_in_the_docstring(trace):
    assert trace.tokens == TOKENS


def test_fates(trace):
    assert [it.outcome() for it in trace.iterations] == [
        [],
        ["accepted", "accepted", "rejected", "new"],
        ["accepted", "rejected", "new", "new"],
        ["rejected", "kept", "new"],
        ["accepted", "accepted"],
    ]


def test_committed_before_and_tokens_through(trace):
    assert [committed_before(trace, j) for j in range(6)] == [0, 1, 4, 6, 7, 9]
    assert tokens_through(trace, 0) == [1]
    assert tokens_through(trace, 1) == [1, 2, 3, 4]
    assert tokens_through(trace, 2) == [1, 2, 3, 4, 7, 5]
    assert tokens_through(trace, 4) == TOKENS
    with pytest.raises(IndexError):
        tokens_through(trace, 5)
    with pytest.raises(IndexError):
        committed_before(trace, -1)


def test_acceptance_maps(trace):
    maps = acceptance_maps(trace)
    assert maps["iteration"].tolist() == [[0, 1, 1, 1], [2, 3, 4, 4]]
    assert maps["run_length"].tolist() == [[1, 3, 3, 3], [2, 1, 2, 2]]
    # position 4 (layout) was drafted once before being fixed, but it is not a cell; position 7 twice
    assert maps["redraws"].tolist() == [[0, 0, 0, 0], [0, 1, 2, 1]]


def test_acceptance_maps_of_a_partial_trace(trace):
    partial = trace.model_copy(update={"iterations": trace.iterations[:2], "tokens": TOKENS[:4]})
    maps = acceptance_maps(partial)
    assert maps["iteration"][0].tolist() == [0, 1, 1, 1]
    assert np.isnan(maps["iteration"][1]).all() and np.isnan(maps["redraws"][1]).all()


def test_grid_state(trace, bonus):
    grid = grid_state(trace, 2)
    assert grid.state.tolist() == [
        ["committed"] * 4,
        ["rejected", "new", "new", "pending"],
    ]
    assert grid.position.tolist() == [[0, 1, 2, 3], [5, 6, 7, 8]]
    assert grid.now.tolist() == [[False] * 4, [True, False, False, False]]  # position 4 is no cell
    # the token sampled after a fully accepted window has no fate: committed, and flagged as new
    after = grid_state(bonus, 1)
    assert after.state.tolist() == [["committed", "accepted", "committed"]]
    assert after.now.tolist() == [[False, True, True]]


def test_per_iteration(trace):
    series = per_iteration(trace)
    assert series["accepted"].tolist() == [0, 2, 1, 0, 2]
    assert series["committed"].tolist() == [1, 3, 2, 1, 2]
    assert series["changed"].tolist() == [0, 1, 1, 1, 0]
    assert series["carried"].tolist() == [0, 1, 2, 2, 0]
    assert series["window"].tolist() == [0, 4, 4, 3, 2]
    assert series["new_drafts"].tolist() == [0, 4, 3, 1, 0]
    assert series["forward_ms"].tolist() == [0.0, 10.0, 10.0, 10.0, 10.0]
    assert series["verify_ms"].tolist() == [0.0, 1.0, 1.0, 1.0, 1.0]


def test_summary(trace, ar):
    alone = summary(trace)
    assert alone["tokens"] == 9 and alone["nfe"] == 5
    assert alone["step_compression"] == pytest.approx(1.8)
    assert "latency_speedup" not in alone
    against = summary(trace, ar)
    assert against["latency_speedup"] == pytest.approx(3.0)
    assert against["nfe_ratio"] == pytest.approx(1.8)


def test_theme():
    assert theme() == {
        "template": "plotly_white",
        "font": {"size": 14, "color": "#222222"},
        "paper_bgcolor": "#FFFFFF",
        "plot_bgcolor": "#FFFFFF",
    }
    dark = theme(dark=True, large=True)
    assert dark["template"] == "plotly_dark" and dark["font"]["size"] == 22
    assert dark["paper_bgcolor"] == "#111111"


def _state_index(state: str) -> int:
    return STATES.index(state)


def test_window_figure(trace):
    fig = window_figure(trace, 1)
    assert isinstance(fig, go.Figure)
    assert fig.layout.title.text.replace("<br>", " ") == "iteration 1/4: 2 accepted, rejected at 2"
    grid, outline, bars, strip, cross, *legend = fig.data
    assert len(fig.data) == 5 + len(legend_states(set()))
    a, r, c, p = (_state_index(s) for s in ("accepted", "rejected", "committed", "pending"))
    assert np.asarray(grid.z).tolist() == [[c, a, a, r], [p, p, p, p]]  # position 4 (new) is no cell
    palette = colors()
    assert list(bars.marker.color) == [palette[s] for s in ("accepted", "accepted", "rejected", "new")]
    assert list(bars.y) == pytest.approx([0.5, 1.0, 0.25, 0.125], abs=1e-3)
    assert "ratio 0.250" in bars.customdata[2] and "token 4 (committed now)" in bars.customdata[2]
    assert "then: redrawn (token changed)" in bars.customdata[3]  # a new draft's recorded fate, on hover
    assert list(strip.marker.color) == list(bars.marker.color) and min(strip.y) > 0
    assert (cross.name, list(cross.x)) == ("rejected", [2])
    assert [(a.text, a.x) for a in fig.layout.annotations if a.text == "rejected"] == [("rejected", 2)]
    assert list(fig.layout.xaxis2.range) == [-0.5, 3.5]  # the widest window the trace drafted: 4
    # three committed cells, each a closed rectangle of five points and a break
    assert len(outline.x) == 18 and outline.name == NOW_LABEL
    assert [t.name for t in legend] == [LABELS[s] for s in STATES if s not in OPTIONAL_STATES]  # none in this run
    assert all(t.showlegend is not False for t in legend)
    assert [t.marker.color for t in legend] == [palette[s] for s in STATES if s not in OPTIONAL_STATES]


def test_window_figure_maps_states_to_their_colours(trace):
    grid = window_figure(trace, 3, dark=True).data[0]
    palette = colors(dark=True)
    scale = grid.colorscale
    for z in np.asarray(grid.z).ravel():  # the colour band holding z (its range is -0.5..K-0.5)
        fraction = (z + 0.5) / len(STATES)
        band = next(color for (low, color), (high, _) in itertools.pairwise(scale) if low <= fraction <= high)
        assert band == palette[STATES[z]]
    assert {"kept", "rejected"} <= {STATES[z] for z in np.asarray(grid.z).ravel()}


def test_window_figure_titles(trace, bonus):
    assert window_figure(trace, 0).layout.title.text.replace("<br>", " ") == "iteration 0/4: no drafts, 1 token sampled"
    assert window_figure(trace, 4).layout.title.text == "iteration 4/4: all 2 accepted"
    long_title = window_figure(bonus, 1).layout.title.text  # wrapped to fit the narrowest half-width plot
    assert long_title == "iteration 1/1: all 1 accepted, +1<br>sampled after the window"
    assert all(len(line) <= TITLE_CHARS[False] for line in long_title.split("<br>"))
    large_title = window_figure(trace, 1, large=True).layout.title.text
    assert large_title == "iteration 1/4: 2<br>accepted, rejected at 2"
    with pytest.raises(IndexError):
        window_figure(trace, 5)


def test_acceptance_map_figure(trace):
    for kind in ("iteration", "run_length", "redraws"):
        fig = acceptance_map_figure(trace, kind, dark=True)
        (heatmap,) = fig.data
        assert np.array_equal(np.asarray(heatmap.z), acceptance_maps(trace)[kind], equal_nan=True)
        assert heatmap.colorbar.title.text == {"redraws": "times drafted"}.get(kind, kind.replace("_", " "))
        assert fig.layout.yaxis.range[0] > fig.layout.yaxis.range[1]  # row 0 at the top
        assert fig.layout.yaxis.scaleanchor == "x"
        assert fig.layout.paper_bgcolor == "#111111"
    with pytest.raises(ValueError, match="unknown map"):
        acceptance_map_figure(trace, "depth")


def test_series_figures(trace):
    committed, accepted = accepted_length_figure(trace).data
    assert list(committed.y) == [1, 3, 2, 1, 2] and list(accepted.y) == [0, 2, 1, 0, 2]
    changed, carried = changed_figure(trace, large=True).data
    assert list(changed.y) == [0, 1, 1, 1, 0]
    assert list(carried.y) == [0, 1, 2, 2, 0]  # drafts carried into the next window
    assert changed_figure(trace, large=True).layout.font.size == 22


def test_race_figure(trace, ar):
    fig = race_figure(trace, ar)
    assert len(fig.data) == 4
    assert [(bar.x[0], bar.y[0]) for bar in fig.data] == [("ar", 9), ("sjd", 5), ("ar", 1.5), ("sjd", 0.5)]
    assert fig.layout.title.text == "sjd: 1.80x step compression,<br>3.00x latency speedup over AR"
    large = race_figure(trace, ar, large=True)  # on a projector the panel titles and bar labels grow too
    assert {a.font.size for a in large.layout.annotations} == {large.layout.font.size}
    assert large.layout.font.size > fig.layout.font.size
    assert {bar.constraintext for bar in large.data} == {"none"}
    # large type: panel titles short enough not to run into each other, the legend below both panels
    assert [a.text for a in large.layout.annotations] == ["passes (NFE)", "seconds"] and large.layout.legend.y < 0


def test_comparison_figure():
    rows = [
        {"method": "sjd", "step_compression": 2.0, "latency_speedup": 1.5, "lossless": True},
        {"method": "gsd", "step_compression": 3.0, "latency_speedup": 2.5, "lossless": False},
    ]
    compression, speedup = comparison_figure(rows).data
    assert list(compression.x) == ["sjd", "gsd (lossy)"]
    assert list(compression.y) == [2.0, 3.0] and list(speedup.y) == [1.5, 2.5]
    assert list(speedup.marker.pattern.shape) == ["", "/"]
    fig = comparison_figure(rows, large=True)
    (label,) = [a for a in fig.layout.annotations if a.text == "AR = 1x"]
    assert (label.xref, label.x, label.xanchor) == ("paper", 1, "left")  # beyond the bars, on no bar
    assert fig.layout.yaxis.range[1] >= 1.2 * 3.0  # room above the tallest bar for its label


@pytest.mark.parametrize("large", [False, True])
def test_comparison_labels_keep_clear_of_the_ar_line_and_the_whiskers(large):
    """A latency just under AR's (0.97x) had its label drawn across the dashed AR = 1x line, and a whisker
    through it: each latency label now sits over its bar, above the whisker's top, and above the line where
    it would cross it; one well under the line stays by its bar."""
    numbers = [("sjd", 2.9, Speedup(0.97, 0.93, 0.99, 3)), ("scd-mc", 3.1, Speedup(0.3, 0.25, 0.35, 3))]
    numbers.append(("eagle2", 3.5, Speedup(1.4, 1.3, 1.5, 3)))
    rows = [
        {"method": method, "step_compression": compression, "latency_speedup": spread.median,
         "latency_spread": spread, "lossless": True}
        for method, compression, spread in numbers
    ]  # fmt: skip
    fig = comparison_figure(rows, large=large)
    latency = fig.data[1]
    top = fig.layout.yaxis.range[1]
    per_px = top / (fig.layout.height - fig.layout.margin.t - fig.layout.margin.b)  # axis units per pixel
    height = 1.3 * fig.layout.font.size * per_px  # a label's line
    for k, (row, words) in enumerate(zip(rows, ["1.03x slower", "3.33x slower", "1.40x"], strict=True)):
        (label,) = [a for a in fig.layout.annotations if a.text == words]
        assert label.x == pytest.approx(k + latency.offset + latency.width / 2) and label.yanchor == "bottom"
        bottom = label.y + (label.yshift or 0) * per_px
        assert bottom >= row["latency_spread"].high, f"{words}: its whisker runs through it"
        assert not bottom < 1.0 < bottom + height, f"{words}: across the AR = 1x line"
    assert next(a for a in fig.layout.annotations if a.text == "3.33x slower").y == pytest.approx(0.35)


def test_frame_colours_and_size(trace):
    red = Image.new("RGB", (8, 4), (255, 0, 0))  # twice the grid's size: scaled to the display size
    image = frame(trace, 1, red, scale=16)
    assert image.width % 16 == 0 and image.height % 16 == 0
    # layout at scale 16: pad 8, caption line 24, image panel 64x32 at (8, 32), grid at (80, 32)
    assert image.getpixel((8 + 4, 32 + 4)) == (255, 0, 0)
    assert image.getpixel((8 + 63, 32 + 31)) == (255, 0, 0)

    def cell(row: int, col: int) -> str:
        pixel = image.getpixel((80 + col * 16 + 7, 32 + row * 16 + 7))
        return "#{:02X}{:02X}{:02X}".format(*pixel)

    palette = colors()
    assert [cell(0, c) for c in range(4)] == [palette[s] for s in ("committed", "accepted", "accepted", "rejected")]
    assert cell(1, 0) == palette["pending"]
    # the committed cells are outlined, the earlier one is not
    assert image.getpixel((80 + 16, 32)) == (0x22, 0x22, 0x22)
    assert "#{:02X}{:02X}{:02X}".format(*image.getpixel((80, 32))) == palette["committed"]


def test_frame_dark_without_image(trace):
    image = frame(trace, 3, None, scale=8, dark=True)
    assert image.getpixel((0, 0)) == (0x11, 0x11, 0x11)


def test_animation_and_gif(trace, tmp_path):
    frames = animation(trace, [None] * 5, scale=8)
    assert len(frames) == 5 and len({f.size for f in frames}) == 1
    path = tmp_path / "run.gif"
    save_gif(frames, path, fps=4)
    with Image.open(path) as gif:
        assert gif.format == "GIF" and gif.n_frames == 5 and gif.size == frames[0].size
        assert gif.info["duration"] == 250
    with pytest.raises(ValueError, match="one per iteration"):
        animation(trace, [None] * 4)
    with pytest.raises(ValueError, match="no frames"):
        save_gif([], path)


@pytest.mark.skipif(importlib.util.find_spec("imageio_ffmpeg") is None, reason="needs imageio-ffmpeg")
def test_mp4(trace, tmp_path):
    frames = animation(trace, [None] * 5, scale=8)
    path = tmp_path / "run.mp4"
    save_mp4(frames, path, fps=5)
    video = iio.imread(path, plugin="FFMPEG")
    assert video.shape == (5, frames[0].height, frames[0].width, 3)
    assert iio.immeta(path, plugin="FFMPEG")["fps"] == 5


def test_mp4_without_imageio_ffmpeg(trace, tmp_path, monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(RuntimeError, match="pip install imageio-ffmpeg"):
        save_mp4(animation(trace, [None] * 5, scale=8), tmp_path / "run.mp4")


def test_stalls_are_long_runs_of_passes_that_accept_nothing():
    """Ten passes in a row reject their first draft and fix one token each; then one accepts both."""
    idle = [_window(start, [5, 5], 0, 2 if start == 1 else 1, ["redrawn"], [1], [0.0, 0.5]) for start in range(1, 11)]
    busy = _window(11, [1, 1], 2, 1, [], [1, 1, 1], [1.0, 1.0])
    trace = _trace([TokenRecord(start=0, committed=[1], forward_ms=0.0), *idle, busy], [-1] * 14, rows=1, cols=14)
    assert stalls(trace) == [(1, 10)]  # iterations 1..10; iteration 0 has no window and is not a pass
    assert stalls(trace, minimum=11) == []
    assert stalls(trace, minimum=1) == [(1, 10)]


def test_exports_are_bounded_in_frames_and_size(tmp_path, monkeypatch):
    from specviz.viz import frames as frames_module

    its = [TokenRecord(start=i, committed=[1], forward_ms=1.0) for i in range(500)]
    long_run = _trace(its, [-1] * 500, rows=20, cols=25, method="ar")
    assert frames_module.export_iterations(500, 20) == sorted(set(frames_module.export_iterations(500, 20)))
    steps = frames_module.export_iterations(500, 20)
    assert len(steps) == 20 and steps[0] == 0 and steps[-1] == 499
    monkeypatch.setattr(frames_module, "MAX_FRAMES", 20)
    written = frames_module.write_animation(long_run, lambda j: None, [tmp_path / "run.gif"])
    with Image.open(written[0]) as gif:
        assert gif.n_frames == 20 and gif.width <= frames_module.MAX_FRAME_WIDTH
        assert abs(gif.info["duration"] - 125) <= 10  # 8 frames per second, in the format's centiseconds
        gif.seek(gif.n_frames - 1)
        assert gif.info["duration"] == 2000  # the finished image holds before the loop starts again
    wide = _trace(
        [TokenRecord(start=0, committed=[1], forward_ms=1.0)], [-1] * 2048, rows=1, cols=2048, method="ar", nfe=1
    )
    with pytest.raises(frames_module.ExportError, match="too wide to animate"):
        frames_module.write_animation(wide, lambda j: None, [tmp_path / "wide.gif"])
    with pytest.raises(ValueError, match=r"animations are \.gif or \.mp4"):
        frames_module.write_animation(long_run, lambda j: None, [tmp_path / "run.avi"])


@pytest.fixture(scope="module")
def sjd(tiny) -> Trace:
    """A real SJD run on the embedded model (W = 16): passes that reject, keep and redraw drafts."""
    return run(tiny, "sjd", "red apple", 0)


def _window_traces(fig: go.Figure) -> dict:
    return {t.name: t for t in fig.data if t.name in ("window", "fates", "rejected")}


def test_window_figure_shows_each_drafts_recorded_fate(sjd):
    palette = colors()
    shown = set()
    for j, it in enumerate(sjd.iterations):
        if it.kind != "window":
            continue
        bars = _window_traces(window_figure(sjd, j))["window"]
        for offset, (fate, color, hover) in enumerate(zip(it.fate, bars.marker.color, bars.customdata, strict=True)):
            if color == palette["new"]:  # verified for the first time: its recorded fate said on hover
                assert offset >= len(it.drafts) - len(it.new_init) and fate in ("kept", "redrawn", "reset")
                assert f"then: {LABELS[fate]}" in hover
            else:
                assert color == palette[fate] and f"state: {LABELS[fate]}" in hover
                shown.add(fate)
    assert {"accepted", "rejected", "kept", "redrawn"} <= shown


def test_window_offset_axis_is_the_runs_window(sjd):
    windows = [(j, it) for j, it in enumerate(sjd.iterations) if it.kind == "window"]
    full = next(j for j, it in windows if len(it.drafts) == 16)
    short = next(j for j, it in windows if len(it.drafts) < 16)
    assert window_size(sjd) == sjd.params["window"] == 16
    for j in (0, full, short):  # no drafts, a full window, one cut short by the end of the image: one axis
        fig = window_figure(sjd, j)
        assert list(fig.layout.xaxis2.range) == [-0.5, 15.5]
        assert fig.layout.xaxis2.title.text == OFFSET_TITLE
        assert fig.layout.xaxis.side == "top"  # the grid's columns are not above the offsets


def test_large_type_enlarges_the_bars_subtitle_and_keeps_the_rejected_label_off_the_axis(sjd):
    windows = ((j, it) for j, it in enumerate(sjd.iterations) if it.kind == "window")
    j, it = next((j, it) for j, it in windows if it.rejected_at is not None and it.rejected_at < 4)
    for large in (False, True):
        fig = window_figure(sjd, j, large=large)
        subtitle = next(a for a in fig.layout.annotations if a.text == RATIO_TITLE[large])
        assert subtitle.font.size == fig.layout.font.size  # as large as every other text of the figure
        label = next(a for a in fig.layout.annotations if a.text == "rejected")
        assert label.ax > it.rejected_at  # leans right, away from the ratio axis's tick labels
    assert len(RATIO_TITLE[True]) < len(RATIO_TITLE[False])
    normal, large = window_figure(sjd, j), window_figure(sjd, j, large=True)

    def grid_pixels(fig) -> float:  # the height the grid's row of the figure gets, margins taken off
        low, high = fig.layout.yaxis.domain
        return (high - low) * (fig.layout.height - fig.layout.margin.t - (fig.layout.margin.b or 80))

    assert grid_pixels(large) >= grid_pixels(normal)  # large type does not shrink the grid


def test_the_wide_window_puts_the_bars_and_legend_beside_the_grid_in_a_projectors_height(sjd):
    """The projector layout's window: grid on the left, the same bars and fates top right, the legend under
    them, 430 px tall so a 1280 x 720 screen holds it under Inspect's sentence and buttons. Large type keeps
    the stacked figure (beside the grid its legend left the grid about 130 px wide)."""
    j = next(j for j, it in enumerate(sjd.iterations) if it.kind == "window" and it.rejected_at is not None)
    wide, stacked = window_figure(sjd, j, wide=True), window_figure(sjd, j)
    assert wide.layout.height == 430 < stacked.layout.height
    assert wide.layout.xaxis.domain[1] < wide.layout.xaxis2.domain[0]  # the bars' column right of the grid's
    assert wide.layout.yaxis2.domain[0] > 0.5 and wide.layout.legend.x >= wide.layout.xaxis2.domain[0] - 0.05
    assert wide.layout.legend.orientation == "v" and wide.layout.legend.y < wide.layout.yaxis2.domain[0]
    assert [(t.name, list(t.y)) for t in _window_traces(wide).values()] == [
        (t.name, list(t.y)) for t in _window_traces(stacked).values()
    ]
    assert [t.xaxis for t in _window_traces(wide).values()] == ["x2"] * len(_window_traces(wide))
    assert any(a.text == "rejected" and a.xref == "x2" for a in wide.layout.annotations)
    # the bars' title above them names the ratio: an axis title beside them sat on the grid's last column
    assert wide.layout.yaxis2.title.text is None and stacked.layout.yaxis2.title.text == "ratio"
    assert any(a.text.startswith("ratio min(1") and a.yref == "paper" for a in wide.layout.annotations)
    assert window_figure(sjd, j, large=True, wide=True).layout.height == window_figure(sjd, j, large=True).layout.height


def test_rejected_draft_is_marked_however_small_its_ratio(sjd):
    windows = ((j, it) for j, it in enumerate(sjd.iterations) if it.kind == "window")
    j, it = next((j, it) for j, it in windows if it.rejected_at is not None and it.ratio[it.rejected_at] < 0.01)
    fig = window_figure(sjd, j)
    traces = _window_traces(fig)
    r = it.rejected_at
    assert traces["fates"].y[r] > 0.1 and traces["fates"].marker.color[r] == colors()["rejected"]
    assert list(traces["rejected"].x) == [r] and traces["rejected"].marker.symbol == "x"
    (label,) = [a for a in fig.layout.annotations if a.text == "rejected"]
    assert (label.x, label.bordercolor) == (r, colors()["rejected"]) and label.ay >= 0.5
    accepted_all = next(j for j, it in enumerate(sjd.iterations) if it.kind == "window" and it.rejected_at is None)
    assert "rejected" not in _window_traces(window_figure(sjd, accepted_all))


def test_the_race_overlay_draws_each_draft_in_its_fate_colour_and_nothing_for_ar():
    from pathlib import Path

    from specviz.metrics import grid_state
    from specviz.viz import pass_overlay
    from specviz.viz.palette import colors

    examples = Path(__file__).resolve().parents[1] / "specviz" / "data" / "examples"
    sjd = Trace.from_json((examples / "red-apple-sjd.json").read_text())
    blank = Image.new("RGB", (384, 384), "white")
    j = next(k for k, it in enumerate(sjd.iterations) if it.accepted and len(it.drafts) > it.accepted + 1)
    drawn = np.asarray(pass_overlay(blank, sjd, j))
    state = grid_state(sjd, j).state
    for fate in ("accepted", "rejected"):
        row, col = np.argwhere(state == fate)[0]
        edge = drawn[row * 24, col * 24 + 12]  # the cell's top edge, 24 px cells
        assert tuple(edge) == Image.new("RGB", (1, 1), colors()[fate]).getpixel((0, 0)), fate
    untouched = np.argwhere(state == "committed")[0]
    assert (drawn[untouched[0] * 24 + 12, untouched[1] * 24 + 12] == 255).all()
    ar = Trace.from_json((examples / "red-apple-ar.json").read_text())
    assert (np.asarray(pass_overlay(blank, ar, 40)) == 255).all()  # AR drafts nothing


def test_the_race_overlay_shows_the_windows_guesses_as_faded_pixels_of_their_drafts():
    from pathlib import Path

    from specviz.metrics import drafted_tokens, grid_state
    from specviz.viz import pass_overlay
    from specviz.viz.frames import GHOST_STRENGTH

    examples = Path(__file__).resolve().parents[1] / "specviz" / "data" / "examples"
    sjd = Trace.from_json((examples / "red-apple-sjd.json").read_text())
    j = next(k for k, it in enumerate(sjd.iterations) if it.reach() > len(it.committed) + 2)
    it = sjd.iterations[j]
    end = it.start + len(it.committed)
    guessed = drafted_tokens(sjd, j)
    assert guessed == sjd.tokens[:end] + it.drafts[len(it.committed) :]
    ar = Trace.from_json((examples / "red-apple-ar.json").read_text())
    assert drafted_tokens(ar, 40) is None  # AR guesses nothing
    # a picture of the guesses in one flat colour: the guessed cells show it faded over white, inside their outline
    blank, drafted = Image.new("RGB", (384, 384), "white"), Image.new("RGB", (384, 384), (0, 0, 200))
    drawn = np.asarray(pass_overlay(blank, sjd, j, drafted=drafted)).astype(int)
    state, now = grid_state(sjd, j).state, grid_state(sjd, j).now
    faded = np.array([255, 255, 255]) * (1 - GHOST_STRENGTH) + np.array([0, 0, 200]) * GHOST_STRENGTH
    guessed_cells = np.argwhere(np.isin(state, ["kept", "redrawn", "new", "reset"]) & ~now)
    assert len(guessed_cells) == len(it.drafts) - len(it.committed)
    for row, col in guessed_cells:
        assert np.abs(drawn[row * 24 + 12, col * 24 + 12] - faded).max() <= 1
    row, col = np.argwhere(now)[0]  # committed by this pass: its own pixels, not a guess
    assert (drawn[row * 24 + 12, col * 24 + 12] == 255).all()
