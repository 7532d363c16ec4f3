"""Plotly figures of a Trace: the Jacobi window, acceptance maps, per-iteration series, speedups.

Every function is pure (trace in, figure out) so the UI, the CLI and the tests draw the same thing.
"""

from __future__ import annotations

import math
import textwrap
from functools import partial

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specviz.metrics import (
    MAP_KINDS,
    GridState,
    acceptance_maps,
    clock_seconds,
    draft_alone,
    grid_state,
    has_trees,
    per_iteration,
    summary,
    verdict_clock,
    window_size,
)
from specviz.trace import (
    ContinuousRecord,
    Iteration,
    RowsRecord,
    TokenRecord,
    Trace,
    TraceGeometry,
    TreeRecord,
    WindowRecord,
)
from specviz.viz.narration import LatencyVerdict, latency_verdict, promise, ratio_text, run_verdict
from specviz.viz.palette import BACKGROUND, LABELS, NOW_LABEL, OKABE_ITO, STATES, colors, legend_states, theme

# characters per title line (normal, large type): plotly does not wrap titles, so they are wrapped for the
# narrowest half-width plot the app has (about 314 px in a 1100 px window; measured 8.6 px per character in
# normal type, 13.6 in large type, whose smallest plots are on a 1280 px projector)
TITLE_CHARS = {False: 34, True: 24}
MESSAGE_CHARS = {False: 56, True: 32}  # characters per line of a message in place of a plot, likewise
LARGE_EXTRA_HEIGHT = 120  # large type's figures are this much taller than asked
TITLE_PAD = {False: 40, True: 64}  # pixels above a title (normal, large type): the app lays its plot label
# and toolbar over the top of the figure
SUBPLOT_TITLE_SIZE = 16  # what make_subplots sets its titles' font to
STRIP = 0.12  # height of the fate strip under the ratio bars, in units of the ratio axis
OFFSET_TITLE = "offset in the window (0 = first draft)"  # not the grid's columns, drawn above it
# a wide figure's height (Inspect's window or tree in the projector layout): with the sentence, the buttons
# and the tabs above it, a 1280 x 720 screen holds it
WIDE_HEIGHT = 430
# Compare's chart: a method's two bars side by side, each this share of its slot (step compression left of the
# slot's middle, latency right); the bottom margin, which Plotly may widen for long method names; a latency
# label's height in lines of text (half a line to spare for that widening), and its gap in pixels to the bar,
# whisker or AR line it stands on
BAR_WIDTH = 0.4
COMPARISON_BOTTOM = 80
LABEL_LINES, LABEL_GAP = 1.5, 3
LONG_RUN = 60  # iterations beyond which a per-iteration bar chart draws its bars touching
ORIGIN_STANDOFF = {False: 0, True: 6}  # px from a per-pass plot's y axis to its labels: in large type both "0" met
WIDE_TITLE = 1.6  # a wide figure's title line, in half-width plots' lines: about 590 px on a 1280 px projector
# the bars' subtitle; in large type (as big as the axis titles) the short form fits a half-width plot
RATIO_TITLE = {False: "acceptance ratio min(1, p_new/p_old) per draft", True: "ratio min(1, p_new/p_old)"}
MAP_TITLES = {
    "iteration": "iteration that committed each cell",
    "run_length": "tokens committed together with each cell",
    "redraws": "times each cell was drafted before it was fixed",
}
MAP_KEYS = {"iteration": "iteration", "run_length": "run length", "redraws": "times drafted"}  # colour bar, hover


def _finish(fig: go.Figure, title: str, height: int, dark: bool, large: bool, widths: float = 1) -> go.Figure:
    """Apply the shared theme, title and height. Titles are wrapped to fit a half-width plot (`widths`
    2: a plot across the page), and the top margin is sized to their lines, a legend above the plot and
    an axis on top, so with large type none is clipped nor runs into another."""
    legend_above = fig.layout.legend.y is not None and fig.layout.legend.y > 1
    axis_above = fig.layout.xaxis.side == "top"  # its ticks and title go between the title and the plot
    title, top = title_margin(title, large, widths, legend_above, axis_above)
    height += LARGE_EXTRA_HEIGHT if large else 0
    fig.update_layout(
        **theme(dark, large),
        title={"text": title, "y": 1 - TITLE_PAD[large] / height, "yanchor": "top", "yref": "container"},
        margin={"t": top},
        height=height,
    )
    return fig


