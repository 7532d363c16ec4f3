"""Plotly figures of runs on a continuous-token pair (ar, ar-draft, cspd, cspd-exact).

Pure functions of a Trace, with the theme and fate colours of `specviz.viz.figures`: where each token
came from on the grid (the CSpD paper's figure 16), one pass's drafts and their acceptance ratios,
the denoising trajectories of draft and target for one draft in two dimensions (figure 4, from the
run itself), and acceptance by generation step (figure 11). Given a discrete run they say, in place
of a plot, that the view belongs to continuous tokens.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from specviz.core.params import SpeculativeParameters
from specviz.metrics import draft_acceptance, iteration_at, on_grid
from specviz.trace import ContinuousRecord, Trace
from specviz.viz.figures import WIDE_HEIGHT, WIDE_TITLE, _finish, message_figure
from specviz.viz.palette import OKABE_ITO, colors

# where a committed token came from, in legend order: (label, colour key or hex)
# (short enough for one legend line of a half-width plot in large type)
SOURCES = {
    "alone": ("target alone (AR, pre-filled)", "committed"),
    "draft": ("draft accepted", "accepted"),
    "resampled": ("draft rejected, resampled", "rejected"),
    "capped": ("resampling capped: target's draw", OKABE_ITO["yellow"]),
    "target": ("target's bonus token (all accepted)", "new"),
    "pending": ("not generated yet", "pending"),
    "unverified": ("draft model alone, never verified", OKABE_ITO["reddish_purple"]),
}
FATE_COLOURS = {"accepted": "accepted", "rejected": "rejected", "discarded": "pending"}
FATE_NAMES = {  # a draft's fate in the bars' legend
    "accepted": "accepted",
    "rejected": "rejected (resampled from the residual)",
    "discarded": "discarded (after a rejection)",
}
COORDINATES = ("token coordinate 1 (first principal component)", "token coordinate 2")
POSITION_BINS = 16
LABELLED_DRAFTS = 8  # the drafts view writes each ratio under its bar up to this many drafts


def ratio_label(ratio: float) -> str:
    """min(1, r) in at most five characters, for a label under a narrow bar (the hover has the value)."""
    if ratio >= 0.995:
        return "1"
    return f"{ratio:.2f}" if ratio >= 0.01 else "<0.01"


def _colour(key: str, dark: bool) -> str:
    return key if key.startswith("#") else colors(dark)[key]


def _not_continuous(trace: Trace, title: str, dark: bool, large: bool) -> go.Figure:
    return message_figure(
        title,
        f"{trace.method} on {trace.model} decodes discrete tokens: this view is for a continuous-token pair "
        "(tiny-continuous with ar, cspd or cspd-exact).",
        dark,
        large,
    )


def token_sources(trace: Trace, j: int | None = None) -> np.ndarray:
    """Per position, where its token came from (a key of SOURCES), through iteration j (default: all)."""
    last = len(trace.iterations) - 1 if j is None else j
    sources = np.full(len(trace.geometry.layout), "pending", dtype=object)
    for it in trace.iterations[: last + 1]:
        drafted = bool(it.fate)
        for offset, source in enumerate(it.source):
            if not drafted:  # no draft was tested: a model drew this token on its own
                source = "alone" if source == "target" else "unverified"
            sources[it.start + offset] = source
    return sources


def token_source_figure(trace: Trace, j: int | None = None, dark: bool = False, large: bool = False) -> go.Figure:
    """The grid coloured by where each token came from: accepted drafts, resampled rejections, the target."""
    title = "where each token came from"
    if not trace.continuous:
        return _not_continuous(trace, title, dark, large)
    sources = token_sources(trace, j)
    keys = list(SOURCES)
    grid = on_grid(trace, np.array([keys.index(s) for s in sources], dtype=float), np.nan)
    scale = []
    for k, key in enumerate(keys):
        colour = _colour(SOURCES[key][1], dark)
        scale += [[k / len(keys), colour], [(k + 1) / len(keys), colour]]
    labels = np.vectorize(lambda k: SOURCES[keys[int(k)]][0], otypes=[object])(grid)
    # a random-order model (MAR): each cell carries its place in the generation order
    ordered = trace.geometry.order is not None
    steps = on_grid(trace, np.arange(len(sources)), -1) if ordered else None
    fig = go.Figure(
        go.Heatmap(
            z=grid,
            zmin=-0.5,
            zmax=len(keys) - 0.5,
            colorscale=scale,
            showscale=False,
            customdata=labels,
            text=steps,
            texttemplate="%{text}" if ordered else None,
            textfont={"size": 9},
            hovertemplate="row %{y}, column %{x}: %{customdata}"
            + (", generated at step %{text}" if ordered else "")
            + "<extra></extra>",
            xgap=1,
            ygap=1,
        )
    )
    shown = set(sources)
    for key in keys:  # a legend entry per source on screen
        if key in shown:
            fig.add_trace(
                go.Scatter(
                    x=[None], y=[None], mode="markers", name=SOURCES[key][0],
                    marker={"size": 12, "symbol": "square", "color": _colour(SOURCES[key][1], dark)},
                )
            )  # fmt: skip
    g = trace.geometry
    fig.update_xaxes(showgrid=False, zeroline=False, range=[-0.5, g.cols - 0.5], constrain="domain", title="column")
    fig.update_yaxes(
        showgrid=False, zeroline=False, range=[g.rows - 0.5, -0.5], scaleanchor="x", constrain="domain", title="row"
    )
    # large type: from the left edge, so a legend wider than the plot loses its ends' text, not its swatches
    where = {"x": 0, "xanchor": "left"} if large else {"x": 0.5, "xanchor": "center"}
    fig.update_layout(legend={"orientation": "h", "yanchor": "top", "y": -0.12, **where})
    alpha = draft_acceptance(trace.iterations)
    rate = "" if alpha is None else f", {alpha:.0%} of tested drafts accepted"
    order = " (numbers: the generation order)" if ordered else ""
    return _finish(fig, f"{trace.method}: {title}{rate}{order}", 620, dark, large)


def ratio_bars_figure(trace: Trace, j: int, dark: bool = False, large: bool = False, wide: bool = False) -> go.Figure:
    """The drafts of iteration j: each one's acceptance ratio min(1, r) as a bar in its fate's colour, and
    the uniform that decided it as a tick (accepted when the tick lies at or below the bar's top). `wide`
    (a 1280 x 720 projector, normal type): shorter, so the screen holds it under Inspect's buttons."""
    if not trace.continuous:
        return _not_continuous(trace, "drafts and acceptance ratios", dark, large)
    it = iteration_at(trace, j)
    head = f"iteration {j}/{len(trace.iterations) - 1}"
    if not it.fate:
        return message_figure(
            f"{head}: no drafts",
            f"The target drew position {it.start} alone ({'pre-filling' if trace.method.startswith('cspd') else 'AR'}):"
            " one pass, one token, nothing to verify.",
            dark,
            large,
        )
    palette = colors(dark)
    fig = go.Figure()
    _draw_draft_ratios(fig, it, palette)
    _mark_uniforms(fig, it, palette)
    labelled = len(it.fate) <= LABELLED_DRAFTS
    _drafts_axes(fig, len(it.fate), it.ratio, labelled, short=large or wide)
    return _drafts_layout(fig, _drafts_title(it, head, large), labelled, dark, large, wide)


def _describe_draft(it: ContinuousRecord, k: int) -> str:
    """Hover text of draft k of iteration `it`."""
    parts = [
        f"position {it.start + k}",
        it.fate[k],
        f"log r = {it.log_ratio[k]:.2f}",
        f"min(1, r) = {it.ratio[k]:.3f}",
    ]
    if it.log_sigma is not None:
        parts.append(f"log Sigma = {it.log_sigma[k]:.2f} (Eq. 4)")
    if it.uniform[k] is not None:
        parts.append(f"uniform u = {it.uniform[k]:.3f}")
    return "<br>".join(parts)


def _draw_draft_ratios(fig: go.Figure, it: ContinuousRecord, palette: dict) -> None:
    """Each draft's min(1, r) as a bar in its fate's colour: one bar trace per fate, so the legend names
    each colour."""
    hover = [_describe_draft(it, k) for k in range(len(it.fate))]
    for fate, name in FATE_NAMES.items():
        drafts = [k for k, f in enumerate(it.fate) if f == fate]
        if not drafts:
            continue
        fig.add_trace(
            go.Bar(
                x=drafts,
                y=[max(it.ratio[k], 0.015) for k in drafts],  # a ratio of 0 still shows a sliver in its colour
                marker={
                    "color": palette[FATE_COLOURS[fate]],
                    # a discarded draft was never tested: its ratio hatched, in the colour of cells not decided
                    "pattern": {"shape": "/" if fate == "discarded" else "", "fgcolor": palette["outline"]},
                },
                customdata=[hover[k] for k in drafts],
                hovertemplate="%{customdata}<extra></extra>",
                name=name,
            )
        )


def _mark_uniforms(fig: go.Figure, it: ContinuousRecord, palette: dict) -> None:
    """The uniform that decided each tested draft, as a tick across its bar."""
    tested = [k for k, u in enumerate(it.uniform) if u is not None]
    fig.add_trace(
        go.Scatter(
            x=tested, y=[it.uniform[k] for k in tested], mode="markers", name="uniform u (accept if u <= bar)",
            marker={"symbol": "line-ew-open", "size": 28, "color": palette["outline"], "line": {"width": 3}},
            hoverinfo="skip",
        )
    )  # fmt: skip


def _drafts_axes(fig: go.Figure, count: int, ratios: list[float], labelled: bool, short: bool) -> None:
    """The drafts along x, each `labelled` with its min(1, r) under its bar, where no uniform's tick covers
    it: a rejected draft's is often too small to see as a bar (up to LABELLED_DRAFTS drafts; more would run
    into each other). `short`: the ratio axis's short title, as the long one runs into the figure's title
    on a short or large-type plot."""
    ticks = [f"{k}<br>{ratio_label(ratios[k])}" if labelled else str(k) for k in range(count)]
    below = "draft (0 = the next position)" + ("<br>and its min(1, r)" if labelled else "")
    fig.update_xaxes(title=below, tickvals=list(range(count)), ticktext=ticks, range=[-0.5, count - 0.5])
    fig.update_yaxes(title="min(1, r)" if short else "acceptance probability min(1, r)", range=[0, 1.05])


def _drafts_title(it: ContinuousRecord, head: str, large: bool) -> str:
    """How many drafts were accepted, after how many tries the rejection was resampled, and the ratio's
    form (large type: the tries are left to the sentence under the buttons, the title to three lines)."""
    tried = it.tries and not large
    tries = f", resampled after {it.tries} {'try' if it.tries == 1 else 'tries'}" if tried else ""
    if it.log_sigma is not None:
        kind = "r = Σ p/q (Eq. 5)" if large else "cspd: r = Σ p(x0|x1) / q(x0|x1)"
    else:
        kind = "r = p(path) / q(path)"
    return f"{head}: {it.accepted} of {len(it.fate)} accepted{tries}<br>{kind}"


def _drafts_layout(fig: go.Figure, title: str, labelled: bool, dark: bool, large: bool, wide: bool) -> go.Figure:
    """Overlaid bars, the theme and title, and the legend at the figure's foot under the axis's ticks and
    title: one entry a line, or on a projector's `wide` plot short names in two rows."""
    fig.update_layout(
        barmode="overlay",  # one bar per draft, whichever trace it is in
        legend={"yref": "container", "y": 0, "yanchor": "bottom", "x": 0, "xanchor": "left"},
    )
    wide = wide and not large
    fig = _finish(fig, title, WIDE_HEIGHT if wide else 480, dark, large, widths=WIDE_TITLE if wide else 1)
    font = fig.layout.font.size
    rows = 2 if wide else len(fig.data)
    if wide:  # (a wrapped row's columns are as wide as its longest name)
        fig.update_layout(legend={"orientation": "h"})
        for bar in fig.data[:-1]:
            bar.name = bar.name.split(" ")[0]
        fig.data[-1].name = "u (accept if u <= bar)"
    legend = (rows * 1.5 + 0.5) * font
    axis = (4 if labelled else 2) * 1.3 * font  # tick lines and title lines
    fig.update_layout(margin={"b": int(axis + legend + font)}, height=fig.layout.height + int(legend))
    return fig


def trajectory_figure(
    trace: Trace, j: int, draft: int | None = None, dark: bool = False, large: bool = False
) -> go.Figure:
    """Draft k of iteration j (default: the rejected one, else the last accepted): its denoising path
    x_T ... x_0 in the token's first two coordinates, and for cspd the target's path from the same
    noise (trajectory alignment, the paper's figure 4); cspd-exact evaluates the target along the
    draft's own path, so it has one."""
    title = "denoising trajectories"
    if not trace.continuous:
        return _not_continuous(trace, title, dark, large)
    iteration_at(trace, j)
    it = trace.iterations[j]
    step = it
    if not step.fate:
        return message_figure(
            f"iteration {j}: no drafts", "This pass drew its token with the target alone.", dark, large
        )
    k = draft if draft is not None else (step.fate.index("rejected") if "rejected" in step.fate else it.accepted - 1)
    k = max(0, min(k, len(step.fate) - 1))
    palette = colors(dark)
    # (name, points, colour, width): the draft's wide line under the target's narrow one, so that two
    # paths which nearly coincide (the same noise) both show
    paths = [("draft", step.draft_path[k], palette["new"], 8)]
    if step.target_path is not None:
        paths.append(("target (same noise)", step.target_path[k], palette["kept"], 2.5))
    fig = go.Figure()
    for index, (name, points, colour, width) in enumerate(paths):
        xs, ys = zip(*points, strict=True)
        steps = len(points) - 1
        fig.add_trace(
            go.Scatter(
                x=xs, y=ys, mode="lines+markers", name=name, line={"color": colour, "width": width},
                marker={"size": width + 3}, customdata=[f"step {s} of {steps}" for s in range(steps + 1)],
                hovertemplate=f"{name}, %{{customdata}}<br>(%{{x:.3f}}, %{{y:.3f}})<extra></extra>",
            )
        )  # fmt: skip
        fig.add_trace(
            go.Scatter(
                x=[xs[-1]], y=[ys[-1]], mode="markers", name="the token x_0", showlegend=index == 0,
                hoverinfo="skip",
                marker={"size": 16, "symbol": "star", "color": colour, "line": {"color": palette["outline"]}},
            )
        )  # fmt: skip
    start = paths[0][1][0]
    fig.add_trace(
        go.Scatter(
            x=[start[0]], y=[start[1]], mode="markers", name="x_T (shared noise)",
            marker={"size": 14, "symbol": "circle-open", "color": palette["outline"], "line": {"width": 2}},
        )
    )  # fmt: skip
    fig.update_xaxes(title=COORDINATES[0])
    fig.update_yaxes(title=COORDINATES[1], scaleanchor="x")
    fig.update_layout(
        legend={"orientation": "h", "yanchor": "top", "y": -0.3 if large else -0.18, "x": 0.5, "xanchor": "center"}
    )
    # the paths zig-zag: every step adds fresh noise, the same draw to both paths under cspd
    how = "both paths take the same noise at each step" if len(paths) == 2 else "the target's density along this path"
    head = f"iteration {j}, draft {k} (position {it.start + k}): {step.fate[k]}, min(1, r) = {step.ratio[k]:.2g}"
    title = f"{head}<br>{how}"
    return _finish(fig, title, 520, dark, large, widths=2)  # a plot across the page


def acceptance_by_step(trace: Trace, bins: int = POSITION_BINS) -> tuple[np.ndarray, np.ndarray]:
    """Accepted share of the tested drafts by the position they drafted, in `bins` equal spans of the
    sequence: (bin starts, rates; NaN where no draft was tested)."""
    length = len(trace.geometry.layout)
    edges = np.linspace(0, length, bins + 1).astype(int)
    accepted, tested = np.zeros(bins), np.zeros(bins)
    for it in trace.iterations:
        for offset, fate in enumerate(it.fate):
            if fate != "discarded":
                b = np.searchsorted(edges, it.start + offset, side="right") - 1
                tested[b] += 1
                accepted[b] += fate == "accepted"
    with np.errstate(invalid="ignore", divide="ignore"):
        return edges[:-1], np.where(tested > 0, accepted / tested, np.nan)


def acceptance_by_step_figure(traces: list[Trace], dark: bool = False, large: bool = False) -> go.Figure:
    """Acceptance by generation step for one or more runs (the paper's figure 11: with and without
    token pre-filling), each labelled with its method and pre-filled share."""
    title = "acceptance by generation step"
    runs = [trace for trace in traces if trace.continuous and any(it.fate for it in trace.iterations)]
    if not runs:
        return (
            _not_continuous(traces[0], title, dark, large)
            if traces and not traces[0].continuous
            else (message_figure(title, "This run verified no drafts (AR draws every token itself).", dark, large))
        )
    palette = list(OKABE_ITO.values())[1:]
    fig = go.Figure()
    for index, trace in enumerate(runs):
        starts, rates = acceptance_by_step(trace)
        label = prefill_label(trace)
        alpha = draft_acceptance(trace.iterations)  # the run's whole acceptance, as the paper's tables give it
        label += "" if alpha is None else f": alpha {alpha:.2f}"
        fig.add_trace(
            go.Scatter(
                x=starts, y=rates, mode="lines+markers", name=label, line={"color": palette[index % len(palette)]},
                hovertemplate="positions from %{x}: %{y:.0%} accepted<extra></extra>", connectgaps=False,
            )
        )  # fmt: skip
    fig.update_xaxes(title="generation step" if large else "generation step (first position of each span)")
    fig.update_yaxes(title="tested drafts accepted", range=[0, 1.02], tickformat=".0%")
    fig.update_layout(legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0})
    return _finish(fig, title, 420, dark, large)


def prefill_label(trace: Trace) -> str:
    """The run's method, with its pre-filled share where it pre-fills (the CSpD paper's figure 11 sets two
    runs side by side that differ only in it)."""
    params = trace.parameters
    if not isinstance(params, SpeculativeParameters):
        return trace.method
    return f"{trace.method}, pre-fill {params.prefill:.0%}"
