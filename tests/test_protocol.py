"""The session layer on a synthetic model; the contract on every family's model is in test_contract.py."""

import pytest
import torch
from transformers import DynamicCache

from specviz.models.protocol import IMAGE_CELL, Geometry
from specviz.models.session import CachedSession, PromptRows, tree_structure

END_OF_ROW = 4
# an end-of-row token after every row, as Emu3 and Lumina-mGPT have
GEOMETRY = Geometry(rows=2, cols=2, vocab_size=5, layout=(IMAGE_CELL, IMAGE_CELL, END_OF_ROW) * 2)


class Recorder:
    """A 'model' whose logits are random; it records the masks and positions the session passes."""

    def __init__(self):
        self.calls: list[tuple[torch.Tensor | None, torch.Tensor | None]] = []

    def __call__(self, tokens, cache, mask, positions):
        self.calls.append((mask, positions))
        return torch.randn(tokens.shape[0], tokens.shape[1], 5)


def session(prompt: PromptRows | None = None, rows: int = 2) -> tuple[CachedSession, Recorder]:
    model = Recorder()
    return CachedSession(GEOMETRY, DynamicCache(), prompt or PromptRows(3), torch.randn(rows, 5), model, 3.0), model


def test_layout_slots_are_forced_one_hot_by_position_in_chains_and_trees():
    assert GEOMETRY.cell_of_position() == [0, 1, -1, 2, 3, -1]
    chain, _ = session()
    logits = chain.forward(torch.tensor([0, 1, 4, 2, 3]))  # rows for positions 1..5
    forced = torch.tensor([False, True, False, False, True])
    assert torch.all(logits[forced].argmax(-1) == END_OF_ROW)
    assert torch.all(logits[forced].softmax(-1).max(-1).values == 1.0)
    assert torch.isfinite(logits[~forced]).all()
    # a node at depth d predicts position 1 + d: depth 1 predicts the row end at position 2
    tree, _ = session()
    logits = tree.forward(torch.tensor([0, 1, 2, 3]), parents=[-1, 0, -1, 2])
    assert torch.equal(logits[[1, 3]].argmax(-1), torch.tensor([END_OF_ROW] * 2))
    assert torch.isfinite(logits[[0, 2]]).all()


def test_a_plain_chain_passes_no_mask_and_no_positions():
    plain, model = session()
    plain.forward(torch.tensor([1, 2, 3]))
    assert model.calls == [(None, None)]


def test_left_padded_prompts_hide_the_padding_and_count_positions_from_the_first_real_token():
    prompt = PromptRows.left_padded([3, 1], torch.device("cpu"))
    padded, model = session(prompt)
    padded.forward(torch.tensor([1, 2]))
    padded.commit(2)
    padded.forward(torch.tensor([3, 0]))
    mask, positions = model.calls[-1]
    assert mask.shape == (2, 1, 2, 3 + 2 + 2)
    assert mask[0, 0].tolist() == [[True] * 5 + [True, False], [True] * 7]
    assert mask[1, 0].tolist() == [[False, False, True] + [True] * 2 + [True, False], [False, False] + [True] * 5]
    assert positions.tolist() == [[5, 6], [3, 4]]
    assert PromptRows.left_padded([2, 2], torch.device("cpu")).plain


def test_tree_mask_shows_each_token_its_ancestors_and_positions_count_depth():
    ancestors, depth = tree_structure([-1, 0, 0, 1, -1])
    assert depth.tolist() == [0, 1, 1, 2, 0]
    assert ancestors.int().tolist() == [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 0, 1, 0, 0],
        [1, 1, 0, 1, 0],
        [0, 0, 0, 0, 1],
    ]
    tree, model = session(PromptRows(3))
    tree.forward(torch.tensor([1, 2]))
    tree.commit(1)
    tree.forward(torch.tensor([0, 1, 2, 3, 0]), parents=[-1, 0, 0, 1, -1])
    mask, positions = model.calls[-1]
    assert torch.equal(mask[:, 0, :, 3 + 1 :], ancestors.expand(2, -1, -1))
    assert mask[:, 0, :, : 3 + 1].all()  # the prompt and the committed token
    assert positions.tolist() == [[4, 5, 5, 6, 4]] * 2


@pytest.mark.parametrize(
    ("parents", "message"),
    [
        ([-1, 1], r"parents\[1\] = 1"),
        ([-1, 2, 0], r"parents\[1\] = 2"),
        ([-2, 0], r"parents\[0\] = -2"),
        ([-1], "1 parents for 2"),
    ],
)
def test_malformed_trees_are_refused(parents, message):
    tree, _ = session()
    with pytest.raises(ValueError, match=message):
        tree.forward(torch.tensor([1] * max(2, len(parents))), parents=parents)


def test_commit_takes_a_count_or_a_root_to_node_path_and_nothing_else():
    tree, _ = session()
    logits = tree.forward(torch.tensor([0, 1, 2, 3]), parents=[-1, 0, -1, 2])
    for keep, message in [(3, "not a root-to-node path"), (5, "cannot commit 5 of 4"), ([1], "not a root-to-node")]:
        with pytest.raises(ValueError, match=message):
            tree.commit(keep)
    with pytest.raises(ValueError, match="not a root-to-node path"):
        tree.commit([0, 3])
    with pytest.raises(ValueError, match="cannot commit token 4"):
        tree.commit([4])
    tree.commit(2)  # the first two tokens are a path here
    assert tree.position == 2 and torch.equal(tree.next_logits, logits[1])
    chain, _ = session()
    logits = chain.forward(torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="not a root-to-node path"):
        chain.commit([0, 2])
    chain.commit(torch.tensor([0, 1]))
    assert chain.position == 2 and torch.equal(chain.next_logits, logits[1])


def test_the_cache_goes_by_the_keyword_the_installed_transformers_takes():
    """transformers 5.24 renamed forward's `past_key_values` to `cache` (the old name is removed in 5.40);
    the lent GPU had 5.17. Each module gets the name its own forward declares."""
    from specviz.models.session import cache_keyword

    class Before(torch.nn.Module):
        def forward(self, input_ids, past_key_values=None, use_cache=False):
            return past_key_values

    class After(torch.nn.Module):
        def forward(self, input_ids, cache=None, use_cache=False, **kwargs):
            return cache

    marker = object()
    assert cache_keyword(Before(), marker) == {"past_key_values": marker}
    assert cache_keyword(After(), marker) == {"cache": marker}
    assert Before()(None, **cache_keyword(Before(), marker)) is After()(None, **cache_keyword(After(), marker))