def title_margin(
    title: str, large: bool, widths: float = 1, legend_above: bool = False, axis_above: bool = False
) -> tuple[str, int]:
    """The title as `_finish` wraps it, and the top margin it gives the figure (a figure that sizes its plot
    to what it holds, the draft tree, asks this first)."""
    chars = int(TITLE_CHARS[large] * widths)
    title = "<br>".join("<br>".join(textwrap.wrap(line, chars)) for line in title.split("<br>"))
    font = theme(False, large)["font"]["size"]
    line = math.ceil(1.3 * round(1.4 * font))  # plotly's title: 1.4 times the font, lines 1.3 apart (1.6 ran short)
    top = TITLE_PAD[large] + 20 + (title.count("<br>") + 1) * line + (2 * font if legend_above else 0)
    return title, top + (3 * font if axis_above else 0)


def _subplot_titles_as_text(fig: go.Figure) -> go.Figure:
    """Subplot titles (make_subplots gives them a fixed 16 px) in the figure's own text size, so large
    type enlarges them too. They are raised half a line, as the top tick's label reaches half a line above
    its axis and ran into its panel's title in large type, and the plots are lowered a line, which keeps them
    clear of the figure's title too."""
    titles = {annotation.text for annotation in fig.layout.annotations if annotation.font.size == SUBPLOT_TITLE_SIZE}
    size = fig.layout.font.size
    for text in titles:
        fig.update_annotations(selector={"text": text}, font_size=size, yshift=round(size / 2))
    fig.update_layout(margin_t=fig.layout.margin.t + size)
    return fig


def message_figure(title: str, message: str, dark: bool = False, large: bool = False, height: int = 420) -> go.Figure:
    """A figure that says, in place of a plot, why there is nothing to plot (a view of another kind of run)."""
    fig = go.Figure()
    fig.add_annotation(
        # the message's font is smaller than the title's, but twice the title's width ran off a half-width plot
        text="<br>".join(textwrap.wrap(message, MESSAGE_CHARS[large])),
        x=0.5,
        y=0.5,
        xref="paper",
        yref="paper",
        showarrow=False,
    )
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _finish(fig, title, height, dark, large)


def _state_scale(dark: bool) -> list[list]:
    """A stepped colour scale that maps state index k (0..len(STATES)-1) to that state's colour."""
    palette = colors(dark)
    scale = []
    for k, state in enumerate(STATES):
        scale += [[k / len(STATES), palette[state]], [(k + 1) / len(STATES), palette[state]]]
    return scale


def _state_heatmap(states: np.ndarray, hover: np.ndarray, dark: bool, **kwargs: object) -> go.Heatmap:
    """A heatmap whose cells take the colour of their state, with a hover text per cell."""
    index = {state: k for k, state in enumerate(STATES)}
    z = np.vectorize(index.__getitem__, otypes=[int])(states)
    return go.Heatmap(
        z=z,
        zmin=-0.5,
        zmax=len(STATES) - 0.5,
        colorscale=_state_scale(dark),
        showscale=False,
        customdata=hover,
        hovertemplate="%{customdata}<extra></extra>",
        xgap=1,
        ygap=1,
        **kwargs,
    )


def window_title(trace: Trace, j: int) -> str:
    """'iteration 12/40: 5 accepted, rejected at 5' and the variants of `pass_outcome`."""
    return f"iteration {j}/{len(trace.iterations) - 1}: {pass_outcome(trace.iterations[j], trace.geometry.cols)}"


def pass_caption(trace: Trace, j: int) -> str:
    """The race's live caption of pass j: 'pass 12: all 16 accepted, a whole row at once'."""
    return f"pass {j}: {pass_outcome(trace.iterations[j], trace.geometry.cols)}"


def pass_outcome(it: Iteration, cols: int) -> str:
    """What one pass did, in a few words: '5 accepted, rejected at 5', 'all 16 accepted, +1 sampled after
    the window', '59 drafts in a tree, 5 accepted, +1 drawn after them', '2 tokens drawn together, rows 7,
    8', '3 of 8 drafts accepted'; a pass that fixed a grid row's worth of tokens or more says so."""
    whole_row = ", a whole row at once" if len(it.committed) >= cols else ""
    return OUTCOMES[it.kind](it, whole_row)


def _token_outcome(it: TokenRecord, whole_row: str) -> str:
    return f"no drafts, {len(it.committed)} token sampled"


def _window_outcome(it: WindowRecord, whole_row: str) -> str:
    if it.rejected_at is None:
        bonus = len(it.committed) - it.accepted
        return f"all {it.accepted} accepted" + (f", +{bonus} sampled after the window" if bonus else "") + whole_row
    return f"{it.accepted} accepted, rejected at {it.rejected_at}{whole_row}"


def _tree_outcome(it: TreeRecord, whole_row: str) -> str:
    drawn = ", +1 drawn after them" if len(it.committed) > it.accepted else ""
    return f"{len(it.tree.tokens)} drafts in a tree, {it.accepted} accepted{drawn}{whole_row}"


def _continuous_outcome(it: ContinuousRecord, whole_row: str) -> str:
    if not it.fate:  # AR or the draft alone on a continuous pair
        return f"no drafts, {len(it.committed)} token sampled"
    return f"{it.accepted} of {len(it.fate)} drafts accepted{whole_row}"


