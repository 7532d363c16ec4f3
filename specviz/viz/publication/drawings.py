"""The publication figures themselves, one function each: acceptance, depth and tree-shape maps, a
Jacobi window at an iteration, the iterations strip and the comparison of several runs."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator
from PIL import Image

from specviz import metrics
from specviz.core.catalogue import is_baseline
from specviz.metrics import (
    Speedup,
    acceptance_maps,
    grid_state,
    has_trees,
    per_iteration,
    per_tree,
    summary,
    tokens_through,
    tree_shape_maps,
)
from specviz.trace import Trace, WindowRecord
from specviz.viz.figures import OFFSET_TITLE, window_title
from specviz.viz.narration import LatencyVerdict, latency_verdict, promise, ratio_text, run_verdict
from specviz.viz.palette import BACKGROUND, LABELS, NOW_LABEL, OKABE_ITO, STATES
from specviz.viz.publication.style import (
    Setting,
    bare_grid_axes,
    cell_gap,
    draw_states,
    grid_panel,
    hatch_color,
    mark_patches,
    new_figure,
    seams,
    state_patch,
    title_space,
)

STRIP_HEIGHT = 0.12  # the fate strip under the ratio bars, in units of the ratio axis
# the comparison's verdicts under its panels: a line's height in their type size, and a character's mean width
# in ems (serif and sans text of the styles), which sets where a sentence is wrapped
VERDICT_LINE, CHAR_WIDTH = 1.3, 0.55
NAME_CHARS = 18  # a method's name and promise beside its bars wrap after this many characters ('close to exact, ...')
IMAGE_PIXELS = 512  # the image panel is upscaled (nearest) to about this size, so viewers keep cells crisp
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
    gap = cell_gap(panel_in, g.cols)  # the panel's drawn width: a tall grid's is narrower than its place
    mesh = ax.pcolormesh(
        np.arange(g.cols + 1) - 0.5,
        np.arange(g.rows + 1) - 0.5,
        np.ma.masked_invalid(values),
        **colouring,
        **(
            {"edgecolor": BACKGROUND[setting.style.dark], "linewidth": 2 * gap * 72 * panel_in / g.cols}
            if gap
            else seams(gap)
        ),
    )
    bare_grid_axes(ax, g.rows, g.cols)
    bar = fig.colorbar(mesh, ax=ax, location="bottom", fraction=0.08, pad=0.03, aspect=12, extend=extend)
    bar.solids.set_rasterized(False)  # matplotlib rasterizes colour bars of 50 levels or more, and
    bar.solids.set_edgecolor("face")  # PDF viewers draw seams between their quads unless each is stroked
    bar.outline.set_linewidth(setting.style.line_pt * 0.6)
    return bar


def acceptance_map(trace: Trace, setting: Setting) -> Figure:
    """Per cell: the iteration that committed it, how many tokens that pass committed, and how often
    it was drafted before being fixed; cells not committed yet take the 'pending' colour."""
    g = trace.geometry
    f = setting.style.font_in
    panel_in, grid_in = grid_panel(g.rows, g.cols, (setting.width_in - 4 * f) / 3, setting)
    maps = acceptance_maps(trace)
    height = grid_in + 6.2 * f + title_space(setting)
    fig = new_figure(setting, height, f"{trace.method}: acceptance map")
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
    f = setting.style.font_in
    room = min(setting.width_in - 2 * f, 0.62 * setting.width_in + 2 * f)
    panel_in, grid_in = grid_panel(g.rows, g.cols, room, setting)
    depths = metrics.depth_map(trace)
    height = grid_in + 6.2 * f + title_space(setting)
    fig = new_figure(setting, height, f"{trace.method}: depth at which each token was accepted")
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
    f = setting.style.font_in
    panel_in, grid_in = grid_panel(g.rows, g.cols, (setting.width_in - 3 * f) / 2, setting)
    maps = tree_shape_maps(trace)
    height = grid_in + 6.2 * f + title_space(setting)
    series = per_tree(trace)
    fixed = len(set(series["depth"].tolist())) == 1 and len(set(series["top_k"].tolist())) == 1
    title = f"{trace.method}: tree shape per cell" + (" (fixed: the same everywhere)" if fixed else "")
    fig = new_figure(setting, height, title)
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
        return len(set(it.outcome())), it.reach(), -abs(j - middle)

    return max(range(len(trace.iterations)), key=interest)


def window(trace: Trace, setting: Setting) -> Figure:
    """The Jacobi window of one iteration on the grid (and the image so far, when a decoder is given),
    and each draft's acceptance ratio as a bar in its fate's colour: a short bar shows a rejection."""
    j = shown_iteration(trace, setting.iteration)
    g = trace.geometry
    grid_w, grid_in = grid_panel(g.rows, g.cols, 0.49 * setting.width_in - 4 / 72, setting)  # before any work
    grid = grid_state(trace, j)
    it = trace.iterations[j]
    f = setting.style.font_in
    image = setting.decode(trace, tokens_through(trace, j)) if setting.decode else None
    shown = set(grid.state.flat) | set(it.outcome())
    drafts = it.window_drafts > 0
    states = [state for state in STATES if state in shown]
    heights = [grid_in]
    if image is not None:
        heights.append(math.ceil((len(states) + 1) / 2) * 1.45 * f)
    if drafts:
        heights.append(max(0.24 * setting.width_in, 5.5 * f) + 2.8 * f)  # bars, ticks and axis label
    height = sum(heights) + len(heights) * 4 / 72 + title_space(setting)
    fig = new_figure(setting, height, f"{trace.method}, {window_title(trace, j)}")
    layout = fig.add_gridspec(len(heights), 2, height_ratios=heights)
    if image is None:
        grid_ax, legend_ax = fig.add_subplot(layout[0, 0]), fig.add_subplot(layout[0, 1])
    else:
        grid_ax, legend_ax = fig.add_subplot(layout[0, 1]), fig.add_subplot(layout[1, :])
        _draw_image(fig.add_subplot(layout[0, 0]), image, g.rows, g.cols, setting)
    draw_states(grid_ax, grid.state, grid.now, setting, cell_gap(grid_w, g.cols))
    bare_grid_axes(grid_ax, g.rows, g.cols)
    handles = [state_patch(state, setting, label=LABELS[state]) for state in states]
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
    if drafts:
        _draw_ratios(fig.add_subplot(layout[-1, :]), it, metrics.window_size(trace), setting)
    return fig


def _draw_image(ax: Axes, image: Image.Image, rows: int, cols: int, setting: Setting) -> None:
    """The image after the iteration, upscaled with nearest neighbour so each token stays a crisp block,
    framed so that a white background does not melt into the page. Its longest side is what is enlarged
    to about IMAGE_PIXELS, so a tall image (of a tall grid) stays that size, not that width."""
    scale = max(1, IMAGE_PIXELS // max(image.width, image.height, 1))
    crisp = image.convert("RGB").resize((image.width * scale, image.height * scale), Image.Resampling.NEAREST)
    ax.imshow(np.asarray(crisp), interpolation="none", extent=(-0.5, cols - 0.5, rows - 0.5, -0.5))
    bare_grid_axes(ax, rows, cols)
    for spine in ax.spines.values():
        spine.set_visible(True)
        spine.set_linewidth(0.6 * setting.style.line_pt)
        spine.set_edgecolor(setting.palette["committed"])


def _draw_ratios(ax: Axes, it: WindowRecord, width: int, setting: Setting) -> None:
    """The window's acceptance ratios min(1, p_new/p_old), one bar per draft in its fate's colours, over
    a strip of every draft's fate, so that a draft with ratio 0 still shows what became of it; the
    rejected draft crossed out on the strip and labelled. Offsets run over the run's whole window
    (`width` drafts), so every iteration's figure has the same axis."""
    draft_fates = it.outcome()
    fills = [setting.palette[state] for state in draft_fates]
    offsets = np.arange(len(it.drafts))
    bars = ax.bar(offsets, it.ratio, width=0.8, color=fills)
    strip = ax.bar(offsets, STRIP_HEIGHT, bottom=-1.3 * STRIP_HEIGHT, width=0.8, color=fills)
    for patches in (bars.patches, strip.patches):
        mark_patches(patches, draft_fates, setting)
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
    height = 0.56 * setting.width_in + 7.5 * f + title_space(setting)
    fig = new_figure(setting, height, title)
    top, bottom = fig.subplots(2, 1, sharex=True)
    palette = setting.palette
    step = {"step": "mid", "linewidth": 0}
    committed = "tokens committed" if trees is None else "tau (tokens committed)"
    top.fill_between(x, series["committed"], color=palette["committed"], label=committed, **step)
    accepted = top.fill_between(x, series["accepted"], color=palette["accepted"], label="drafts accepted", **step)
    mark_patches([accepted], ["accepted"], setting)
    if trees is None:
        changed = bottom.fill_between(x, series["changed"], color=palette["redrawn"], label="drafts changed", **step)
        mark_patches([changed], ["redrawn"], setting)
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
    promise: str  # `narration.promise`: 'lossless', 'lossy' or 'close to exact, measured'
    nfe: list[float] = field(default_factory=list)
    step_compression: list[float] = field(default_factory=list)
    latency_speedup: list[float] = field(default_factory=list)  # each run's verdict's value
    latency_spread: list[Speedup | None] = field(default_factory=list)  # each run's timings, where timed again

    @property
    def verdict(self) -> LatencyVerdict | None:
        """The latency verdict the race gives its run; over several runs, that of their geometric mean with
        the lowest and highest of all their timings (a run not timed again counts its own clock once)."""
        if not self.latency_speedup:
            return None
        if len(self.latency_speedup) == 1:
            return latency_verdict(self.latency_speedup[0], self.latency_spread[0])
        mean = _geometric_mean(self.latency_speedup)
        timed = [s or Speedup(v, v, v, 1) for v, s in zip(self.latency_speedup, self.latency_spread, strict=True)]
        lowest, highest = min(s.low for s in timed), max(s.high for s in timed)
        return latency_verdict(mean, Speedup(mean, lowest, highest, sum(s.repeats for s in timed)))


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
        if is_baseline(trace.method):
            ar_of.setdefault(_run_key(trace), trace)
    rows: dict[str, ComparisonRow] = {}
    unpaired: dict[tuple, list[str]] = {}
    for trace, label in sorted(
        zip(traces, _method_labels(traces), strict=True), key=lambda p: not is_baseline(p[0].method)
    ):
        ar = ar_of.get(_run_key(trace))
        numbers = summary(trace, ar)
        row = rows.setdefault(label, ComparisonRow(label, trace.lossless, promise(trace.method, trace.lossless)))
        row.nfe.append(float(trace.nfe))
        row.step_compression.append(numbers["step_compression"])
        if ar is None:
            unpaired.setdefault((trace.prompt, trace.seed), []).append(label)
        else:
            verdict = run_verdict(trace, ar)
            row.latency_speedup.append(verdict.value)
            row.latency_spread.append(verdict.spread)
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
    """NFE, step compression and latency against AR of every method given (bars: mean over the prompt and
    seed runs, geometric for ratios; dots: each run); methods that are not lossless hatched. The latency's
    bar says its verdict's words, its whisker spans the timings, and under the panels each method's verdict
    is said as the race says it."""
    rows, _ = comparison_rows(traces)
    style, palette = setting.style, setting.palette
    # the baseline takes no parameters, so its row's label is its name
    run_colours = [palette["committed"] if is_baseline(row.label) else palette["accepted"] for row in rows]
    panels = [
        ("nfe", "model passes\n(NFE)", run_colours),
        ("step_compression", "step\ncompression", [OKABE_ITO["blue"]] * len(rows)),
    ]
    if any(row.latency_speedup for row in rows):
        panels.append(("latency_speedup", "latency speedup\nover AR", [OKABE_ITO["orange"]] * len(rows)))
    verdicts = [row.verdict for row in rows]
    said = _verdict_lines(rows, setting)
    lossy = not all(row.lossless for row in rows)
    height = len(rows) * max(1.7 * style.font_in, 0.16) + 5.5 * style.font_in + title_space(setting)
    height += len(said) * VERDICT_LINE * style.small_pt / 72
    fig = new_figure(setting, height, "methods against AR" + (" (hatched: not lossless)" if lossy else ""))
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
                bar.set_hatchcolor(hatch_color(fill))
            if several_runs:
                ax.plot(values[k], [k] * len(values[k]), "o", color=setting.foreground, markersize=2 * style.line_pt)
            end = max([means[k], *values[k]])  # right of the bar and of every dot
            verdict = verdicts[k] if key == "latency_speedup" and not is_baseline(row.label) else None
            if verdict is not None and verdict.spread is not None:  # the timings' range, as Compare's whiskers
                low, high = verdict.spread.low, verdict.spread.high
                ax.errorbar(means[k], k, xerr=[[means[k] - low], [high - means[k]]], fmt="none",
                            ecolor=setting.foreground, elinewidth=style.line_pt, capsize=2 * style.line_pt)  # fmt: skip
                end = max(end, high)
            if key == "nfe":
                text = f"{means[k]:.0f}"
            else:
                text = (verdict.label if verdict else ratio_text(means[k])) if values[k] else "no AR"
            # on the ratio panels the dashed AR = 1x line ran into a label that starts just left of it ("1.03x
            # slower"): such a label starts right of the line, and any further left is boxed in the page's colour,
            # so the line passes behind its words
            box = None
            if key != "nfe":
                end = max(end, 1.0) if end > 0.85 else end
                box = {"boxstyle": "square,pad=0.15", "facecolor": BACKGROUND[setting.style.dark], "edgecolor": "none"}
            ax.annotate(text, (end, k), xytext=(3, 0), textcoords="offset points", va="center", bbox=box, zorder=3)
        if key != "nfe":
            ax.axvline(1.0, color=palette["committed"], linestyle="--", linewidth=style.line_pt)
        ax.set_xlim(0, 1.6 * max((max(v) for v in values if v), default=1.0))
        ax.xaxis.set_major_locator(MaxNLocator(nbins=3))
        ax.set_xlabel(label, linespacing=1.0)
    names = [row.label + ("" if row.lossless else f" ({row.promise})") for row in rows]
    axes[0].set_yticks(y, ["\n".join(textwrap.wrap(name, NAME_CHARS)) for name in names])
    axes[0].invert_yaxis()
    axes[0].tick_params(axis="y", length=0)
    if said:
        fig.supxlabel("\n".join(said), x=0.0, ha="left", fontsize=style.small_pt, linespacing=1.1)
    return fig


def _verdict_lines(rows: list[ComparisonRow], setting: Setting) -> list[str]:
    """Each method's latency verdict against AR as the race says it ('sjd: about the same latency as AR (from
    1.49x slower to 1.38x faster over 3 timings)'), wrapped to the figure's width."""
    chars = int(72 * setting.width_in / (CHAR_WIDTH * setting.style.small_pt))
    said = [f"{row.label}: {row.verdict}" for row in rows if row.verdict and not is_baseline(row.label)]
    return [line for sentence in said for line in textwrap.wrap(sentence, chars)]
