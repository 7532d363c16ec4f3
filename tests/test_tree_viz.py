"""The draft-tree views (depth map, tree shapes, the tree of one pass, tau) on a real eagle2 and peanut
run of the embedded model and on a hand-made tree trace whose numbers are worked out below; every other
view, app and CLI output given a tree trace.

The hand-made trace: a 1x4 grid whose sequence has a forced layout token (9) at position 2, so cells
0..3 are positions 0, 1, 3, 4; two tree passes after the first token.

    it  start  tree (token, parent)                       path    committed  what the grid shows
    0   0      -                                          -       [1]        the prefill's token
    1   1      0:(2,-1) 1:(3,-1) 2:(9,0) 3:(4,2) 4:(5,2)  [0, 2]  [2, 9, 6]  2 and 9 (no cell) accepted;
                                                                             4, 5 refused: 6 resampled
    2   4      0:(7,-1)                                   [0]     [7]        7 accepted; the image ends
"""

from collections import Counter
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest
from PIL import Image, ImageColor

import specviz
from specviz.cli import main
from specviz.decoding import run
from specviz.measure import bench as bench_module
from specviz.measure.bench import bench
from specviz.metrics import (
    MAP_KINDS,
    acceptance_maps,
    cell_of_position,
    depth_map,
    grid_state,
    per_tree,
    stalls,
    tree_layout,
    tree_shape_maps,
)
from specviz.trace import DraftTree, TokenRecord, Trace, TraceGeometry, TraceSampling, TreeRecord
from specviz.viz import (
    acceptance_map_figure,
    accepted_length_figure,
    changed_figure,
    colors,
    depth_map_figure,
    frame,
    race_figure,
    tau_figure,
    tree_figure,
    tree_shape_figure,
    window_figure,
)
from specviz.viz.figures import window_title
from specviz.viz.palette import legend_states
from specviz.viz.publication import write_figures
from specviz.viz.trees import NODES

EXAMPLES = Path(specviz.__file__).parent / "data" / "examples"


def _tree_pass(start, nodes, path, committed, depth, top_k, alpha=None) -> TreeRecord:
    tokens, parents = [t for t, _ in nodes], [p for _, p in nodes]
    depths = []
    for parent in parents:
        depths.append(1 if parent < 0 else depths[parent] + 1)
    partial = DraftTree.model_construct(tokens=tokens, parents=parents, depths=depths)
    tree = DraftTree(
        tokens=tokens,
        parents=parents,
        depths=depths,
        confidence=[0.5] * len(nodes),
        p_target=[0.25] * len(nodes),
        fate=partial.fates_of(path),
    )
    return TreeRecord(
        start=start,
        tree=tree,
        path=path,
        accepted=len(path),
        committed=committed,
        tree_depth=depth,
        tree_top_k=top_k,
        alpha=alpha,
        forward_ms=10.0,
        draft_ms=1.0,
    )


@pytest.fixture(scope="module")
def small() -> Trace:
    iterations = [
        TokenRecord(start=0, committed=[1], forward_ms=0.0),
        _tree_pass(1, [(2, -1), (3, -1), (9, 0), (4, 2), (5, 2)], [0, 2], [2, 9, 6], 3, 2),
        _tree_pass(4, [(7, -1)], [0], [7], 3, 3, alpha=0.5),
    ]
    return Trace(
        model="synthetic",
        method="peanut",
        lossless=True,
        prompt="test",
        seed=0,
        sampling=TraceSampling(temperature=1.0, top_k=None, top_p=1.0, guidance_scale=0.0),
        geometry=TraceGeometry(rows=1, cols=4, vocab_size=10, layout=[-1, -1, 9, -1, -1]),
        tokens=[1, 2, 9, 6, 7],
        nfe=3,
        seconds=0.1,
        iterations=iterations,
    )


@pytest.fixture(scope="module")
def peanut_trace(tiny) -> Trace:
    return run(tiny, "peanut", "red apple", 0)


@pytest.fixture(scope="module")
def sjd() -> Trace:
    return Trace.load(EXAMPLES / "red-apple-sjd.json")


def test_the_small_trace_is_the_one_in_the_docstring(small):
    assert [it.tree.fate for it in small.iterations[1:]] == [
        ["accepted", "untested", "accepted", "rejected", "rejected"],
        ["accepted"],
    ]