def _rows_outcome(it: RowsRecord, whole_row: str) -> str:
    if it.windows:  # PJD: a window in every row in flight
        rows = f"rows {it.windows[0].row}-{it.windows[-1].row}" if len(it.windows) > 1 else f"row {it.windows[0].row}"
        windows = "1 window" if len(it.windows) == 1 else f"{len(it.windows)} windows"
        drafts = "1 draft" if it.accepted == 1 else f"{it.accepted} drafts"
        committed = "1 token" if len(it.committed) == 1 else f"{len(it.committed)} tokens"
        return f"{windows} ({rows}): {drafts} accepted, {committed} committed"
    if len(it.rows) == 1:
        return f"1 token drawn, row {it.rows[0]}"
    return f"{len(it.rows)} tokens drawn together, rows {', '.join(str(row) for row in it.rows)}"


# what each kind of pass says it did
OUTCOMES = {
    "token": _token_outcome,
    "window": _window_outcome,
    "tree": _tree_outcome,
    "continuous": _continuous_outcome,
    "rows": _rows_outcome,
}


def _outline(cells: np.ndarray, inset: float) -> tuple[list, list]:
    """Closed rectangles around (row, col) cells, as one line trace's x and y (None between)."""
    x: list = []
    y: list = []
    for row, col in cells:
        left, right, top, bottom = col - 0.5 + inset, col + 0.5 - inset, row - 0.5 + inset, row + 0.5 - inset
        x += [left, right, right, left, left, None]
        y += [top, top, bottom, bottom, top, None]
    return x, y


def window_figure(trace: Trace, j: int, dark: bool = False, large: bool = False, wide: bool = False) -> go.Figure:
    """The Jacobi window of iteration j on the grid, and its drafts' acceptance ratios as bars, both
    coloured by draft fate: a short bar shows why a draft was rejected. A draft-tree run has no window:
    its iterations are drawn by `specviz.viz.trees.tree_figure`, and this figure says so. `wide`: the bars
    and the legend beside the grid rather than under it, for a short wide screen (a 1280 x 720 projector,
    where the stacked figure runs below the screen's edge; in a narrow half-page plot it would squeeze the grid).
    Large type keeps the stacked figure: its legend beside the grid left the grid about 130 px wide."""
    grid = grid_state(trace, j)  # raises a clear IndexError for a bad j
    if has_trees(trace):
        return message_figure(
            window_title(trace, j),
            f"{trace.method} verifies a draft tree per pass, not a Jacobi window: see this iteration's draft tree.",
            dark,
            large,
        )
    it = trace.iterations[j]
    wide = wide and not large
    drafted = it.window_drafts  # another kind of pass: an empty window
    fates = it.outcome() if drafted else []
    describe = partial(_describe_position, trace, it, drafted)
    fig, bars = _window_panels(wide, large)
    palette = colors(dark)
    _draw_grid(fig, grid, np.vectorize(describe, otypes=[object])(grid.position, grid.state), dark, palette)
    hover = [describe(it.start + i, state) for i, state in enumerate(fates)]
    ratios = it.ratio if drafted else []
    row_windows = isinstance(it, RowsRecord) and it.verifies_drafts
    if row_windows:  # PJD: every row's window, top row first
        ratios, fates, hover = _row_window_bars(it)
    width = max(window_size(trace), _widest_rows_pass(trace))
    _draw_ratios(fig, ratios, fates, hover, palette, bars)
    if drafted and it.rejected_at is not None:
        reach = 1.2 if wide else 0.9 if large else 0.6
        _mark_rejection(fig, it.rejected_at, ratios, width, dark, palette, bars, reach)
    rows_drawn = trace.kind == "rows" and not fates  # ZipAR: tokens drawn, nothing verified
    _add_state_keys(fig, ["committed", "pending"] if rows_drawn else legend_states(set(fates)), palette)
    _window_axes(fig, trace.geometry, width, wide, bars)
    if row_windows:
        _mark_rows(fig, it, palette, bars, wide)
    if not fates:
        _say_no_drafts(fig, it.kind, width)
    return _window_layout(fig, window_title(trace, j), dark, large, wide)


def _row_window_bars(it: RowsRecord) -> tuple[list[float], list[str], list[str]]:
    """The bars of a pass over rows in flight, each with its window (PJD): every row's drafts in turn, top
    row first, with their ratios, fates and hover text."""
    ratios, fates, hover = [], [], []
    for window in it.windows:
        for offset, shown in window.shown():
            ratios.append(window.ratio[offset])
            fates.append(shown)
            then = f"<br>then: {LABELS[window.fate[offset]]}" if window.fate[offset] != shown else ""
            hover.append(
                f"row {window.row}, draft {offset + 1} after its head (position {window.head + 1 + offset})<br>"
                f"draft token {window.drafts[offset]}  ratio {window.ratio[offset]:.3f}<br>"
                f"state: {LABELS[shown]}{then}"
            )
    return ratios, fates, hover


