"""Plotly figures of draft-tree runs (eagle2, peanut): the tree of one pass, the depth map, the tree
shapes over the grid, and tau per pass.

Pure functions of a Trace like `specviz.viz.figures`, with its theme and fate colours. Given a window
method's trace they say, in place of a plot, that the view belongs to tree methods.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specviz.metrics import (
    DRAWN_DEPTH,
    acceptance_maps,
    cell_of_position,
    depth_map,
    drawn_after,
    grid_state,
    has_trees,
    per_tree,
    tree_layout,
    tree_of,
    tree_shape_maps,
)
from specviz.trace import DraftTree, Iteration, Trace
from specviz.viz.figures import (
    LARGE_EXTRA_HEIGHT,
    WIDE_HEIGHT,
    WIDE_TITLE,
    _finish,
    _outline,
    _subplot_titles_as_text,
    message_figure,
    title_margin,
    window_title,
)
from specviz.viz.palette import NOW_LABEL, OKABE_ITO, colors

# how each kind of node is drawn: colour key in palette.colors, marker symbol (so fates differ in grey
# too), legend label
NODES = {
    "head": ("committed", "circle", "head (decided before the pass)"),
    "accepted": ("accepted", "circle", "accepted"),
    "rejected": ("rejected", "square", "rejected"),
    "untested": ("pending", "circle", "untested"),
    "drawn": ("committed", "diamond", "drawn by the target after the path"),
}
FATE_TEXT = {
    "accepted": "accepted: on the path",
    "rejected": "tested and rejected",
    "untested": "untested: a sibling was accepted before it, or its parent was not reached",
}
DRAWN_LABEL = "drawn by the target (depth 0)"
LEGEND_BELOW = {"orientation": "h", "yref": "container", "y": 0.01, "yanchor": "bottom", "x": 0.5, "xanchor": "center"}
# a wide tree's nodes shrink with its leaves; the legend keeps its symbols at their usual size
WIDE_LEGEND = {**LEGEND_BELOW, "itemsizing": "constant"}
SHOWN_DEPTH = {False: 12, True: 8}  # depths a tree figure opens on (large type: fewer, wider apart); deeper a drag away
# vertical room per slot of a drawn tree (normal, large type): a node and a token's label above it
SLOT_PIXELS = {False: 30, True: 44}
# pixels below a tree's plot: its depth axis and the legend, whose five entries take up to three rows (five in
# large type) in a half-width plot; less, and plotly pushed the plot up to fit them (measured in chromium)
TREE_BOTTOM = {False: 180, True: 260}
MIN_TREE_PLOT = 200  # pixels of plot a tree figure keeps under however long a title
LINE_ROOM = 1.25  # slots of plot beyond the accepted path's line, for its labels above or below it
TALL_TREE_HEIGHT = 900  # at most: a taller tree opens on the leaves around its accepted path, the rest a drag away
WIDE_TREE_MARGINS = 280  # the same in a wide figure: a title of up to three lines, the axis, the legend
# a wide figure's tree grows downwards: its leaves share about this many pixels across (a half-width plot on a
# 1280 px projector, less its depth axis); the depths it opens on; the room a token's label needs beside its node;
# the room beside the outer leaves, in leaves (for the labels left of the accepted path)
WIDE_TREE_PIXELS = 480
WIDE_SHOWN_DEPTH = 6  # at least; more where the accepted path goes deeper (up to SHOWN_DEPTH)
LABEL_PIXELS = 36
WIDE_SLOT_PAD = 0.6
WIDE_AXIS_TITLE_SIZE = 12  # the depth axis's title, written up the side of a short plot


def _not_a_tree_run(trace: Trace, title: str, dark: bool, large: bool) -> go.Figure:
    return message_figure(
        title,
        f"{trace.method} verifies a Jacobi window, not draft trees: this view is for tree methods (eagle2, peanut).",
        dark,
        large,
    )


def _grid_axes(fig: go.Figure, trace: Trace, row: int | None = None, col: int | None = None, anchor: str = "x") -> None:
    """Square cells, row 0 on top, as the acceptance maps draw the grid."""
    g = trace.geometry
    where = {} if row is None else {"row": row, "col": col}
    fig.update_xaxes(showgrid=False, zeroline=False, range=[-0.5, g.cols - 0.5], constrain="domain", **where)
    fig.update_yaxes(
        showgrid=False, zeroline=False, range=[g.rows - 0.5, -0.5], scaleanchor=anchor, constrain="domain", **where
    )


def _position_text(trace: Trace) -> np.ndarray:
    """'row r, column c (position p)' of every grid cell."""
    g = trace.geometry
    cells = cell_of_position(trace)
    position = np.zeros(g.rows * g.cols, dtype=int)
    position[cells[cells >= 0]] = np.flatnonzero(cells >= 0)
    return np.array(
        [f"row {c // g.cols}, column {c % g.cols} (position {position[c]})" for c in range(g.rows * g.cols)],
        dtype=object,
    ).reshape(g.rows, g.cols)


def tree_figure(trace: Trace, j: int, dark: bool = False, large: bool = False, wide: bool = False) -> go.Figure:
    """The draft tree iteration j verified: nodes laid out by depth (each depth drafts one sequence
    position), edges to their parents, coloured by fate, the accepted path drawn thick along one straight
    line from the head to the token the target drew after it (`tree_layout`); hover shows each node's token,
    draft confidence and target probability. Depth runs left to right, siblings down the figure, which grows
    with the nodes its widest depths put either side of that line.
    `wide` (a 1280 x 720 projector, normal type): the tree in a short, wide figure, grown downwards
    (depth down it, siblings side by side across its width), so that a pass's candidates at each depth
    spread over the width (SJD-PAC's nine short branches at the root: stacked down a 430 px figure they
    overlapped), its nodes smaller where its leaves are many, rather than a figure up to 1,200 px tall."""
    tree = tree_of(trace, j)  # raises a clear IndexError for a bad j
    title = f"{trace.method}, {window_title(trace, j)}"
    if not has_trees(trace):
        return _not_a_tree_run(trace, title, dark, large)
    it = trace.iterations[j]
    if tree is None:
        return message_figure(title, "This token was drawn from the prefill's distribution: no tree.", dark, large)
    drawing = _drawn_tree(trace, it, tree)
    palette = colors(dark)
    fig = go.Figure()
    wide = wide and not large
    # where each row is drawn: (depth, slot) across and down, or grown downwards (slot, depth) in a wide figure
    place = (drawing.slot, drawing.depth) if wide else (drawing.depth, drawing.slot)
    _draw_branches(fig, drawing, it.path, palette, place)
    span = float(drawing.slot.max()) + 1  # the slots the siblings take, with the room beside the accepted path
    top = int(drawing.depth.max())
    # the depths the figure opens on: a long chain (sjd-pac's) is panned to, so the branching stays legible; a
    # wide figure has room for fewer, but opens on the whole path and the token drawn after it
    reach = int(drawing.depth[-1]) if drawing.kind[-1] == "drawn" else len(it.path)
    shown = min(top, max(WIDE_SHOWN_DEPTH, min(reach, SHOWN_DEPTH[False])) if wide else SHOWN_DEPTH[large])
    shape = _asked_shape(it)
    if wide:
        height = WIDE_HEIGHT
        room = min(WIDE_TREE_PIXELS / span, (WIDE_HEIGHT - WIDE_TREE_MARGINS) / (shown + 1))
        size = min(11, max(5, room - 1))
        labelled = {"head", "accepted", "drawn"} if WIDE_TREE_PIXELS / span >= LABEL_PIXELS else set()
    else:
        size = 16 if large else 11
        labelled = {"head", "accepted", "drawn"}  # a slot has room for a label: a tree taller pans instead
    _draw_nodes(fig, drawing, size, labelled, palette, place, beside=wide)
    title += _depth_axis(fig, it.start, top, shown, down=wide, large=large)
    if wide:
        fig.update_xaxes(range=[-0.5 - WIDE_SLOT_PAD, span - 0.5 + WIDE_SLOT_PAD], visible=False)
        title += f"<br>{shape}" if shape else ""
    else:
        height, (low, high), title = _tall_view(drawing, span, shown, title, shape, large)
        fig.update_yaxes(range=[high, low], visible=False)
    fig.update_layout(legend=WIDE_LEGEND if wide else LEGEND_BELOW)
    fig = _finish(fig, title, height, dark, large, widths=WIDE_TITLE if wide else 1)
    return fig.update_layout(margin={"b": 100 if wide else TREE_BOTTOM[large]})  # large type is never wide


def _tall_view(
    drawing: _DrawnTree, span: float, shown: int, title: str, shape: str, large: bool
) -> tuple[int, tuple[float, float], str]:
    """A tree grown across: the figure's height, the y range of its plot (top, bottom), and the title.

    The plot gives each slot SLOT_PIXELS whatever the title takes (in large type a title of nine lines once
    left 16 px a slot, and a node hid its neighbour's label). Nodes sit on half slots and the range's edges a
    quarter slot from them, so no node is cut in half, and it reaches LINE_ROOM slots beyond the accepted path's
    line either side, for its labels above or below it. A tree taller than TALL_TREE_HEIGHT opens on the slots
    around that line, and the title says how many of its leaves are in view."""
    slot, bottom, extra = SLOT_PIXELS[large], TREE_BOTTOM[large], LARGE_EXTRA_HEIGHT if large else 0
    parents = set(drawing.parents)  # a row is node row - 1, the head -1; the drawn token is not the tree's
    rows = [row for row, kind in enumerate(drawing.kind) if row - 1 not in parents and kind != "drawn"]
    leaves, depths, line = drawing.slot[rows], drawing.depth[rows], float(drawing.slot[0])

    def titled(pan: str) -> tuple[str, int]:
        full = title + pan + (f"<br>{shape}" if shape else "")
        return full, title_margin(full, large)[1] + bottom - extra  # the figure's height less its plot

    full, outside = titled("")
    low, high = min(-0.25, line - LINE_ROOM), max(span - 0.75, line + LINE_ROOM)  # every node whole, and the line
    height = max(480, outside + MIN_TREE_PLOT, min(TALL_TREE_HEIGHT, outside + math.ceil(slot * (high - low))))
    if (height - outside) / slot >= high - low:
        return height, (low, high), full
    pan = " leaves shown, around the accepted path: drag up or down"
    _, outside = titled(f"<br>{len(leaves)} of its {len(leaves)}{pan}")  # its longest
    height = max(height, outside + MIN_TREE_PLOT)
    # as many slots as the plot holds, centred on the line and kept within the tree's, then its edges moved in to
    # a quarter slot from the half slots the nodes sit on
    reach = (height - outside) / slot
    start = min(max(line - reach / 2, low), high - reach)
    low = math.ceil(2 * (start - 0.25)) / 2 + 0.25
    high = math.floor(2 * (start + reach - 0.25)) / 2 + 0.25
    in_view = int(((leaves > low) & (leaves < high) & (depths <= shown)).sum())
    full, _ = titled(f"<br>{in_view} of its {len(leaves)}{pan}")
    return height, (low, high), full


class _DrawnTree(NamedTuple):
    """A pass's tree as drawn, row by row: the head, the tree's nodes, then the token the target drew
    after the path where it drew one."""

    parents: list[int]  # of every row after the head, as a node of the tree (-1: the head)
    kind: list[str]  # every row's key in NODES
    depth: np.ndarray  # every row's place across the figure
    slot: np.ndarray  # and down it
    tokens: list[int]
    hover: list[str]


def _drawn_tree(trace: Trace, it: Iteration, tree: DraftTree) -> _DrawnTree:
    drawn = drawn_after(it)
    parents = tree.parents + ([it.path[-1] if it.path else -1] if drawn is not None else [])
    spine = [*it.path, len(tree.parents)] if drawn is not None else it.path
    depth, slot = tree_layout(parents, spine)
    kind = ["head", *tree.fate] + (["drawn"] if drawn is not None else [])
    tokens = [trace.tokens[it.start - 1], *tree.tokens] + ([drawn] if drawn is not None else [])
    return _DrawnTree(parents, kind, depth, slot, tokens, _node_hover(trace, it, tree, drawn))


def _node_hover(trace: Trace, it: Iteration, tree: DraftTree, drawn: int | None) -> list[str]:
    """Hover text of the head, of every node, and of the token drawn after the path."""
    cells = cell_of_position(trace)
    g = trace.geometry

    def where(d: int) -> str:
        position = it.start + d - 1
        cell = cells[position]
        return f"position {position}, " + (
            f"row {cell // g.cols}, column {cell % g.cols}" if cell >= 0 else "a layout slot"
        )

    head_position = it.start - 1
    hover = [f"head: token {trace.tokens[head_position]} at position {head_position}, decided before this pass"]
    for node, (token, d, q, p, fate) in enumerate(
        zip(tree.tokens, tree.depths, tree.confidence, tree.p_target, tree.fate, strict=True)
    ):
        hover.append(
            f"node {node}: token {token}<br>depth {d}: {where(d)}<br>draft confidence q {q:.3f}<br>"
            f"target p(x | ancestors) {p:.3f}<br>{FATE_TEXT[fate]}"
        )
    if drawn is not None:
        refused = it.accepted + 1 in {d for d, f in zip(tree.depths, tree.fate, strict=True) if f == "rejected"}
        how = "from what its refused siblings left of p" if refused else "from p (the path reached a leaf)"
        hover.append(f"token {drawn} drawn {how}<br>depth {it.accepted + 1}: {where(it.accepted + 1)}")
    return hover


def _draw_branches(
    fig: go.Figure, drawing: _DrawnTree, path: list[int], palette: dict, place: tuple[np.ndarray, np.ndarray]
) -> None:
    """Every edge to a parent thin, the accepted path thick, and a dotted line on to the drawn token; each row
    drawn at `place` (its x and y)."""
    x, y = place
    edge_x: list = []
    edge_y: list = []
    for row, parent in enumerate(drawing.parents, start=1):
        if drawing.kind[row] != "drawn":
            edge_x += [x[parent + 1], x[row], None]
            edge_y += [y[parent + 1], y[row], None]
    fig.add_trace(_line(edge_x, edge_y, {"color": palette["committed"], "width": 1}))
    path_rows = [0] + [node + 1 for node in path]
    fig.add_trace(_line(x[path_rows], y[path_rows], {"color": palette["accepted"], "width": 4}))
    if drawing.kind[-1] == "drawn":
        fig.add_trace(
            _line(
                [x[path_rows[-1]], x[-1]],
                [y[path_rows[-1]], y[-1]],
                {"color": palette["outline"], "width": 2, "dash": "dot"},
            )
        )


def _line(x: object, y: object, line: dict) -> go.Scatter:
    return go.Scatter(x=x, y=y, mode="lines", line=line, hoverinfo="skip", showlegend=False)


def _draw_nodes(
    fig: go.Figure,
    drawing: _DrawnTree,
    size: float,
    labelled: set[str],
    palette: dict,
    place: tuple[np.ndarray, np.ndarray],
    beside: bool = False,
) -> None:
    """The nodes at `place` (each row's x and y), one trace per kind (its colour, symbol and legend entry), the
    `labelled` kinds' tokens written beside them (`_label_side`)."""
    x, y = place
    for name, (color, symbol, label) in NODES.items():
        rows = [row for row, k in enumerate(drawing.kind) if k == name]
        if not rows:
            continue
        fig.add_trace(
            go.Scatter(
                x=x[rows],
                y=y[rows],
                mode="markers+text" if name in labelled else "markers",
                text=[str(drawing.tokens[row]) for row in rows] if name in labelled else None,
                textposition=[_label_side(drawing, row, beside) for row in rows] if name in labelled else None,
                marker={
                    "color": palette[color],
                    "symbol": symbol,
                    "size": size * (1.3 if name in ("head", "drawn") else 1),
                    "line": {"color": palette["outline"], "width": 1},
                },
                customdata=[drawing.hover[row] for row in rows],
                hovertemplate="%{customdata}<extra></extra>",
                name=label,
            )
        )


def _label_side(drawing: _DrawnTree, row: int, beside: bool) -> str:
    """Where a row's token is written: on the side of its node that fewer of its children's edges leave by
    (above or below it; `beside`, a tree grown downwards: left or right), so that no edge crosses it where one
    side is free (on a projector, an accepted node's label once sat on the two edges to its refused children);
    the token drawn after the path, at the line's end, right of it."""
    if drawing.kind[row] == "drawn" and not beside:
        return "middle right"
    children = [slot for slot, parent in zip(drawing.slot[1:], drawing.parents, strict=True) if parent == row - 1]
    before = sum(slot < drawing.slot[row] for slot in children)
    after = sum(slot > drawing.slot[row] for slot in children)
    if beside:
        return "middle right" if before > after else "middle left"
    return "bottom center" if before > after else "top center"


def _depth_axis(fig: go.Figure, start: int, top: int, shown: int, down: bool = False, large: bool = False) -> str:
    """The depth axis, opened on depths 0 to `shown` (`down`, a tree grown downwards: the y axis, the head on
    top); what the title adds where it hides some."""
    ticks = list(range(top + 1))
    axis = {
        "tickvals": ticks,
        "ticktext": ["head"] + [f"{d}" for d in ticks[1:]],
        "showgrid": False,
        "zeroline": False,
    }
    # short: up a projector's plot of about 180 px, or across one in large type, a longer one was cut or ran
    # into the figure's title
    title = f"depth d = position {start - 1} + d"
    if down:
        small = {"text": title, "font": {"size": WIDE_AXIS_TITLE_SIZE}}
        fig.update_yaxes(range=[shown + 0.5, -0.5], title=small, **axis)
    else:
        # room for the label right of the drawn token; where deeper depths wait a drag away, their nodes and
        # labels stay out of the plot rather than show cut (0.9 left a sliver of the next node, and its label)
        right = shown + (0.9 if shown == top else 0.6)
        fig.update_xaxes(range=[-0.5, right], title=title if large else f"depth in the tree: {title}", **axis)
    return f"<br>depths 0-{shown} of {top} shown: drag to pan along the chain" if shown < top else ""


def _asked_shape(it: Iteration) -> str:
    """'asked: depth 6, top-k 10, set by alpha 0.42': the tree shape the pass asked for, where it recorded one."""
    shape = f"asked: depth {it.tree_depth}, top-k {it.tree_top_k}" if it.tree_depth is not None else ""
    if it.alpha is not None:
        shape += f", set by alpha {it.alpha:.2f}"
    return shape


def depth_map_figure(trace: Trace, j: int | None = None, dark: bool = False, large: bool = False) -> go.Figure:
    """PEANUT's figure 1: per cell, the depth inside its draft tree at which its token was accepted
    (brighter: deeper), cells the target drew in grey; with j, the cells iteration j committed outlined.
    Viridis, not the acceptance maps' Cividis, whose middle is the grey of the drawn cells."""
    title = f"{trace.method}: depth in its draft tree at which each token was accepted"
    if not has_trees(trace):
        return _not_a_tree_run(trace, title, dark, large)
    depths = depth_map(trace)
    committed_at = acceptance_maps(trace)["iteration"]
    deepest = max(int(np.nanmax(depths)) if not np.isnan(depths).all() else 1, 1)
    where = _position_text(trace)
    hover = np.empty(depths.shape, dtype=object)
    for (r, c), d in np.ndenumerate(depths):
        if np.isnan(d):
            hover[r, c] = f"{where[r, c]}<br>not generated yet"
        elif d == DRAWN_DEPTH:
            k = int(committed_at[r, c])
            how = f"drawn by the target after iteration {k}'s path" if k else "the first token, drawn from the prefill"
            hover[r, c] = f"{where[r, c]}<br>{how}"
        else:
            hover[r, c] = f"{where[r, c]}<br>accepted at depth {int(d)} of iteration {int(committed_at[r, c])}'s tree"
    palette = colors(dark)
    drawn = np.where(depths == DRAWN_DEPTH, 0.0, np.nan)
    accepted = np.where(depths > DRAWN_DEPTH, depths, np.nan)
    step = max(1, math.ceil(deepest / 8))
    fig = go.Figure(
        [
            go.Heatmap(
                z=drawn,
                colorscale=[[0, palette["committed"]], [1, palette["committed"]]],
                showscale=False,
                customdata=hover,
                hovertemplate="%{customdata}<extra></extra>",
                xgap=1,
                ygap=1,
                name="drawn",
            ),
            go.Heatmap(
                z=accepted,
                zmin=0.5,
                zmax=deepest + 0.5,
                colorscale="Viridis",
                customdata=hover,
                hovertemplate="%{customdata}<extra></extra>",
                xgap=1,
                ygap=1,
                name="depth",
                colorbar={"title": {"text": "accepted<br>at depth"}, "tickvals": list(range(1, deepest + 1, step))},
            ),
            go.Scatter(
                x=[None],
                y=[None],
                mode="markers",
                marker={"symbol": "square", "size": 14, "color": palette["committed"]},
                name=DRAWN_LABEL,
            ),
        ]
    )
    if j is not None:
        x, y = _outline(np.argwhere(grid_state(trace, j).now), inset=0.08)
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                mode="lines",
                line={"color": palette["outline"], "width": 3},
                hoverinfo="skip",
                name=f"{NOW_LABEL} ({j})",
            )
        )
    _grid_axes(fig, trace)
    fig.update_layout(legend=LEGEND_BELOW)
    return _finish(fig, title, 640, dark, large).update_layout(margin={"b": 140 if large else 100})