def test_numbers_of_the_small_trace(small):
    assert depth_map(small).tolist() == [[0, 1, 0, 1]]  # the layout slot accepted at depth 2 has no cell
    assert grid_state(small, 1).state.tolist() == [["committed", "accepted", "rejected", "pending"]]
    assert grid_state(small, 2).state.tolist() == [["committed", "committed", "committed", "accepted"]]
    shapes = tree_shape_maps(small)
    assert np.array_equal(shapes["depth"], [[np.nan, 3, 3, 3]], equal_nan=True)
    assert np.array_equal(shapes["top_k"], [[np.nan, 2, 2, 3]], equal_nan=True)
    assert np.array_equal(shapes["alpha"], [[np.nan, np.nan, np.nan, 0.5]], equal_nan=True)
    series = per_tree(small)
    assert series["tau"].tolist() == [3, 1] and series["accepted"].tolist() == [2, 1]
    assert series["levels"].tolist() == [3, 1] and series["size"].tolist() == [5, 1]
    assert acceptance_maps(small)["redraws"].tolist() == [[0, 0, 0, 0]]  # each tree committed all it reached
    assert window_title(small, 1) == "iteration 1/2: 5 drafts in a tree, 2 accepted, +1 drawn after them"


def test_tree_layout_worked_out():
    """The head, then nodes 0..3: 0 and 1 under the head, 2 and 3 under node 0."""
    depth, slot = tree_layout([-1, -1, 0, 0])
    assert depth.tolist() == [0, 1, 1, 2, 2]
    assert slot.tolist() == [0.0, 0.0, 1.5, 0.0, 1.5]  # children level with their parent, then below
    # node 1 accepted: the head level with it, node 0 (tested before it) above with its children
    assert tree_layout([-1, -1, 0, 0], spine=[1])[1].tolist() == [2.5, 1.0, 2.5, 0.0, 1.0]
    # nodes 0 then 3: node 1 (tested after node 0) below the line, node 2 (before node 3) above it
    assert tree_layout([-1, -1, 0, 0], spine=[0, 3])[1].tolist() == [1.5, 1.5, 3.0, 0.0, 1.5]