def _mark_rows(fig: go.Figure, it: RowsRecord, palette: dict, bars: dict, wide: bool) -> None:
    """Which row each group of bars belongs to: a dashed line between rows and the row's number under its
    own (the offsets would run on from row to row), and the axis named for what it shows (wide: the bars'
    own title says it)."""
    first, middles, names = 0, [], []
    for window in (window for window in it.windows if window.drafts):
        if first:
            fig.add_vline(x=first - 0.5, line={"dash": "dash", "color": palette["outline"], "width": 1}, **bars)
        middles.append(first + (len(window.drafts) - 1) / 2)
        names.append(f"row {window.row}")
        first += len(window.drafts)
    title = None if wide else "each row's drafts in turn, top row first"
    fig.update_xaxes(tickvals=middles, ticktext=names, title=title, **bars)


def _widest_rows_pass(trace: Trace) -> int:
    """The most drafts one pass over rows in flight verified in all its rows' windows (PJD), so stepping
    through the run keeps one axis; 0 for any other run."""
    return max((len(it.drafted_ids()) for it in trace.iterations if isinstance(it, RowsRecord)), default=0)


def _describe_position(trace: Trace, it: Iteration, drafted: int, position: int, state: str) -> str:
    """Hover text of one sequence position in iteration `it`, whose first `drafted` positions from
    `it.start` hold its drafts."""
    lines = [f"position {position}", f"state: {LABELS[state]}"]
    if it.start <= position < it.start + drafted:
        i = position - it.start
        lines += [
            f"draft token {it.drafts[i]} (offset {i})",
            f"p_old {it.p_old[i]:.3f}  p_new {it.p_new[i]:.3f}  ratio {it.ratio[i]:.3f}",
        ]
        if it.fate[i] != state:  # a new draft still had a fate: kept or redrawn into the next window
            lines.append(f"then: {LABELS[it.fate[i]]}")
        if it.reused is not None and it.reused[i]:  # SJD++: kept by its confidence, not a redraw that matched
            lines.append("reused as drafted: confidence above the reuse threshold")
    if position < it.start + len(it.committed):
        lines.append(f"token {trace.tokens[position]}" + (" (committed now)" if position >= it.start else ""))
    return "<br>".join(lines)


def _window_panels(wide: bool, large: bool) -> tuple[go.Figure, dict[str, int]]:
    """The grid's panel (row 1, column 1) and the bars' panel, and where the bars' panel is."""
    if wide:  # the grid down the left; the bars top right, the legend under them
        fig = make_subplots(
            rows=2,
            cols=2,
            specs=[[{"rowspan": 2}, {}], [None, None]],
            column_widths=[0.55, 0.45],
            row_heights=[0.38, 0.62],
            horizontal_spacing=0.1,
            vertical_spacing=0.02,
            subplot_titles=("", RATIO_TITLE[True]),
        )
        return fig, {"row": 1, "col": 2}
    fig = make_subplots(
        rows=2,
        cols=1,
        row_heights=[0.72, 0.28],
        vertical_spacing=0.14 if large else 0.1,
        subplot_titles=("", RATIO_TITLE[large]),
    )
    return fig, {"row": 2, "col": 1}


def _draw_grid(fig: go.Figure, grid: GridState, hover: np.ndarray, dark: bool, palette: dict) -> None:
    """The grid's cells coloured by state, the cells this iteration committed outlined."""
    fig.add_trace(_state_heatmap(grid.state, hover, dark, name="grid"), row=1, col=1)
    x, y = _outline(np.argwhere(grid.now), inset=0.08)
    fig.add_trace(
        go.Scatter(
            x=x, y=y, mode="lines", line={"color": palette["outline"], "width": 3}, name=NOW_LABEL, hoverinfo="skip"
        ),
        row=1,
        col=1,
    )


def _draw_ratios(fig: go.Figure, ratios: list, fates: list[str], hover: list[str], palette: dict, bars: dict) -> None:
    """The drafts' acceptance ratios, and under them a strip of every draft's fate: a ratio of 0 still
    shows its fate."""
    offsets = np.arange(len(fates))
    fills = [palette[state] for state in fates]
    for y, base, name in ((ratios, None, "window"), ([STRIP] * len(offsets), -1.3 * STRIP, "fates")):
        fig.add_trace(
            go.Bar(
                x=offsets,
                y=y,
                base=base,
                marker={"color": fills},
                customdata=hover,
                hovertemplate="%{customdata}<extra></extra>",
                name=name,
                showlegend=False,
            ),
            **bars,
        )


