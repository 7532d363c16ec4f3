"""Publication figures of traces: matplotlib, vector PDF and SVG (or PNG), at exact sizes in inches.

The numbers come from the same pure functions as the app's plotly figures (specviz.viz.analysis)
and the colours from the same palette; only the drawing back end differs. Papers are often read
in grey, and several fate colours have nearly the same lightness there, so those fates are also
hatched, and accepted drafts keep the outline of cells committed this iteration (see `grey_mark`).
No model is loaded here: the image panel of the window figure comes from a `decode` callable.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import PatchCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import MaxNLocator
from PIL import Image

from specviz.figure_options import FIGURE_KINDS, FORMATS, STYLES, WIDTH_RANGE_IN, FigureKind, Style
from specviz.trace import Iteration, Trace
from specviz.viz import analysis
from specviz.viz.analysis import (
    acceptance_maps,
    fates,
    grid_state,
    has_trees,
    per_iteration,
    per_tree,
    ratio_text,
    summary,
    tokens_through,
    tree_shape_maps,
)
from specviz.viz.figures import OFFSET_TITLE, window_title
from specviz.viz.palette import BACKGROUND, FOREGROUND, LABELS, NOW_LABEL, OKABE_ITO, STATES, colors, lightness

HATCHES = {
    "rejected": "xxxx", "kept": "----", "redrawn": "////", "reset": "\\\\\\\\", "new": "....", "discarded": "||||"
}  # fmt: skip
OUTLINED = frozenset({"accepted"})  # accepted cells are always committed this iteration, so always outlined
GREY_STEP = 10.0  # CIE L* apart: two plain colours this far apart stay distinct when printed in grey
STRIP_HEIGHT = 0.12  # the fate strip under the ratio bars, in units of the ratio axis
IMAGE_PIXELS = 512  # the image panel is upscaled (nearest) to about this size, so viewers keep cells crisp
METADATA = {"pdf": {"Creator": "specviz", "CreationDate": None}, "svg": {"Creator": "specviz", "Date": None}, "png": {}}
_DRAWING = threading.Lock()  # matplotlib's rcParams are global: one figure is drawn at a time

Decoder = Callable[[Trace, list[int]], Image.Image]


class FigureOptionError(ValueError):
    """Options that cannot make figures (unknown style or format, width or iteration out of range)."""


@dataclass(frozen=True)
class Setting:
    """Everything a drawing function needs besides the traces."""

    style: Style
    width_in: float
    iteration: int | None
    decode: Decoder | None

    @property
    def palette(self) -> dict[str, str]:
        return colors(self.style.dark)

    @property
    def foreground(self) -> str:
        return FOREGROUND[self.style.dark]


@dataclass(frozen=True)
class Need:
    """Records a figure needs from a trace; `missing` completes 'no ... in TRACE'."""

    missing: str
    present: Callable[[Trace], bool]


def _records_continuous_tokens(trace: Trace) -> bool:
    """Trace version 2 records no continuous tokens; continuous models (issue 13) add them."""
    return False


DRAFT_TREES = Need("draft trees", has_trees)
WINDOWS = Need("Jacobi windows", lambda trace: not has_trees(trace))  # a tree run's passes are trees
CONTINUOUS_TOKENS = Need("continuous-token records", _records_continuous_tokens)


@dataclass
class FigureFiles:
    """What `write_figures` wrote, and one line per figure it skipped or showed only in part."""

    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def state_lightness(state: str, dark: bool = False) -> float:
    """CIE L* of a cell state's colour in one theme."""
    return lightness(colors(dark)[state])


def grey_mark(state: str) -> tuple[str, bool]:
    """What tells a state apart when colour is gone, besides its lightness: (hatch, outlined)."""
    return HATCHES.get(state, ""), state in OUTLINED


def _hatch_color(fill: str) -> str:
    """Hatch lines that contrast with the fill they cross."""
    return "#000000" if lightness(fill) > 50 else "#FFFFFF"


def _state_patch(state: str, setting: Setting, **kwargs: object) -> Patch:
    """A legend swatch of one state: its colour, hatch and outline."""
    fill = setting.palette[state]
    hatch, outlined = grey_mark(state)
    return Patch(
        facecolor=fill,
        hatch=hatch or None,
        hatchcolor=_hatch_color(fill),
        edgecolor=setting.foreground if outlined else "none",
        linewidth=setting.style.line_pt * 1.2 if outlined else 0,
        **kwargs,
    )