def test_tree_layout_draws_the_path_straight_keeps_each_depth_in_order_and_crosses_no_edges():
    """On random trees and paths: the head and the path on one line with room for its labels, a depth's nodes
    in their parents' order (then their own), at least a slot apart, so that no two edges cross."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        parents = [-1]
        for node in range(1, int(rng.integers(1, 60))):
            parents.append(int(rng.integers(-1, node)))
        node, spine = int(rng.integers(-1, len(parents))), []
        while node >= 0:
            spine.insert(0, node)
            node = parents[node]
        depth, slot = tree_layout(parents, spine)
        rows = [-1, *parents]  # each row's parent node; row r is node r - 1
        assert all(depth[r] == depth[rows[r] + 1] + 1 for r in range(1, len(rows)))
        line = slot[0]
        assert slot.min() == 0 and all(slot[node + 1] == line for node in spine)
        for level in range(1, int(depth.max()) + 1):
            column = sorted(np.flatnonzero(depth == level), key=lambda r: slot[r])
            gaps = np.diff(slot[column])
            assert (gaps >= 1).all()
            # ordered by parent's place, then by index: so edges between two depths never cross
            keys = [(slot[rows[r] + 1], r) for r in column]
            assert keys == sorted(keys)
            off_line = [r for r in column if slot[r] != line]
            assert all(abs(slot[r] - line) >= 1.5 for r in off_line) or len(spine) < level


def test_depth_map_is_the_depth_of_each_accepted_path(eagle2_trace):
    """Recomputed from the paths: the k-th committed token of a pass sits at depth k + 1 of its tree
    while k < accepted, and the token drawn after the path (or the prefill's) at 0."""
    trace = eagle2_trace
    expected = np.full(len(trace.tokens), -1)
    for it in trace.iterations:
        for k in range(len(it.committed)):
            expected[it.start + k] = it.tree.depths[it.path[k]] if k < it.accepted else 0
            assert k >= it.accepted or it.tree.depths[it.path[k]] == k + 1
    cells = cell_of_position(trace)
    depths = depth_map(trace)
    assert np.array_equal(depths.ravel()[cells[cells >= 0]], expected[cells >= 0])
    assert (depths >= 1).sum() == sum(it.accepted for it in trace.iterations) > 0
    assert depths.max() <= trace.params["tree_depth"]


def test_redraws_count_the_trees_that_drafted_a_cell_without_committing_it(eagle2_trace):
    trace = eagle2_trace
    drafted = np.zeros(len(trace.tokens))
    for it in trace.iterations:
        reached = max(it.tree.depths, default=0) if it.kind == "tree" else 0
        drafted[it.start + len(it.committed) : it.start + reached] += 1
    cells = cell_of_position(trace)
    redraws = acceptance_maps(trace)["redraws"]
    assert np.array_equal(redraws.ravel()[cells[cells >= 0]], drafted[cells >= 0]) and redraws.max() > 0


def test_shape_maps_show_the_tree_that_committed_each_cell(eagle2_trace, peanut_trace):
    fixed = tree_shape_maps(eagle2_trace)
    assert np.nanmin(fixed["depth"]) == np.nanmax(fixed["depth"]) == 8 and np.isnan(fixed["alpha"]).all()
    assert "a fixed shape" in tree_shape_figure(eagle2_trace).layout.title.text
    maps, committed_at = tree_shape_maps(peanut_trace), acceptance_maps(peanut_trace)["iteration"]
    for (r, c), depth in np.ndenumerate(maps["depth"]):
        it = peanut_trace.iterations[int(committed_at[r, c])]
        assert (np.isnan(depth) and it.kind != "tree") or (
            depth == it.tree_depth and maps["top_k"][r, c] == it.tree_top_k
        )
    assert len(np.unique(maps["depth"][~np.isnan(maps["depth"])])) > 1  # PEANUT adapts
    assert "fixed" not in tree_shape_figure(peanut_trace).layout.title.text


def test_tau_counts_the_token_drawn_after_each_path(eagle2_trace):
    series = per_tree(eagle2_trace)
    assert series["tau"].sum() + 1 == len(eagle2_trace.tokens)  # plus the prefill's token
    assert (series["tau"] - series["accepted"] <= 1).all()
    bars = tau_figure(eagle2_trace).data
    assert list(bars[0].y) == series["tau"].tolist() and list(bars[1].y) == series["accepted"].tolist()
    assert f"mean tau {series['tau'].mean():.2f}" in tau_figure(eagle2_trace).layout.title.text


def test_a_wide_tree_is_short_enough_for_a_projector_and_draws_every_node(eagle2_trace):
    """The projector layout's tree: the same nodes and path in a 430 px figure (its nodes smaller where the
    leaves are many), grown downwards (depth down it, siblings across it), instead of one up to 1,200 px tall;
    large type keeps the tall figure."""
    j = max(range(len(eagle2_trace.iterations)), key=lambda k: eagle2_trace.iterations[k].accepted)
    tall, wide = tree_figure(eagle2_trace, j), tree_figure(eagle2_trace, j, wide=True)
    assert wide.layout.height == 430 < tall.layout.height

    def drawn(fig) -> list:
        return [(t.name, list(t.x), list(t.y)) for t in fig.data]

    assert drawn(wide) == [(name, y, x) for name, x, y in drawn(tall)]  # the same tree, turned
    nodes = [t for t in wide.data if t.mode and "markers" in t.mode]
    assert all(5 <= t.marker.size <= 11 * 1.3 for t in nodes) and wide.layout.legend.itemsizing == "constant"
    assert (
        tree_figure(eagle2_trace, j, large=True, wide=True).layout.height
        == tree_figure(eagle2_trace, j, large=True).layout.height
    )


def test_tree_figure_draws_every_node_by_fate_and_the_path(small, eagle2_trace):
    fig = tree_figure(small, 1)
    nodes = {t.name: t for t in fig.data if t.mode and "markers" in t.mode}
    assert {label: len(nodes[label].x) for _, _, label in NODES.values()} == {
        NODES["head"][2]: 1,
        NODES["accepted"][2]: 2,
        NODES["rejected"][2]: 2,
        NODES["untested"][2]: 1,
        NODES["drawn"][2]: 1,
    }
    palette = colors()
    assert nodes[NODES["rejected"][2]].marker.color == palette["rejected"]
    path = next(t for t in fig.data if t.line.width == 4)
    assert list(path.x) == [0, 1, 2]  # the head and the accepted nodes
    assert list(nodes[NODES["drawn"][2]].x) == [3]  # drawn where the refused children were
    assert "depth 2: position 2, a layout slot" in nodes[NODES["accepted"][2]].customdata[1]
    assert "target p(x | ancestors) 0.250" in nodes[NODES["rejected"][2]].customdata[0]
    assert "token 6 drawn from what its refused siblings left of p" in nodes[NODES["drawn"][2]].customdata[0]
    j = max(range(len(eagle2_trace.iterations)), key=lambda k: eagle2_trace.iterations[k].accepted)
    it = eagle2_trace.iterations[j]
    real = tree_figure(eagle2_trace, j)
    drawn = sum(len(t.x) for t in real.data if t.mode and "markers" in t.mode)
    assert drawn == 1 + len(it.tree.tokens) + (len(it.committed) - it.accepted)
    assert f"{it.accepted} accepted" in real.layout.title.text.replace("<br>", " ")
    with pytest.raises(IndexError):
        tree_figure(eagle2_trace, len(eagle2_trace.iterations))


def _messages(fig: go.Figure) -> str:
    return " ".join(annotation.text.replace("<br>", " ") for annotation in fig.layout.annotations)


def _assert_frame_draws_the_grid(trace, j: int, dark: bool) -> None:
    """The frame after iteration j paints every cell of the grid in its state's colour: at scale 8 each
    cell keeps at least its 5 x 5 interior (inside the gap and an outline)."""
    pixels = np.asarray(frame(trace, j, None, scale=8, dark=dark).convert("RGB")).reshape(-1, 3)
    states = grid_state(trace, j).state
    for state, count in zip(*np.unique(states, return_counts=True), strict=True):
        painted = (pixels == ImageColor.getrgb(colors(dark)[state])).all(axis=1).sum()
        assert painted >= 25 * count, (state, painted, count)


def _cells(values) -> list:
    """Numbers as plain lists, NaN (nothing drawn there) as None."""
    values = np.asarray(values, dtype=float)
    return np.where(np.isnan(values), None, values).tolist()


def _numbers(fig: go.Figure) -> list:
    """What a figure draws, its style aside: each heatmap's cells and each bar's or marker's heights, in
    drawing order; lines (outlines, a tree's edges) and legend-only entries left out."""
    drawn = []
    for trace in fig.data:
        if trace.type == "heatmap" or trace.type == "bar" or "markers" in (getattr(trace, "mode", None) or ""):
            values = _cells(trace.z if trace.type == "heatmap" else trace.y)
            if any(value is not None for value in np.ravel(np.array(values, dtype=object))):
                drawn.append(values)
    return drawn


def _nodes(fig: go.Figure) -> dict[str, int]:
    """A tree figure's nodes: how many of each kind it marks."""
    return {trace.name: len(trace.x) for trace in fig.data if trace.mode and "markers" in trace.mode}


def _views(trace: Trace, dark: bool, large: bool) -> dict:
    style = {"dark": dark, "large": large}
    last = len(trace.iterations) - 1
    return {
        "tree nodes": [_nodes(tree_figure(trace, j, **style)) for j in (1, last)],
        "depth map": _numbers(depth_map_figure(trace, **style)),
        "depth map at the last pass": _numbers(depth_map_figure(trace, last, **style)),
        "tree shapes": _numbers(tree_shape_figure(trace, **style)),
        "tau": _numbers(tau_figure(trace, **style)),
        "accepted length": _numbers(accepted_length_figure(trace, **style)),
        "race": _numbers(race_figure(trace, trace, **style)),
        **{kind: _numbers(acceptance_map_figure(trace, kind, **style)) for kind in MAP_KINDS},
    }


def _expected_views(trace: Trace) -> dict:
    """What each view of `_views` should draw, from the trace's records and its metrics: a tree's nodes
    by fate (the head, and the token drawn after the path where one was), the depth map as the cells
    drawn by the target (depth 0) and those accepted from a tree, the asked depth and top-k, tau and
    the accepted drafts per tree, tokens and drafts per iteration, NFE and seconds, the acceptance maps."""
    last = len(trace.iterations) - 1
    depth, shapes, series, maps = depth_map(trace), tree_shape_maps(trace), per_tree(trace), acceptance_maps(trace)

    def nodes(it) -> dict[str, int]:
        counts = {"head": 1, **Counter(it.tree.fate), "drawn": len(it.committed) - it.accepted}
        return {NODES[kind][2]: count for kind, count in counts.items() if count}

    depths = [_cells(np.where(depth == 0, 0, np.nan)), _cells(np.where(depth >= 1, depth, np.nan))]
    return {
        "tree nodes": [nodes(trace.iterations[j]) for j in (1, last)],
        "depth map": depths,
        "depth map at the last pass": depths,
        "tree shapes": [_cells(shapes["depth"]), _cells(shapes["top_k"])],
        "tau": [series["tau"].tolist(), series["accepted"].tolist()],
        "accepted length": [[len(it.committed) for it in trace.iterations], [it.accepted for it in trace.iterations]],
        "race": [[trace.nfe], [trace.nfe], [trace.seconds], [trace.seconds]],
        **{kind: [_cells(maps[kind])] for kind in MAP_KINDS},
    }


# the views of the small trace, worked out from the module's docstring
SMALL_VIEWS = {
    "tree nodes": [
        {"head (decided before the pass)": 1, "accepted": 2, "rejected": 2, "untested": 1,
         "drawn by the target after the path": 1},
        {"head (decided before the pass)": 1, "accepted": 1},
    ],
    "depth map": [[[0, None, 0, None]], [[None, 1, None, 1]]],  # token 6 drawn; the layout slot has no cell
    "depth map at the last pass": [[[0, None, 0, None]], [[None, 1, None, 1]]],
    "tree shapes": [[[None, 3, 3, 3]], [[None, 2, 2, 3]]],  # depth and top-k asked of the committing tree
    "tau": [[3, 1], [2, 1]],
    "accepted length": [[1, 3, 1], [0, 2, 1]],
    "race": [[3], [3], [0.1], [0.1]],
    "iteration": [[[0, 1, 1, 2]]],
    "run_length": [[[1, 3, 3, 1]]],
    "redraws": [[[0, 0, 0, 0]]],
}  # fmt: skip


def test_the_expected_views_of_the_small_trace_are_the_worked_out_ones(small):
    assert _expected_views(small) == SMALL_VIEWS


@pytest.mark.parametrize("dark, large", [(False, False), (True, True)])
def test_every_view_draws_a_tree_traces_numbers_or_says_why_not(eagle2_trace, small, sjd, dark, large):
    style = {"dark": dark, "large": large}
    assert _views(small, dark, large) == SMALL_VIEWS
    assert _views(eagle2_trace, dark, large) == _expected_views(eagle2_trace)
    for trace in (eagle2_trace, small):
        assert "not a Jacobi window" in _messages(window_figure(trace, 1, **style))
        assert "no draft is carried" in _messages(changed_figure(trace, **style))
        assert "prefill" in _messages(tree_figure(trace, 0, **style))
        _assert_frame_draws_the_grid(trace, 1, dark)
    for fig in (tree_figure(sjd, 3), depth_map_figure(sjd), tree_shape_figure(sjd), tau_figure(sjd)):
        assert "this view is for tree methods" in _messages(fig)
    assert legend_states(set(), trees=True) == ["committed", "pending", "accepted", "rejected"]


def test_a_tree_pass_that_accepts_nothing_counts_in_stalls(small):
    idle = small.model_copy(update={"iterations": [small.iterations[0]] + [small.iterations[1]] * 3})
    assert stalls(idle, minimum=3) == []  # every pass accepted its first node
    refused = _tree_pass(1, [(2, -1)], [], [3], 2, 2)
    assert stalls(small.model_copy(update={"iterations": [small.iterations[0], *[refused] * 3]}), minimum=3) == [(1, 3)]


def test_publication_figures_of_a_tree_trace(eagle2_trace, tmp_path):
    made = write_figures([("eagle2.json", eagle2_trace)], tmp_path, ["svg", "png"], "paper")
    stems = {path.stem for path in made.files}
    assert {"eagle2-depth-map", "eagle2-tree-shapes", "eagle2-iterations", "eagle2-acceptance-map"} <= stems
    assert not any("window" in stem for stem in stems)
    assert "no Jacobi windows in eagle2.json: window at an iteration skipped" in made.notes
    assert "<image" not in (tmp_path / "eagle2-depth-map.svg").read_text()


def test_cli_run_writes_the_depth_map_and_figures_take_the_trace(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--method", "eagle2", "--prompt", "red apple", "--out", str(out)]) == 0
    line = capsys.readouterr().out
    assert "method=eagle2" in line and " tau=" in line
    with Image.open(out / "depth-map.png") as picture:
        assert picture.format == "PNG" and picture.width == 1920  # slides style: 6.4 in at 300 dpi
    assert {p.name for p in out.iterdir()} == {"image.png", "trace.json", "depth-map.png"}
    assert main(["figures", str(out / "trace.json"), "--out", str(tmp_path / "figures"), "--format", "svg"]) == 0
    assert (tmp_path / "figures" / "eagle2-depth-map.svg").is_file()
    assert "window at an iteration skipped" in capsys.readouterr().err


def test_bench_reports_tau_tree_size_and_the_drafters_share(tiny, eagle2_trace, monkeypatch):
    """The runs are the fixtures' (no decoding here): the columns are what the traces say."""
    ar_trace = Trace.load(EXAMPLES / "red-apple-ar.json")
    monkeypatch.setattr(bench_module, "run", lambda model, name, *rest: eagle2_trace if name == "eagle2" else ar_trace)
    report = bench(tiny, ["eagle2"], ["red apple"], [0], tiny.default_sampling, compare_generate=False)
    ar_result, result = report.results
    series = per_tree(eagle2_trace)
    assert ar_result.trees is None and result.trees is not None
    assert result.trees.tau == pytest.approx(series["tau"].mean())
    assert result.trees.depth == 8 and result.trees.size == pytest.approx(series["size"].mean())
    assert result.trees.draft_share == pytest.approx(series["draft_ms"].sum() / series["forward_ms"].sum())
    assert result.accepted_per_pass == pytest.approx(series["accepted"].mean())
    table = report.markdown()
    assert "| draft trees | tau |" in table and f"| eagle2 | {result.trees.tau:.2f} |" in table
    assert report.to_dict()["results"][1]["trees"]["tau"] == pytest.approx(result.trees.tau)


def test_the_race_map_grows_with_the_run_and_matches_inspects_maps(sjd, peanut_trace):
    """The race's map of a partial run paints exactly the committed cells; a window run's colours are
    on a fixed scale (a cell keeps its colour as the map grows), a tree run's drawn tokens are grey."""
    from specviz.viz import progress_map
    from specviz.viz.palette import colors

    pending = np.array(Image.new("RGB", (1, 1), colors()["pending"]))[0, 0]
    halfway = sjd.model_copy(update={"iterations": sjd.iterations[:30]})
    committed = sum(len(it.committed) for it in halfway.iterations)
    title, early = progress_map(halfway)
    _, full = progress_map(sjd)
    early, full = np.asarray(early), np.asarray(full)
    painted = ~(early == pending).all(axis=-1)
    assert title == "accepted run length of each cell (navy 1 to yellow 17)" and early.shape == (16, 16, 3)
    assert painted.sum() == committed and not (full == pending).all(axis=-1).any()
    assert (early[painted] == full[painted]).all()  # what was painted keeps its colour
    title, tree_map = progress_map(peanut_trace)
    drawn = np.isclose(specviz.metrics.depth_map(peanut_trace), 0)
    grey = np.array(Image.new("RGB", (1, 1), colors()["committed"]))[0, 0]
    assert title.startswith("depth at which") and (np.asarray(tree_map)[drawn] == grey).all()


def test_a_tree_with_a_long_chain_opens_on_its_branching(tiny):
    """SJD-PAC's pass is a small tree then a chain of about 50 drafts: the figure opens on the first
    depths, where the candidates branch, and says how to reach the rest."""
    trace = run(tiny, "sjd-pac", "red apple", 0)
    j = next(k for k, it in enumerate(trace.iterations) if it.kind == "tree" and max(it.tree.depths) > 12)
    figure = tree_figure(trace, j)
    assert tuple(figure.layout.xaxis.range) == (-0.5, 12.6)  # depth 13's nodes and labels out of view, not cut
    assert f"depths 0-12 of {max(trace.iterations[j].tree.depths)} shown" in figure.layout.title.text


def test_a_tall_tree_opens_on_the_leaves_around_its_accepted_path(tiny):
    """PEANUT's preset pass has 43 leaves: the figure opened on its first, refused branches and the accepted
    path was a page further down; later, on the path's end with its head 20 leaves up, a drag away. It now
    opens, at a legible 30 px a leaf, on the whole path drawn straight from the head to the token drawn after
    it, and says how to reach the rest."""
    from specviz.viz.figures import LARGE_EXTRA_HEIGHT
    from specviz.viz.trees import TALL_TREE_HEIGHT

    trace = run(tiny, "peanut", "red apple", 0, params={"drafter": "head"})
    panned = 0
    for j, large in _tree_passes(trace):
        figure = tree_figure(trace, j, large=large)
        bottom, top = figure.layout.yaxis.range
        assert _pixels_per_slot(figure) >= (44 if large else 30) - 1e-9, (j, large)  # a node and a label
        path = next((t for t in figure.data if t.line.width == 4), None)  # none where nothing was accepted
        drawn = next((t for t in figure.data if t.name == NODES["drawn"][2]), None)  # none at the image's end
        line = list(path.y) if path is not None else []  # the head and the accepted path
        drawn_y = list(drawn.y) if drawn is not None else []
        assert len(set(line + drawn_y)) <= 1, (j, line, drawn_y)  # one straight line
        assert all(top < y < bottom for y in [*line, *drawn_y]), (j, figure.layout.yaxis.range, line)
        nodes = [y for t in figure.data if t.mode and "markers" in t.mode for y in t.y]
        assert all(abs(y - edge) >= 0.25 for y in nodes for edge in (top, bottom))  # none cut in half
        assert top <= line[0] - 1.25 and line[0] + 1.25 <= bottom  # room for the line's labels either side
        if "drag up or down" not in figure.layout.title.text.replace("<br>", " "):  # all its nodes fit, whole
            assert top < min(nodes) and max(nodes) < bottom
            continue
        panned += not large
        assert figure.layout.height >= TALL_TREE_HEIGHT + (LARGE_EXTRA_HEIGHT if large else 0)  # more for a long title
    assert panned >= 3


def _tree_passes(trace):
    """(iteration, False) and (iteration, True) for every pass that verified a tree."""
    for j, it in enumerate(trace.iterations):
        if it.kind == "tree" and it.tree is not None:
            yield from ((j, False), (j, True))


def _pixels_per_slot(figure) -> float:
    """The height of a tree figure's plot over the slots its y axis spans."""
    bottom, top = figure.layout.yaxis.range
    plot = figure.layout.height - figure.layout.margin.t - figure.layout.margin.b
    return plot / (bottom - top)


def test_a_tokens_label_sits_on_the_side_its_childrens_edges_do_not_leave_by(tiny):
    """On a projector an accepted node's label sat left of it, on the two edges to its refused children there;
    a label now goes to the side with fewer of its children (above or below it, or left or right of it in a tree
    grown downwards)."""
    trace = run(tiny, "eagle2", "red apple", 0)
    checked = 0
    for j, wide in _tree_passes(trace):
        figure = tree_figure(trace, j, wide=wide)
        down = 0 if wide else 1  # the axis siblings spread along: x in a tree grown downwards, else y
        # y grows downwards in a figure grown across (its axis reversed), x rightwards in a wide one
        free = ("middle left", "middle right") if wide else ("top center", "bottom center")
        edges = next(t for t in figure.data if t.mode == "lines" and t.line.width == 1)
        ends = list(zip(edges.x, edges.y, strict=True))
        for kind in ("head", "accepted"):
            nodes = next((t for t in figure.data if t.name == NODES[kind][2] and t.text is not None), None)
            if nodes is None:  # no label drawn (a wide tree with many leaves), or no node of the kind
                continue
            for node, side in zip(zip(nodes.x, nodes.y, strict=True), nodes.textposition, strict=True):
                children = [end for start, end in zip(ends[0::3], ends[1::3], strict=True) if start == node]
                before = sum(child[down] < node[down] for child in children)
                after = sum(child[down] > node[down] for child in children)
                assert side == free[int(before > after)], (j, wide, kind, before, after, side)
                checked += 1
    assert checked > 100