LABEL_HEIGHT = 0.6  # where the "rejected" label sits on the ratio axis
BAR_HALF_WIDTH = 0.4  # plotly's bars fill 0.8 of an offset


def _label_place(rejected_at: int, ratios: list[float], width: int, reach: float) -> float:
    """Where the "rejected" label goes along the bars (`reach`: its half-width in offsets): the nearest place
    at least 2 offsets from the rejected draft whose bars end below the label (drafts after a rejection have
    bars where SJD++ re-checks them), the side away from the nearer end first; where no such place exists,
    its old spot, 2.5 offsets that side of the rejected draft."""
    width = max(width, 1)
    lean = 1 if rejected_at < width / 2 else -1
    places = [rejected_at + side * lean * (2 + step / 2) for step in range(2 * width) for side in (1, -1)]
    places = [x for x in places if reach - 0.5 <= x <= width - 0.5 - reach]

    def clear(x: float) -> bool:
        return all(ratio < LABEL_HEIGHT - 0.12 for k, ratio in enumerate(ratios) if abs(x - k) < reach + BAR_HALF_WIDTH)

    return next((x for x in places if clear(x)), rejected_at + 2.5 * lean)


def _mark_rejection(
    fig: go.Figure,
    rejected_at: int,
    ratios: list[float],
    width: int,
    dark: bool,
    palette: dict,
    bars: dict,
    reach: float,
) -> None:
    """The rejected draft crossed out and labelled: its ratio is often about 0, no bar at all. `reach`: the
    label's half-width in offsets (wider where the bars' panel is narrow or the type large)."""
    fig.add_trace(
        go.Scatter(
            x=[rejected_at],
            y=[-0.8 * STRIP],
            mode="markers",
            marker={"symbol": "x", "size": 14, "color": palette["outline"]},
            hoverinfo="skip",
            name="rejected",
            showlegend=False,
        ),
        **bars,
    )
    fig.add_annotation(
        text="rejected",
        x=rejected_at,
        y=0,
        ax=_label_place(rejected_at, list(ratios), width, reach),
        ay=LABEL_HEIGHT,
        xref="x2",
        yref="y2",
        axref="x2",
        ayref="y2",
        arrowcolor=palette["rejected"],
        arrowwidth=2,
        bgcolor=BACKGROUND[dark],
        bordercolor=palette["rejected"],
        borderwidth=2,
    )


def _add_state_keys(fig: go.Figure, states: list[str], palette: dict) -> None:
    """A legend entry per state: a coloured square with no point to draw."""
    for state in states:
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="markers",
                marker={"symbol": "square", "size": 14, "color": palette[state]},
                name=LABELS[state],
            ),
            row=1,
            col=1,
        )


def _window_axes(fig: go.Figure, g: TraceGeometry, width: int, wide: bool, bars: dict) -> None:
    """The grid's square cells, row 0 on top and the columns above it, so the draft offsets below do not
    read as them; the bars' offsets and ratios."""
    fig.update_xaxes(
        showgrid=False,
        zeroline=False,
        row=1,
        col=1,
        range=[-0.5, g.cols - 0.5],
        constrain="domain",
        side="top",
        title="column",
    )
    fig.update_yaxes(
        showgrid=False,
        zeroline=False,
        row=1,
        col=1,
        range=[g.rows - 0.5, -0.5],
        scaleanchor="x",
        constrain="domain",
        title="row",
    )
    fig.update_xaxes(
        showgrid=False,
        zeroline=False,
        **bars,
        range=[-0.5, max(width, 1) - 0.5],
        showticklabels=bool(width),
        title=OFFSET_TITLE if width and not wide else None,  # wide: the bars' own title says per draft
    )
    # wide: the bars' title above them names the ratio; an axis title beside them sat on the grid's last column
    ratio = None if wide else "ratio"
    fig.update_yaxes(zeroline=False, **bars, range=[-1.4 * STRIP, 1.05], tickvals=[0, 0.5, 1], title=ratio)


def _say_no_drafts(fig: go.Figure, kind: str, width: int) -> None:
    """A note in the bars' panel of an iteration that verified no drafts."""
    fig.add_annotation(
        text="no drafts this iteration"
        if kind != "rows"
        else "nothing verified: the outlined cells were<br>drawn together, one per row in flight",
        x=(max(width, 1) - 1) / 2,
        y=0.5,
        xref="x2",
        yref="y2",
        showarrow=False,
        font={"size": 14},
    )