def _mark_patches(patches: Sequence[Patch], states: Sequence[str], setting: Setting) -> None:
    """Give bars or areas already coloured by state their hatch and outline."""
    for patch, state in zip(patches, states, strict=True):
        hatch, outlined = grey_mark(state)
        if hatch:
            patch.set_hatch(hatch)
            patch.set_hatchcolor(_hatch_color(setting.palette[state]))
        if outlined:
            patch.set_edgecolor(setting.foreground)
            patch.set_linewidth(setting.style.line_pt)


def _new_figure(setting: Setting, height_in: float, title: str) -> Figure:
    """A figure of the asked width, laid out so that nothing spills over its edges."""
    fig = Figure(figsize=(setting.width_in, height_in), layout="constrained")
    fig.get_layout_engine().set(w_pad=2 / 72, h_pad=2 / 72, wspace=0.04, hspace=0.04)
    if setting.style.titles:
        fig.suptitle(title)
    return fig


def _title_space(setting: Setting) -> float:
    return 2.2 * setting.style.font_in if setting.style.titles else 0.0


def _bare_grid_axes(ax: Axes, rows: int, cols: int) -> None:
    """Axes that show a token grid: square cells, row 0 on top, no ticks."""
    ax.set_xlim(-0.5, cols - 0.5)
    ax.set_ylim(rows - 0.5, -0.5)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)


def _cell_gap(ax_width_in: float, cols: int) -> float:
    """Gap between cells as a fraction of a cell: about half a point, none when cells are tiny."""
    cell_pt = 72 * ax_width_in / cols
    return 0.0 if cell_pt < 3 else min(0.08, 0.5 / cell_pt)


def _seams(gap: float) -> dict:
    """Edges of abutting cells: none where a gap separates them; otherwise a hairline in each cell's own
    colour, or PDF viewers show seams between them."""
    return {"edgecolor": "none", "linewidth": 0} if gap else {"edgecolor": "face", "linewidth": 0.2}


def _draw_states(ax: Axes, states: np.ndarray, now: np.ndarray, setting: Setting, gap: float) -> None:
    """Grid cells in their state colours and hatches, the ones committed this iteration outlined."""
    for state in STATES:
        cells = np.argwhere(states == state)
        if not len(cells):
            continue
        fill = setting.palette[state]
        squares = [Rectangle((col - 0.5 + gap, row - 0.5 + gap), 1 - 2 * gap, 1 - 2 * gap) for row, col in cells]
        hatch, _ = grey_mark(state)
        ax.add_collection(
            PatchCollection(squares, facecolor=fill, hatch=hatch or None, hatchcolor=_hatch_color(fill), **_seams(gap))
        )
    inset = max(gap, 0.06)
    outlines = [
        Rectangle((col - 0.5 + inset, row - 0.5 + inset), 1 - 2 * inset, 1 - 2 * inset) for row, col in np.argwhere(now)
    ]
    ax.add_collection(
        PatchCollection(outlines, facecolor="none", edgecolor=setting.foreground, linewidth=1.2 * setting.style.line_pt)
    )


MAP_PANELS = (
    ("iteration", "iteration that\ncommitted it"),
    ("run_length", "tokens committed\ntogether"),
    ("redraws", "times drafted\nbefore fixed"),
)


def _draw_map(
    fig: Figure,
    ax: Axes,
    trace: Trace,
    values: np.ndarray,
    panel_in: float,
    setting: Setting,
    extend: str = "neither",
    **colouring: object,
) -> mpl.colorbar.Colorbar:
    """One per-cell map over the grid, coloured as `colouring` (cmap, norm) says, with its colour bar
    below (`extend="min"` shows the colour map's under colour); the caller labels the bar and its ticks."""
    g = trace.geometry
    gap = _cell_gap(panel_in, g.cols)
    mesh = ax.pcolormesh(
        np.arange(g.cols + 1) - 0.5,
        np.arange(g.rows + 1) - 0.5,
        np.ma.masked_invalid(values),
        **colouring,
        **(
            {"edgecolor": BACKGROUND[setting.style.dark], "linewidth": 2 * gap * 72 * panel_in / g.cols}
            if gap
            else _seams(gap)
        ),
    )
    _bare_grid_axes(ax, g.rows, g.cols)
    bar = fig.colorbar(mesh, ax=ax, location="bottom", fraction=0.08, pad=0.03, aspect=12, extend=extend)
    bar.solids.set_rasterized(False)  # matplotlib rasterizes colour bars of 50 levels or more, and
    bar.solids.set_edgecolor("face")  # PDF viewers draw seams between their quads unless each is stroked
    bar.outline.set_linewidth(setting.style.line_pt * 0.6)
    return bar