def tree_shape_figure(trace: Trace, dark: bool = False, large: bool = False) -> go.Figure:
    """Per cell, the depth and top-k asked of the tree that committed it: PEANUT's adaptive shapes (it
    starts each tree from the one that committed the cell to its left); EAGLE-2's are one fixed shape,
    which the title says."""
    if not has_trees(trace):
        return _not_a_tree_run(trace, f"{trace.method}: draft-tree shapes", dark, large)
    maps = tree_shape_maps(trace)
    series = per_tree(trace)
    depths, top_ks = set(series["depth"].tolist()), set(series["top_k"].tolist())
    if len(depths) == 1 and len(top_ks) == 1:
        title = (
            f"{trace.method}: every tree asks depth {depths.pop()} and top-k {int(top_ks.pop())}: a fixed shape, "
            "the same over the whole grid"
        )
    else:
        title = f"{trace.method}: depth and top-k asked of the tree that committed each cell"
    where = _position_text(trace)
    committed_at = acceptance_maps(trace)["iteration"]
    hover = np.empty(where.shape, dtype=object)
    for (r, c), d in np.ndenumerate(maps["depth"]):
        if np.isnan(d):
            hover[r, c] = f"{where[r, c]}<br>" + ("the first token, no tree" if committed_at[r, c] == 0 else "pending")
            continue
        hover[r, c] = (
            f"{where[r, c]}<br>iteration {int(committed_at[r, c])}'s tree: depth {int(d)}, "
            f"top-k {int(maps['top_k'][r, c])}"
        )
        if not np.isnan(maps["alpha"][r, c]):
            hover[r, c] += f"<br>set by alpha {maps['alpha'][r, c]:.2f} of the neighbouring tree"
    fig = make_subplots(rows=1, cols=2, subplot_titles=("tree depth", "tree top-k"), horizontal_spacing=0.16)
    for col, key, bar_x in ((1, "depth", 0.42), (2, "top_k", 1.0)):
        values = maps[key]
        shown = values[~np.isnan(values)]
        low, high = (shown.min(), shown.max()) if shown.size else (0, 1)
        fig.add_trace(
            go.Heatmap(
                z=values,
                zmin=low - 0.5,
                zmax=high + 0.5,
                colorscale="Cividis",
                customdata=hover,
                hovertemplate="%{customdata}<extra></extra>",
                xgap=1,
                ygap=1,
                colorbar={
                    "x": bar_x,
                    "len": 0.8,
                    "thickness": 14,
                    "tick0": low,
                    "dtick": max(1, math.ceil((high - low) / 5)),
                },
            ),
            row=1,
            col=col,
        )
        _grid_axes(fig, trace, 1, col, "x" if col == 1 else "x2")
    return _subplot_titles_as_text(_finish(fig, title, 460, dark, large))