def _window_layout(fig: go.Figure, title: str, dark: bool, large: bool, wide: bool) -> go.Figure:
    """The legend, the height and the shared theme; the bars' title in the figure's text size."""
    if wide:  # the legend in the right column, under the bars' offset axis
        legend = {"orientation": "v", "yanchor": "top", "y": 0.5, "x": 0.6, "xanchor": "left"}
    else:  # large type: the offset axis's title grows, so the legend moves down clear of it
        legend = {"orientation": "h", "yanchor": "top", "y": -0.24 if large else -0.14, "x": 0.5, "xanchor": "center"}
    fig.update_layout(barmode="overlay", legend=legend)
    # large type: taller as well, so the grid grows with the text instead of giving way to it
    height = WIDE_HEIGHT if wide else 900 if large else 760
    fig = _finish(fig, title, height, dark, large, widths=WIDE_TITLE if wide else 1)
    if wide:  # nothing under the grid: no bottom margin
        fig.update_layout(margin={"b": 10})
    fig.update_annotations(selector={"text": RATIO_TITLE[large or wide]}, font_size=fig.layout.font.size)  # as the rest
    return fig


def acceptance_map_figure(trace: Trace, kind: str, dark: bool = False, large: bool = False) -> go.Figure:
    """One acceptance map over the grid: where runs were long, late, or drafted many times."""
    if kind not in MAP_KINDS:
        raise ValueError(f"unknown map {kind!r}; choose one of {', '.join(MAP_KINDS)}")
    values = acceptance_maps(trace)[kind]
    fig = go.Figure(
        go.Heatmap(
            z=values,
            colorscale="Cividis",
            colorbar={"title": {"text": MAP_KEYS[kind]}},
            hovertemplate=f"row %{{y}}, column %{{x}}<br>{MAP_KEYS[kind]} %{{z}}<extra></extra>",
            xgap=1,
            ygap=1,
        )
    )
    g = trace.geometry
    fig.update_xaxes(showgrid=False, zeroline=False, range=[-0.5, g.cols - 0.5], constrain="domain", title="column")
    fig.update_yaxes(
        showgrid=False, zeroline=False, range=[g.rows - 0.5, -0.5], scaleanchor="x", constrain="domain", title="row"
    )
    return _finish(fig, f"{trace.method}: {MAP_TITLES[kind]}", 560, dark, large)


def accepted_length_figure(trace: Trace, dark: bool = False, large: bool = False) -> go.Figure:
    """Tokens committed and drafts accepted per iteration: how far each pass got."""
    series = per_iteration(trace)
    palette = colors(dark)
    x = np.arange(len(trace.iterations))
    # a long run (a continuous pair's 170 passes) has a pixel or two per pass: bars that touch, the accepted
    # ones as wide as the committed, or both thin to hairlines in washed-out colours
    long = len(x) > LONG_RUN
    fig = go.Figure(
        [
            go.Bar(x=x, y=series["committed"], name="tokens committed", marker_color=palette["committed"]),
            go.Bar(
                x=x,
                y=series["accepted"],
                name="drafts accepted",
                marker_color=palette["accepted"],
                width=None if long else 0.5,
            ),
        ]
    )
    if long:  # the template's white outlines would stripe touching bars
        fig.update_traces(marker_line_width=0)
    mean = len(trace.tokens) / max(len(trace.iterations), 1)
    fig.update_layout(
        barmode="overlay",
        bargap=0 if long else None,
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
    )
    fig.update_xaxes(title="iteration")
    fig.update_yaxes(title="tokens", ticklabelstandoff=ORIGIN_STANDOFF[large])
    return _finish(fig, f"{trace.method}: {mean:.2f} tokens per iteration", 420, dark, large)


def changed_figure(trace: Trace, dark: bool = False, large: bool = False) -> go.Figure:
    """Drafts carried into the next window whose token changed, against how many were carried; a
    draft-tree run carries no drafts from pass to pass, and the figure says so."""
    if has_trees(trace):
        return message_figure(
            f"{trace.method}: no drafts carried between passes",
            f"{trace.method} grows a new draft tree every pass: no draft is carried into the next one, so none "
            "can change (the SCD effect is a window methods' view).",
            dark,
            large,
        )
    series = per_iteration(trace)
    palette = colors(dark)
    x = np.arange(len(trace.iterations))
    fig = go.Figure(
        [
            go.Bar(x=x, y=series["changed"], name="drafts changed", marker_color=palette["redrawn"]),
            go.Scatter(
                x=x,
                y=series["carried"],
                name="drafts carried into the next window",
                mode="lines",
                line={"color": OKABE_ITO["blue"], "shape": "hvh", "width": 2},
            ),
        ]
    )
    fig.update_layout(legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0})
    fig.update_xaxes(title="iteration")
    fig.update_yaxes(title="drafts", ticklabelstandoff=ORIGIN_STANDOFF[large])
    return _finish(fig, f"{trace.method}: {int(series['changed'].sum())} draft changes in all", 420, dark, large)