def acceptance_map(trace: Trace, setting: Setting) -> Figure:
    """Per cell: the iteration that committed it, how many tokens that pass committed, and how often
    it was drafted before being fixed; cells not committed yet take the 'pending' colour."""
    g = trace.geometry
    maps = acceptance_maps(trace)
    f = setting.style.font_in
    panel_in = (setting.width_in - 4 * f) / 3
    height = panel_in * g.rows / g.cols + 6.2 * f + _title_space(setting)
    fig = _new_figure(setting, height, f"{trace.method}: acceptance map")
    axes = fig.subplots(1, 3)
    colormap = mpl.colormaps["cividis"].with_extremes(bad=setting.palette["pending"])
    for ax, (kind, label) in zip(axes, MAP_PANELS, strict=True):
        bar = _draw_map(fig, ax, trace, maps[kind], panel_in, setting, cmap=colormap)
        bar.locator = MaxNLocator(nbins=3, integer=True)
        bar.update_ticks()
        bar.set_label(label, linespacing=1.0)
    return fig


def depth_map(trace: Trace, setting: Setting) -> Figure:
    """PEANUT's figure 1: per cell, the depth inside its draft tree at which its token was accepted
    (viridis, brighter deeper), the tokens the target drew (the first, and the one after each accepted
    path: depth 0) in the grey of committed cells, shown as the colour bar's lower end."""
    g = trace.geometry
    depths = analysis.depth_map(trace)
    f = setting.style.font_in
    panel_in = min(setting.width_in - 2 * f, 0.62 * setting.width_in + 2 * f)
    height = panel_in * g.rows / g.cols + 6.2 * f + _title_space(setting)
    fig = _new_figure(setting, height, f"{trace.method}: depth at which each token was accepted")
    ax = fig.subplots()
    deepest = max(int(np.nanmax(depths)) if not np.isnan(depths).all() else 1, 1)
    colormap = mpl.colormaps["viridis"].resampled(deepest)
    colormap = colormap.with_extremes(under=setting.palette["committed"], bad=setting.palette["pending"])
    norm = mpl.colors.BoundaryNorm(np.arange(deepest + 1) + 0.5, deepest)
    bar = _draw_map(fig, ax, trace, depths, panel_in, setting, "min", cmap=colormap, norm=norm)
    bar.locator = MaxNLocator(nbins=8, integer=True)
    bar.update_ticks()
    bar.minorticks_off()
    bar.set_label("depth in its draft tree\n(grey: drawn by the target, depth 0)", linespacing=1.0)
    return fig


SHAPE_PANELS = (("depth", "tree depth asked"), ("top_k", "tree top-k asked"))


def tree_shapes(trace: Trace, setting: Setting) -> Figure:
    """Per cell, the depth and top-k asked of the tree that committed it (PEANUT's adaptive shapes;
    EAGLE-2's are one shape everywhere, which the title says and the one-value colour bars show)."""
    g = trace.geometry
    maps = tree_shape_maps(trace)
    f = setting.style.font_in
    panel_in = (setting.width_in - 3 * f) / 2
    height = panel_in * g.rows / g.cols + 6.2 * f + _title_space(setting)
    series = per_tree(trace)
    fixed = len(set(series["depth"].tolist())) == 1 and len(set(series["top_k"].tolist())) == 1
    title = f"{trace.method}: tree shape per cell" + (" (fixed: the same everywhere)" if fixed else "")
    fig = _new_figure(setting, height, title)
    colormap = mpl.colormaps["cividis"].with_extremes(bad=setting.palette["pending"])
    for ax, (key, label) in zip(fig.subplots(1, 2), SHAPE_PANELS, strict=True):
        values = maps[key]
        shown = values[~np.isnan(values)]
        low, high = (shown.min(), shown.max()) if shown.size else (0, 1)
        norm = mpl.colors.Normalize(low - 0.5, high + 0.5)
        bar = _draw_map(fig, ax, trace, values, panel_in, setting, cmap=colormap, norm=norm)
        bar.locator = MaxNLocator(nbins=4, integer=True)
        bar.update_ticks()
        bar.minorticks_off()
        bar.set_label(label, linespacing=1.0)
    return fig


