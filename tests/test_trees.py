"""Draft-tree methods (eagle2, peanut) on the embedded model: valid traces, greedy equality with AR,
PEANUT's controller as section 4 states it, and the training-free drafter's table."""

from types import SimpleNamespace

import pytest
import torch

from specviz.core.params import PeanutParameters, TreeParameters
from specviz.core.settings import SamplingSettings, SettingsError
from specviz.decoding import METHODS, run
from specviz.decoding.drafters import _write
from specviz.decoding.peanut import PeanutShape
from specviz.decoding.tree import TreeShape, sibling_acceptance, sibling_order
from specviz.models.protocol import IMAGE_CELL, Geometry
from specviz.trace import Trace

SMALL_TREES = {"tree_tokens": 20}  # a tree pass on CPU costs about its node count in tokens
TREE_METHODS = [name for name, method in METHODS.items() if issubclass(method.parameters, TreeParameters)]


@pytest.mark.parametrize("method", TREE_METHODS)
def test_every_tree_method_completes_the_image_with_a_valid_trace(tiny, method):
    trace = run(tiny, method, "red apple", seed=2, params=SMALL_TREES)
    assert len(trace.tokens) == 256 and trace.nfe == len(trace.iterations)
    assert trace.lossless == METHODS[method].lossless
    assert Trace.from_json(trace.to_json()) == trace  # paths, fates and depths pass full validation
    trees = trace.iterations[1:]
    assert all(it.kind == "tree" and len(it.tree.tokens) <= trace.params["tree_tokens"] for it in trees)
    assert all(len(it.committed) == it.accepted + 1 for it in trees[:-1])
    assert trace.nfe < 256


@pytest.mark.parametrize(
    "method, drafter", [("eagle2", "training-free"), ("peanut", "training-free"), ("eagle2", "head")]
)
def test_greedy_trees_reproduce_greedy_ar_exactly(tiny, greedy_ar, method, drafter):
    greedy, ar = SamplingSettings(temperature=0, guidance_scale=3.0), greedy_ar
    trace = run(tiny, method, "cat face", seed=9, sampling=greedy, params={**SMALL_TREES, "drafter": drafter})
    assert trace.tokens == ar.tokens and trace.lossless
    assert trace.nfe < ar.nfe


def test_sibling_tests_telescope_to_p():
    """Sibling i is accepted with p(x_i) / (1 - sum of the earlier siblings' p): after i - 1 refusals,
    the chance of reaching and accepting it is exactly p(x_i)."""
    parents = [-1, -1, -1, 0]
    mass = torch.tensor([0.5, 0.3, 0.1, 0.9])
    accept = sibling_acceptance(mass, sibling_order(torch.tensor(parents)))
    assert torch.allclose(accept, torch.tensor([0.5, 0.6, 0.5, 0.9]))
    reach = torch.cumprod(torch.cat([torch.ones(1), 1 - accept[:2]]), 0)
    assert torch.allclose(reach * accept[:3], mass[:3])


def _grid_session(rows: int = 3, cols: int = 3) -> SimpleNamespace:
    """Just the geometry PEANUT's controller reads: a grid without layout slots."""
    return SimpleNamespace(geometry=Geometry(rows, cols, 16, (IMAGE_CELL,) * (rows * cols)))


def test_peanut_repeats_the_left_tree_and_applies_eq_2_within_the_bounds():
    params = PeanutParameters()  # Anole: beta 1, l_d 1, l_k 3, depth in (0, 10), top-k in (3, 14)
    rule = PeanutShape(params, _grid_session())
    assert rule.shape(1) == TreeShape(params.tree_depth, params.tree_top_k)  # the first tree: unadapted
    rule.learn(1, TreeShape(5, 8), levels=5, accepted=5, committed=6)  # alpha = 1: positive
    assert rule.shape(2) == TreeShape(6, 5, alpha=1.0)  # deeper and narrower than its left neighbour
    rule.learn(2, TreeShape(6, 5), levels=6, accepted=2, committed=3)  # alpha 1/3: negative
    assert rule.shape(5) == TreeShape(5, 8, alpha=pytest.approx(1 / 3))  # shallower and wider
    assert rule.shape(3) == TreeShape(params.tree_depth, params.tree_top_k)  # above it: drawn by the prefill
    assert rule.shape(6) == TreeShape(5, 8, alpha=pytest.approx(1 / 3))  # first column: the tree above
    rule.learn(7, TreeShape(9, 4), levels=9, accepted=9, committed=1)
    assert rule.shape(8) == TreeShape(9, 4, alpha=1.0)  # clamped strictly inside (0, 10) and (3, 14)
    shallow = PeanutShape(params, _grid_session())
    shallow.learn(1, TreeShape(1, 12), levels=1, accepted=0, committed=1)
    assert shallow.shape(2) == TreeShape(1, 15, alpha=0.0)  # depth 1: top-k bounded by the tree's size only
    floored = PeanutShape(PeanutParameters(depth_min=1, tree_depth=3), _grid_session())
    floored.learn(1, TreeShape(2, 12), levels=2, accepted=0, committed=1)
    assert floored.shape(2) == TreeShape(2, 13, alpha=0.0)  # d~ - l_d = 1 clamped to 2: k stays below k_max


@pytest.mark.parametrize(
    "params, message",
    [
        ({"tree_depth": 10}, "tree_depth 10 must lie strictly between depth_min 0 and depth_max 10"),
        ({"tree_top_k": 3}, "tree_top_k 3 must lie strictly between top_k_min 3 and top_k_max 14"),
        ({"beta": 1.5}, "beta must be a number from 0 to 1"),
    ],
)
def test_peanut_parameters_outside_the_bounds_are_refused(tiny, params, message):
    with pytest.raises(SettingsError, match=message):
        run(tiny, "peanut", "sun", seed=0, params=params)


def test_the_drafter_table_keeps_the_accepted_paths_row_where_rows_share_a_token():
    table = torch.zeros(5, 2)
    entries = torch.tensor([1, 1, 2, 3])
    values = torch.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0]])
    priority = torch.tensor([0, 1, 2, -1]) + 4 * torch.tensor([1, 0, 0, 0])  # row 0 is on the path
    _write(table, entries, priority, values)
    assert table[1].tolist() == [1.0, 1.0] and table[2].tolist() == [3.0, 3.0]
    assert table[3].tolist() == [0.0, 0.0]  # negative priority: not written (the spare row takes it)