def race_figure(trace: Trace, ar: Trace, dark: bool = False, large: bool = False) -> go.Figure:
    """Model passes and seconds of the method next to AR on the same prompt and seed."""
    numbers = summary(trace, ar)
    palette = colors(dark)
    # large type: titles short enough for half a half-width plot each, or they run into each other
    clock = verdict_clock(trace, ar)  # the seconds its verdict compared (a busy machine's wall clock differs)
    compute = clock == "compute"
    titles = ("passes (NFE)", "compute s" if compute else "seconds")
    if not large:
        titles = ("model passes (NFE)", "compute time (seconds)" if compute else "latency (seconds)")
    alone = draft_alone(trace)  # its passes are the draft's: one bar, not the target's prefill beside them
    with_draft = trace.draft_nfe is not None and trace.method != ar.method and not alone
    # three bars of passes (AR, the method, its draft) get the wider panel, their labels level
    widths = [0.6, 0.4] if with_draft else [0.5, 0.5]
    fig = make_subplots(rows=1, cols=2, subplot_titles=titles, horizontal_spacing=0.15, column_widths=widths)

    def passes(run: Trace) -> int:
        return numbers["nfe"] if run is trace else run.nfe

    # seconds to 3 figures ("35 s", "4.98 s"; in large type without the unit, which the panel's title gives):
    # a longer label runs into the axis beside a narrow bar
    seconds = "{:.3g}" if large else "{:.3g} s"

    def seconds_of(run: Trace) -> float:
        return clock_seconds(run, clock)

    for col, (value, text) in enumerate([(passes, "{:d}"), (seconds_of, seconds)], start=1):
        for run, color in ((ar, palette["committed"]), (trace, palette["accepted"])):
            fig.add_trace(
                go.Bar(
                    x=[run.method],
                    y=[value(run)],
                    name=run.method,
                    legendgroup=run.method,
                    showlegend=col == 1,
                    marker_color=color,
                    text=[text.format(value(run))],
                    textposition="outside",
                    constraintext="none",  # plotly would shrink an outside label to the bar's width
                    cliponaxis=False,
                ),
                row=1,
                col=col,
            )
    if with_draft:  # the draft's, beside the target's
        fig.add_trace(
            go.Bar(
                x=["draft"], y=[trace.draft_nfe], name="draft model passes",
                marker_color=palette["new"], text=[f"{trace.draft_nfe:d}"], textposition="outside", cliponaxis=False,
            ),
            row=1,
            col=1,
        )  # fmt: skip
    # level labels; in large type none: three would run together, and the legend names each colour
    fig.update_xaxes(tickangle=0, showticklabels=not large)
    # in large type no scale either: each bar carries its number, and a narrow bar's number ran into the ticks
    fig.update_yaxes(showticklabels=not large, showgrid=not large)
    # the legend below the plots leaves both panels their width, so their titles stay apart
    fig.update_layout(legend={"orientation": "h", "yanchor": "top", "y": -0.15, "x": 0.5, "xanchor": "center"})
    for col, value in enumerate((passes, seconds_of), start=1):
        top = 1.2 * max(value(trace), value(ar), trace.draft_nfe or 0 if col == 1 else 0) or 1.0  # room for labels
        fig.update_yaxes(range=[0, top], row=1, col=col)
    # the race summary's verdict and interval, word for word (the camera button saves this figure); "vs ar" left
    # out, as the verdict names AR, and in large type the method too (the legend names it)
    latency = run_verdict(trace, ar).sentence
    compression = f"{ratio_text(numbers['step_compression'])} step compression"
    title = f"{compression},<br>{latency}" if large else f"{trace.method}: {compression},<br>{latency}"
    if alone:
        c = numbers["cost_ratio"]
        title = f"{trace.method}: the draft model alone,<br>{c:.2f}x the target's AR time (cost ratio c)"
    return _subplot_titles_as_text(_finish(fig, title, 420, dark, large))