def shown_iteration(trace: Trace, iteration: int | None) -> int:
    """The iteration asked for or, by default, the one whose window shows the most kinds of draft fate
    (then the most drafts, then the one nearest the middle of the run): the most of the legend at once."""
    if iteration is not None:
        return iteration
    middle = len(trace.iterations) // 2

    def interest(j: int) -> tuple:
        it = trace.iterations[j]
        return len(set(fates(it))), len(it.drafts), -abs(j - middle)

    return max(range(len(trace.iterations)), key=interest)


def window(trace: Trace, setting: Setting) -> Figure:
    """The Jacobi window of one iteration on the grid (and the image so far, when a decoder is given),
    and each draft's acceptance ratio as a bar in its fate's colour: a short bar shows a rejection."""
    j = shown_iteration(trace, setting.iteration)
    grid = grid_state(trace, j)
    it = trace.iterations[j]
    g = trace.geometry
    f = setting.style.font_in
    image = setting.decode(trace, tokens_through(trace, j)) if setting.decode else None
    shown = set(grid.state.flat) | set(fates(it))
    states = [state for state in STATES if state in shown]
    grid_in = (0.49 * setting.width_in - 4 / 72) * g.rows / g.cols
    heights = [grid_in]
    if image is not None:
        heights.append(math.ceil((len(states) + 1) / 2) * 1.45 * f)
    if it.drafts:
        heights.append(max(0.24 * setting.width_in, 5.5 * f) + 2.8 * f)  # bars, ticks and axis label
    height = sum(heights) + len(heights) * 4 / 72 + _title_space(setting)
    fig = _new_figure(setting, height, f"{trace.method}, {window_title(trace, j)}")
    layout = fig.add_gridspec(len(heights), 2, height_ratios=heights)
    if image is None:
        grid_ax, legend_ax = fig.add_subplot(layout[0, 0]), fig.add_subplot(layout[0, 1])
    else:
        grid_ax, legend_ax = fig.add_subplot(layout[0, 1]), fig.add_subplot(layout[1, :])
        _draw_image(fig.add_subplot(layout[0, 0]), image, g.rows, g.cols, setting)
    _draw_states(grid_ax, grid.state, grid.now, setting, _cell_gap(grid_in * g.cols / g.rows, g.cols))
    _bare_grid_axes(grid_ax, g.rows, g.cols)
    handles = [_state_patch(state, setting, label=LABELS[state]) for state in states]
    handles.append(
        Patch(facecolor="none", edgecolor=setting.foreground, linewidth=1.2 * setting.style.line_pt, label=NOW_LABEL)
    )
    legend_ax.axis("off")
    legend_ax.legend(
        handles=handles,
        loc="center left" if image is None else "center",
        ncol=1 if image is None else 2,
        borderaxespad=0,
        labelspacing=0.35,
    )
    if it.drafts:
        _draw_ratios(fig.add_subplot(layout[-1, :]), it, analysis.window_size(trace), setting)
    return fig


