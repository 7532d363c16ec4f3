"""The draft tree on a projector (issue 58, item 9): the SJD-PAC preset's pass after *Next rejection* drafts three
candidates for each of the two positions after the rejection, nine combinations at depth 2 under the root. In the
projector layout's short figure (430 px) the tree grows downwards, so those nine spread across its width, where
stacked down it they shared one column and overlapped."""

import itertools
from collections import Counter

from specviz import metrics, viz
from specviz.decoding import run
from specviz.models.registry import get_entry
from specviz.ui.presets import PRESET_BY_KEY
from specviz.viz.figures import WIDE_HEIGHT
from specviz.viz.trees import tree_figure

PLOT_PIXELS = 480  # the width a half-width plot on a 1280 px projector gives the tree, less its depth axis


def _nodes(figure) -> list[tuple[float, float, str, float]]:
    """Every node drawn: x, y, hover text and marker size."""
    return [
        (x, y, hover, trace.marker.size)
        for trace in figure.data
        if trace.mode and "markers" in trace.mode
        for x, y, hover in zip(trace.x, trace.y, trace.customdata, strict=True)
    ]


def test_sjd_pacs_tree_on_a_projector_spreads_the_roots_branches_across_the_figure():
    preset = PRESET_BY_KEY["sjd-pac"]
    model = get_entry(preset.model).load()
    trace = run(model, preset.method, preset.prompt, preset.seed, params=preset.params or None)
    j = viz.jump(trace, metrics.opening_iteration(trace, preset.opens_on), "rejection")  # as the preset says
    tree = trace.iterations[j].tree
    assert Counter(tree.depths)[1] == 3 and Counter(tree.depths)[2] == 9, Counter(tree.depths)
    figure = tree_figure(trace, j, wide=True)
    assert figure.layout.height == WIDE_HEIGHT
    nodes = _nodes(figure)
    second = [(x, y) for x, y, hover, _ in nodes if hover.startswith("node ") and "<br>depth 2:" in hover]
    across = sorted(x for x, _ in second)
    assert len(second) == 9 and len(set(across)) == 9, second  # side by side, not in one column
    assert len({y for _, y in second}) == 1  # on one row, their depth's
    # far enough apart to tell apart: two nodes' widths between neighbours, at the figure's width for the tree
    low, high = figure.layout.xaxis.range
    gap = min(b - a for a, b in itertools.pairwise(across)) * PLOT_PIXELS / (high - low)
    size = max(size for *_, size in nodes)
    assert gap >= 2 * size, (gap, size)
    assert all(low <= x <= high for x, *_ in nodes)  # every branch in view
    top, bottom = figure.layout.yaxis.range  # the head on top, and the branching's depths in view
    assert bottom < top and bottom <= 0 and top >= 2
    assert "depths 0-6 of" in figure.layout.title.text  # the chain below, a drag away