def comparison_figure(rows: list[dict], dark: bool = False, large: bool = False) -> go.Figure:
    """Step compression and latency against AR of several methods (`latency_speedup`, and `latency_spread`
    where the run was timed again); a method that is not lossless hatched and labelled with its promise, each
    latency in the words of its verdict ('about the same', '1.19x slower'), whiskers from the lowest to the
    highest timing where every run was timed again."""
    labels = [row["method"] + ("" if row["lossless"] else f" ({promise(row['method'], False)})") for row in rows]
    hatch = ["" if row["lossless"] else "/" for row in rows]
    verdicts = [latency_verdict(row["latency_speedup"], row.get("latency_spread")) for row in rows]
    spread = bool(rows) and all(verdict.spread is not None for verdict in verdicts)
    whiskers = (
        {
            "type": "data",
            "array": [verdict.spread.high - verdict.value for verdict in verdicts],
            "arrayminus": [verdict.value - verdict.spread.low for verdict in verdicts],
            "color": colors(dark)["committed"],
        }
        if spread
        else None
    )
    bars = {"textposition": "outside", "cliponaxis": False, "width": BAR_WIDTH}
    fig = go.Figure(
        [
            go.Bar(
                x=labels,
                y=[row["step_compression"] for row in rows],
                name="step compression (tokens per pass)",
                marker={"color": OKABE_ITO["blue"], "pattern": {"shape": hatch, "solidity": 0.4}},
                text=[ratio_text(row["step_compression"]) for row in rows],
                offset=-BAR_WIDTH,
                **bars,
            ),
            # its words are drawn by `_latency_labels`, clear of the whiskers and the AR line (the bar keeps them
            # for its hover)
            go.Bar(
                x=labels,
                y=[verdict.value for verdict in verdicts],
                name="latency speedup over AR",
                marker={"color": OKABE_ITO["orange"], "pattern": {"shape": hatch, "solidity": 0.4}},
                text=[verdict.label for verdict in verdicts],
                error_y=whiskers,
                offset=0.0,
                **{**bars, "textposition": "none"},
            ),
        ]
    )
    fig.add_hline(y=1.0, line_dash="dash", line_color=colors(dark)["committed"])
    # the line's label beyond the plot's right edge: inside, it sat on a bar at either end
    fig.add_annotation(text="AR = 1x", x=1, xref="paper", xanchor="left", y=1.0, showarrow=False)
    fig.update_layout(legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0})
    highest = [verdict.spread.high if verdict.spread else verdict.value for verdict in verdicts]
    highest += [row["step_compression"] for row in rows]
    top = 1.2 * max([1.0, *(value for value in highest if math.isfinite(value))])  # room for the labels above
    fig.update_yaxes(title="times AR", range=[0, top])
    title = "methods against AR (hatched: not lossless" + ("; whiskers: lowest and highest timing)" if spread else ")")
    fig = _finish(fig, title, 460, dark, large, widths=2)  # Compare's plot spans the page
    fig.update_layout(margin={"r": 110 if large else 90, "b": COMPARISON_BOTTOM})
    return _latency_labels(fig, verdicts)


def _latency_labels(fig: go.Figure, verdicts: list[LatencyVerdict]) -> go.Figure:
    """Each latency's words over its bar, above its whisker, and above the dashed AR = 1x line where they would
    cross it: a latency just under AR's drew its label across the line."""
    top = fig.layout.yaxis.range[1]
    per_px = top / (fig.layout.height - fig.layout.margin.t - fig.layout.margin.b)  # axis units per pixel
    reach = (LABEL_LINES * fig.layout.font.size + LABEL_GAP) * per_px  # from a label's foot to its top
    for k, verdict in enumerate(verdicts):
        foot = verdict.spread.high if verdict.spread else verdict.value  # the whisker's top, or the bar's
        foot = foot if math.isfinite(foot) else 0.0
        if foot < 1.0 < foot + reach:
            foot = 1.0
        fig.add_annotation(
            text=verdict.label, x=k + BAR_WIDTH / 2, y=foot, yanchor="bottom", yshift=LABEL_GAP, showarrow=False
        )
    return fig


def pass_cost_figure(costs: list, dark: bool = False, large: bool = False) -> go.Figure:
    """The cost of a pass over n tokens against a one-token pass (`specviz.measure.cost.PassCost`
    rows), between the two limits: flat (a memory-bound GPU pass) and n (compute-bound)."""
    sizes = [cost.tokens for cost in costs]
    ranges = [(cost.ratio, *cost.ratio_range(costs[0])) for cost in costs]  # the repeats' range of each ratio
    fig = go.Figure(
        [
            go.Scatter(x=sizes, y=sizes, name="costs n times one (compute-bound)", mode="lines",
                       line={"dash": "dot", "color": colors(dark)["committed"]}),
            go.Scatter(x=sizes, y=[1.0] * len(sizes), name="costs one pass (memory-bound, a GPU)", mode="lines",
                       line={"dash": "dash", "color": OKABE_ITO["bluish_green"]}),
            go.Scatter(x=sizes, y=[cost.ratio for cost in costs], name="measured here (median, repeats' range)",
                       mode="lines+markers+text", text=[f"{cost.ratio:.1f}x" for cost in costs],
                       textposition="top left", line={"color": OKABE_ITO["orange"], "width": 3},
                       error_y={"type": "data", "symmetric": False, "array": [high - r for r, _, high in ranges],
                                "arrayminus": [r - low for r, low, _ in ranges]}),
        ]
    )  # fmt: skip
    fig.update_layout(legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0})
    fig.update_xaxes(title="tokens in the pass", type="log", tickvals=sizes)
    fig.update_yaxes(title="cost over a one-token pass", type="log", tickvals=[0.5, 1, 2, 4, 8, 16, 32, 64])
    return _finish(fig, "what a pass costs on this device", 420, dark, large)