def _draw_image(ax: Axes, image: Image.Image, rows: int, cols: int, setting: Setting) -> None:
    """The image after the iteration, upscaled with nearest neighbour so each token stays a crisp block,
    framed so that a white background does not melt into the page."""
    scale = max(1, IMAGE_PIXELS // max(image.width, 1))
    crisp = image.convert("RGB").resize((image.width * scale, image.height * scale), Image.Resampling.NEAREST)
    ax.imshow(np.asarray(crisp), interpolation="none", extent=(-0.5, cols - 0.5, rows - 0.5, -0.5))
    _bare_grid_axes(ax, rows, cols)
    for spine in ax.spines.values():
        spine.set_visible(True)
        spine.set_linewidth(0.6 * setting.style.line_pt)
        spine.set_edgecolor(setting.palette["committed"])


def _draw_ratios(ax: Axes, it: Iteration, width: int, setting: Setting) -> None:
    """The window's acceptance ratios min(1, p_new/p_old), one bar per draft in its fate's colours, over
    a strip of every draft's fate, so that a draft with ratio 0 still shows what became of it; the
    rejected draft crossed out on the strip and labelled. Offsets run over the run's whole window
    (`width` drafts), so every iteration's figure has the same axis."""
    draft_fates = fates(it)
    fills = [setting.palette[state] for state in draft_fates]
    offsets = np.arange(len(it.drafts))
    bars = ax.bar(offsets, it.ratio, width=0.8, color=fills)
    strip = ax.bar(offsets, STRIP_HEIGHT, bottom=-1.3 * STRIP_HEIGHT, width=0.8, color=fills)
    for patches in (bars.patches, strip.patches):
        _mark_patches(patches, draft_fates, setting)
    if it.rejected_at is not None:
        ax.annotate(
            "rejected",
            xy=(it.rejected_at, -0.8 * STRIP_HEIGHT),
            xytext=(it.rejected_at, 0.6),
            ha="center",
            va="center",
            color=setting.foreground,
            bbox={
                "boxstyle": "square,pad=0.2",
                "facecolor": BACKGROUND[setting.style.dark],
                "edgecolor": setting.palette["rejected"],
            },
            arrowprops={"arrowstyle": "-", "color": setting.palette["rejected"], "linewidth": setting.style.line_pt},
        )
        ax.plot(
            it.rejected_at,
            -0.8 * STRIP_HEIGHT,
            marker="x",
            color=setting.foreground,
            markersize=1.1 * setting.style.small_pt,
            markeredgewidth=1.5 * setting.style.line_pt,
        )
    ax.axhline(0, color=setting.foreground, linewidth=0.5 * setting.style.line_pt)
    ax.set_xlim(-0.6, width - 0.4)
    ax.set_ylim(-1.4 * STRIP_HEIGHT, 1.05)
    ax.set_yticks([0, 0.5, 1])
    ax.spines["bottom"].set_visible(False)
    ax.spines["left"].set_bounds(0, 1)
    ax.tick_params(axis="x", length=0)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=8, integer=True))
    ax.set_xlabel(OFFSET_TITLE)
    ax.set_ylabel("acceptance\nratio", linespacing=1.0)


def iterations(trace: Trace, setting: Setting) -> Figure:
    """Per iteration: tokens committed and drafts accepted (how far each pass got), and drafts carried
    into the next window against those of them whose token changed (what SCD reduces); for a draft-tree
    run, which carries no drafts, the depth and top-k asked of each tree instead (PEANUT's controller)."""
    series = per_iteration(trace)
    trees = per_tree(trace) if has_trees(trace) else None
    f = setting.style.font_in
    x = np.arange(len(trace.iterations))
    mean = len(trace.tokens) / max(len(trace.iterations), 1)
    if trees is None:
        title = f"{trace.method}: {mean:.2f} tokens per iteration, {int(series['changed'].sum())} draft changes"
    else:
        title = f"{trace.method}: mean tau {trees['tau'].mean():.2f} per tree pass"
    height = 0.56 * setting.width_in + 7.5 * f + _title_space(setting)
    fig = _new_figure(setting, height, title)
    top, bottom = fig.subplots(2, 1, sharex=True)
    palette = setting.palette
    step = {"step": "mid", "linewidth": 0}
    committed = "tokens committed" if trees is None else "tau (tokens committed)"
    top.fill_between(x, series["committed"], color=palette["committed"], label=committed, **step)
    accepted = top.fill_between(x, series["accepted"], color=palette["accepted"], label="drafts accepted", **step)
    _mark_patches([accepted], ["accepted"], setting)
    if trees is None:
        changed = bottom.fill_between(x, series["changed"], color=palette["redrawn"], label="drafts changed", **step)
        _mark_patches([changed], ["redrawn"], setting)
        bottom.step(x, series["carried"], where="mid", color=OKABE_ITO["blue"], label="drafts carried on")
        bottom.set_ylabel("drafts")
    else:
        bottom.step(trees["iteration"], trees["depth"], where="mid", color=OKABE_ITO["blue"], label="depth")
        bottom.step(trees["iteration"], trees["top_k"], where="mid", color=OKABE_ITO["orange"], label="top-k")
        bottom.set_ylabel("tree asked")
    top.set_ylabel("tokens")
    bottom.set_xlabel("iteration")
    for ax in (top, bottom):
        ax.set_ylim(0, max(ax.get_ylim()[1], 1))  # an AR run drafts nothing: keep a scale of whole drafts
        ax.set_xlim(-0.5, max(len(x), 1) - 0.5)
        ax.yaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))
        ax.legend(loc="lower left", bbox_to_anchor=(0, 1), ncol=2, borderaxespad=0.1)
    return fig