def tau_figure(trace: Trace, dark: bool = False, large: bool = False) -> go.Figure:
    """tau per tree pass, the tokens it committed (its accepted path and the token the target drew after
    it, as the papers' tables count), the path alone, and the depth asked, which bounds tau by depth + 1."""
    if not has_trees(trace):
        return _not_a_tree_run(trace, f"{trace.method}: tau per tree pass", dark, large)
    series = per_tree(trace)
    palette = colors(dark)
    x = series["iteration"]
    fig = go.Figure(
        [
            go.Bar(x=x, y=series["tau"], name="tau (tokens committed)", marker_color=palette["committed"]),
            go.Bar(x=x, y=series["accepted"], name="drafts accepted", marker_color=palette["accepted"], width=0.5),
            go.Scatter(
                x=x,
                y=series["depth"],
                name="depth asked",
                mode="lines",
                line={"color": OKABE_ITO["blue"], "shape": "hvh", "width": 2},
            ),
        ]
    )
    fig.update_layout(barmode="overlay", legend=LEGEND_BELOW)
    fig.update_xaxes(title="iteration")
    fig.update_yaxes(title="tokens")
    mean = float(series["tau"].mean()) if len(x) else 0.0
    fig = _finish(fig, f"{trace.method}: mean tau {mean:.2f} over {len(x)} tree passes", 480, dark, large)
    return fig.update_layout(margin={"b": 150 if large else 120})