@dataclass
class ComparisonRow:
    """One method (with its parameters where several runs of it differ) over the runs given."""

    label: str
    lossless: bool
    nfe: list[float] = field(default_factory=list)
    step_compression: list[float] = field(default_factory=list)
    latency_speedup: list[float] = field(default_factory=list)


def _run_key(trace: Trace) -> tuple:
    """Runs that are comparable: same model, prompt, seed and sampling."""
    return trace.model, trace.prompt, trace.seed, tuple(sorted(trace.sampling.model_dump().items()))


def _method_labels(traces: Sequence[Trace]) -> list[str]:
    """Each trace's method, with the parameters that differ between runs of that method, if any."""
    params_of: dict[str, list[dict]] = {}
    for trace in traces:
        params_of.setdefault(trace.method, []).append(trace.params)
    labels = []
    for trace in traces:
        seen = params_of[trace.method]
        varying = sorted(key for key in trace.params if any(p.get(key) != trace.params[key] for p in seen))
        extra = ", ".join(f"{key}={trace.params[key]}" for key in varying)
        labels.append(f"{trace.method} ({extra})" if extra else trace.method)
    return labels


def comparison_rows(traces: Sequence[Trace]) -> tuple[list[ComparisonRow], list[str]]:
    """NFE, step compression and latency speedup per method, each run paired with the AR run of the
    same model, prompt, seed and sampling where one is given; and notes on runs that have none."""
    ar_of = {}
    for trace in traces:
        if trace.method == "ar":
            ar_of.setdefault(_run_key(trace), trace)
    rows: dict[str, ComparisonRow] = {}
    unpaired: dict[tuple, list[str]] = {}
    for trace, label in sorted(zip(traces, _method_labels(traces), strict=True), key=lambda p: p[0].method != "ar"):
        ar = ar_of.get(_run_key(trace))
        numbers = summary(trace, ar)
        row = rows.setdefault(label, ComparisonRow(label, trace.lossless))
        row.nfe.append(float(trace.nfe))
        row.step_compression.append(numbers["step_compression"])
        if ar is None:
            unpaired.setdefault((trace.prompt, trace.seed), []).append(label)
        else:
            row.latency_speedup.append(numbers["latency_speedup"])
    if not any(row.latency_speedup for row in rows.values()):
        return list(rows.values()), ["no AR trace given: the comparison shows NFE and step compression only"]
    notes = [
        f"no AR trace for prompt {prompt!r}, seed {seed}: latency of {', '.join(labels)} against AR not shown"
        for (prompt, seed), labels in unpaired.items()
    ]
    return list(rows.values()), notes


def comparison_notes(traces: Sequence[Trace]) -> list[str]:
    """What the comparison cannot show for lack of AR traces."""
    return comparison_rows(traces)[1]


def _geometric_mean(values: Sequence[float]) -> float:
    return float(np.exp(np.mean(np.log(values))))


def comparison(traces: Sequence[Trace], setting: Setting) -> Figure:
    """NFE, step compression and latency against AR of every method given (bars: mean over the
    prompt and seed runs, geometric for ratios; dots: each run); lossy methods hatched."""
    rows, _ = comparison_rows(traces)
    style, palette = setting.style, setting.palette
    run_colours = [palette["committed"] if row.label == "ar" else palette["accepted"] for row in rows]
    panels = [
        ("nfe", "model passes\n(NFE)", run_colours),
        ("step_compression", "step\ncompression", [OKABE_ITO["blue"]] * len(rows)),
    ]
    if any(row.latency_speedup for row in rows):
        panels.append(("latency_speedup", "latency speedup\nover AR", [OKABE_ITO["orange"]] * len(rows)))
    lossy = not all(row.lossless for row in rows)
    height = len(rows) * max(1.7 * style.font_in, 0.16) + 5.5 * style.font_in + _title_space(setting)
    fig = _new_figure(setting, height, "methods against AR" + (" (hatched: lossy)" if lossy else ""))
    axes = fig.subplots(1, len(panels), sharey=True)
    y = np.arange(len(rows))
    several_runs = any(len(row.nfe) > 1 for row in rows)
    for ax, (key, label, fills) in zip(axes, panels, strict=True):
        values = [getattr(row, key) for row in rows]
        means = [(float(np.mean(v)) if key == "nfe" else _geometric_mean(v)) if v else 0.0 for v in values]
        bars = ax.barh(y, means, height=0.7, color=fills)
        for k, (bar, row, fill) in enumerate(zip(bars.patches, rows, fills, strict=True)):
            if not row.lossless:
                bar.set_hatch("////")
                bar.set_hatchcolor(_hatch_color(fill))
            if several_runs:
                ax.plot(values[k], [k] * len(values[k]), "o", color=setting.foreground, markersize=2 * style.line_pt)
            text = (f"{means[k]:.0f}" if key == "nfe" else ratio_text(means[k])) if values[k] else "no AR"
            end = max([means[k], *values[k]])  # right of the bar and of every dot
            ax.annotate(text, (end, k), xytext=(3, 0), textcoords="offset points", va="center")
        if key != "nfe":
            ax.axvline(1.0, color=palette["committed"], linestyle="--", linewidth=style.line_pt)
        ax.set_xlim(0, 1.6 * max((max(v) for v in values if v), default=1.0))
        ax.xaxis.set_major_locator(MaxNLocator(nbins=3))
        ax.set_xlabel(label, linespacing=1.0)
    axes[0].set_yticks(y, [row.label + ("" if row.lossless else " (lossy)") for row in rows])
    axes[0].invert_yaxis()
    axes[0].tick_params(axis="y", length=0)
    return fig


DRAWINGS = {  # how each figure of FIGURE_KINDS is drawn, and what it needs from a trace
    "acceptance-map": {"draw": acceptance_map},
    "window": {"draw": window, "needs": WINDOWS},
    "iterations": {"draw": iterations},
    "comparison": {"draw": comparison, "notes": comparison_notes},
    "depth-map": {"draw": depth_map, "needs": DRAFT_TREES},
    "tree-shapes": {"draw": tree_shapes, "needs": DRAFT_TREES},
}
FIGURES = (
    *(replace(kind, **DRAWINGS[kind.name]) for kind in FIGURE_KINDS),
    FigureKind(
        "token-acceptance", "per-token acceptance and log density ratio", per_trace=True, needs=CONTINUOUS_TOKENS
    ),
)


def parse_formats(text: str) -> list[str]:
    """'pdf,svg' as ['pdf', 'svg'], refusing unknown or no formats."""
    formats = [part.strip().lower().lstrip(".") for part in text.split(",") if part.strip()]
    unknown = [name for name in formats if name not in FORMATS]
    if unknown or not formats:
        raise FigureOptionError(f"unknown format {', '.join(unknown) or repr(text)}; choose from {', '.join(FORMATS)}")
    return list(dict.fromkeys(formats))


def check_options(
    traces: Sequence[tuple[str, Trace]], style: str, width_in: float | None, iteration: int | None
) -> Style:
    """The style asked for, once the width and iteration are known to fit every trace."""
    if style not in STYLES:
        raise FigureOptionError(f"unknown style {style!r}; choose from {', '.join(STYLES)}")
    low, high = WIDTH_RANGE_IN
    if width_in is not None and not low <= width_in <= high:
        raise FigureOptionError(f"width {width_in} in is out of range; give {low} to {high} inches")
    if not traces:
        raise FigureOptionError("no traces given")
    for name, trace in traces:
        if not trace.iterations:
            raise FigureOptionError(f"{name} has no iterations to draw")
        if iteration is not None and not 0 <= iteration < len(trace.iterations):
            last = len(trace.iterations) - 1
            raise FigureOptionError(f"iteration {iteration} is out of range for {name}: it has iterations 0 to {last}")
    return STYLES[style]


SLUG_CHARS = 40  # of each part of a file name taken from a trace (method, model, prompt)


def slug(text: str, fallback: str) -> str:
    """A file-name part from any text: lower-case ASCII letters, digits and single hyphens, at most
    SLUG_CHARS long, or `fallback` where nothing is left. Names taken from a trace go through here, so
    an uploaded trace cannot name a path ('../..', '/', a NUL byte) or an over-long file."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower())[:SLUG_CHARS].strip("-") or fallback


def file_stems(traces: Sequence[Trace]) -> list[str]:
    """A file name stem per trace: its method, with the model, prompt and seed where those differ
    between the traces given, and a counter where that still leaves two alike; every part a slug."""
    parts = [[slug(trace.method, "method")] for trace in traces]
    for value in (lambda t: slug(t.model, "model"), lambda t: slug(t.prompt, "prompt"), lambda t: f"seed{t.seed}"):
        if len({value(trace) for trace in traces}) > 1:
            for part, trace in zip(parts, traces, strict=True):
                part.append(value(trace))
    stems, seen = [], {}
    for part in parts:
        stem = "-".join(part)
        seen[stem] = seen.get(stem, 0) + 1
        stems.append(stem if seen[stem] == 1 else f"{stem}-{seen[stem]}")
    return stems


def _save(fig: Figure, out: Path, stem: str, formats: Sequence[str], style: Style) -> list[Path]:
    """`fig` as out/stem.FORMAT for each format; a path that would leave `out` once resolved (a symbolic
    link planted in the folder, a stem that is not a plain name) is refused before anything is written."""
    folder = out.resolve()
    paths = [out / f"{stem}.{kind}" for kind in formats]
    for path in paths:
        if path.resolve().parent != folder:
            raise FigureOptionError(f"{path.name[:80]} would be written outside {out}; nothing was written there")
    for kind, path in zip(formats, paths, strict=True):
        fig.savefig(path, format=kind, dpi=style.png_dpi, metadata=METADATA[kind])
    return paths


def write_figures(
    traces: Sequence[tuple[str, Trace]],
    out: Path,
    formats: Sequence[str] = ("pdf",),
    style: str = "paper",
    width_in: float | None = None,
    iteration: int | None = None,
    decode: Decoder | None = None,
) -> FigureFiles:
    """Every figure of FIGURES that the (name, trace) pairs allow, one file per figure and format,
    into the folder `out` (created if missing); a figure a trace lacks the records for is skipped with
    a note naming the traces by their given names."""
    chosen = check_options(traces, style, width_in, iteration)
    out.mkdir(parents=True, exist_ok=True)
    setting = Setting(chosen, width_in or chosen.width_in, iteration, decode)
    runs = [trace for _, trace in traces]
    stems = file_stems(runs)
    result = FigureFiles()
    with _DRAWING, mpl.rc_context(chosen.rc()):
        for kind in FIGURES:
            lacking = [name for name, trace in traces if kind.needs and not kind.needs.present(trace)]
            if lacking:
                result.notes.append(f"no {kind.needs.missing} in {', '.join(lacking)}: {kind.title} skipped")
            if kind.draw is None:
                continue
            if kind.notes:
                result.notes += kind.notes(runs)
            if not kind.per_trace:
                result.files += _save(kind.draw(runs, setting), out, kind.name, formats, chosen)
                continue
            for trace, stem in zip(runs, stems, strict=True):
                if kind.needs and not kind.needs.present(trace):
                    continue
                suffix = f"-{shown_iteration(trace, iteration)}" if kind.at_iteration else ""
                result.files += _save(kind.draw(trace, setting), out, f"{stem}-{kind.name}{suffix}", formats, chosen)
    return result


def write_figure(name: str, trace: Trace, out: Path, stem: str, kind: str = "png", style: str = "slides") -> Path:
    """One per-trace figure of FIGURES as one file `out/stem.kind`, such as the depth map that `run`
    writes beside a tree run's image (slides style: titled, legible at a glance)."""
    figure = next(figure for figure in FIGURES if figure.name == name)
    if figure.draw is None or not figure.per_trace or (figure.needs and not figure.needs.present(trace)):
        raise FigureOptionError(f"the {figure.title} cannot be drawn from a {trace.method} trace")
    chosen = STYLES[style]
    with _DRAWING, mpl.rc_context(chosen.rc()):
        (path,) = _save(figure.draw(trace, Setting(chosen, chosen.width_in, None, None)), out, stem, [kind], chosen)
    return path
