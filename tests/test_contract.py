"""The protocol contract, checked once for every family's test model (model_zoo.py).

Tolerances are for float32 on the CPU: a pass of n tokens, a tree pass and n single-token passes
differ only in summation order (about 1e-6 on raw logits), which guidance multiplies by up to
2 * scale + 1.
"""

import pytest
import torch
from model_zoo import FAMILIES, Family, emu3, valid_tokens

from specviz.models.protocol import IMAGE_CELL, ImageModel, Session
from specviz.models.reference import uncached_logits

ATOL = 1e-4  # raw logits of the same positions by passes of different shapes, guidance combined
# a draft tree of 12 tokens: two children of the committed prefix (0 and 6), depths 0-4
PARENTS = [-1, 0, 0, 1, 1, 2, -1, 6, 3, 8, 4, 6]
COMMITTED = 3  # committed tokens before the tree; in Emu3 and Lumina-mGPT position 4 is a row end


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request) -> Family:
    return FAMILIES[request.param]


@pytest.fixture(scope="module")
def model(family, request) -> ImageModel:
    if family.name == "tiny":
        return request.getfixturevalue("tiny")  # the shipped model, loaded once per run
    return family.build()


def scales(family: Family) -> list[float]:
    return [1.0, family.guidance_scale]


def committed_session(family: Family, model: ImageModel, scale: float, count: int = COMMITTED) -> Session:
    session = model.session(family.prompt, scale)
    session.forward(valid_tokens(model, count, seed=1))
    session.commit(count)
    return session


def root_to_node(parents: list[int], node: int) -> list[int]:
    path = [node]
    while parents[path[0]] >= 0:
        path.insert(0, parents[path[0]])
    return path


def tree_tokens(model: ImageModel, parents: list[int], start: int, seed: int = 7) -> torch.Tensor:
    """A token per node, valid at its position `start + depth` (the forced token at layout slots)."""
    depths = [len(root_to_node(parents, node)) - 1 for node in range(len(parents))]
    drawn = [valid_tokens(model, max(depths) + 1, seed=seed + node, start=start) for node in range(len(parents))]
    return torch.stack([drawn[node][depth] for node, depth in enumerate(depths)])


# ---- chains ------------------------------------------------------------------------------------


def test_implements_the_protocol(family, model):
    assert isinstance(model, ImageModel)
    assert model.reference_generate is None or callable(model.reference_generate)
    session = model.session(family.prompt, family.guidance_scale)
    assert isinstance(session, Session)
    assert session.position == 0 and session.nfe == 1
    assert session.next_logits.shape == (model.geometry.vocab_size,)
    vectors = session.token_vectors
    assert vectors is None or (vectors.dim() == 2 and len(vectors) == model.geometry.vocab_size)


def test_one_forward_of_n_tokens_equals_n_single_forwards(family, model):
    tokens = valid_tokens(model, 12)
    window = model.session(family.prompt, family.guidance_scale)
    together = window.forward(tokens)
    single = model.session(family.prompt, family.guidance_scale)
    one_by_one = []
    for token in tokens:
        one_by_one.append(single.forward(token.view(1))[0])
        single.commit(1)
    torch.testing.assert_close(together, torch.stack(one_by_one), atol=ATOL, rtol=0)
    assert window.nfe == 2 and single.nfe == 13


def test_rollback_leaves_the_state_of_never_having_appended(family, model):
    sequence = valid_tokens(model, 8, seed=5)
    drafts = sequence[3:7]
    session = committed_session(family, model, family.guidance_scale)
    first = session.forward(drafts).clone()
    session.commit(0)
    session.forward(valid_tokens(model, 2, seed=9, start=COMMITTED))  # appended, then dropped by the next forward
    assert torch.equal(session.forward(drafts), first)
    session.commit(2)
    assert session.position == COMMITTED + 2 and torch.equal(session.next_logits, first[1])

    straight = committed_session(family, model, family.guidance_scale)
    straight.forward(drafts)
    straight.commit(2)
    assert torch.equal(session.forward(sequence[5:]), straight.forward(sequence[5:]))


def test_layout_slots_are_one_hot_and_never_drawn_elsewhere(family, model):
    geometry = model.geometry
    tokens = valid_tokens(model, 12)
    session = model.session(family.prompt, family.guidance_scale)
    logits = torch.cat([session.next_logits[None], session.forward(tokens)])  # positions 0..12
    layout = torch.tensor(geometry.layout[: len(logits)])
    forced = layout != IMAGE_CELL
    assert torch.equal(logits[forced].argmax(-1), layout[forced])
    assert torch.all(logits[forced].softmax(-1).max(-1).values == 1.0)
    codes = geometry.vocab_size - len({entry for entry in geometry.layout if entry != IMAGE_CELL})
    assert torch.isfinite(logits[~forced, :codes]).all()
    assert torch.all(logits[~forced, codes:] == float("-inf"))


@pytest.mark.parametrize("guided", [False, True])
def test_logits_equal_an_uncached_full_forward_with_guidance_rows_combined(family, model, guided):
    scale = family.guidance_scale if guided else 1.0
    tokens = valid_tokens(model, 7)
    session = model.session(family.prompt, scale)
    got = torch.cat([session.next_logits[None], session.forward(tokens)])
    raw = family.uncached(model, family.prompt, scale, tokens)
    assert raw.shape[0] == (2 if guided else 1)
    if guided:  # the unconditional row differs, so this checks the combination
        assert not torch.allclose(raw[0], raw[1], atol=1e-2)
    image = torch.tensor(model.geometry.layout[: len(got)]) == IMAGE_CELL
    expected = family.combine(raw, scale)
    torch.testing.assert_close(got[image], expected[image], atol=ATOL, rtol=0)


# ---- draft trees -------------------------------------------------------------------------------


@pytest.mark.parametrize("guided", [False, True])
def test_tree_pass_equals_a_forward_of_every_root_to_node_path(family, model, guided):
    scale = family.guidance_scale if guided else 1.0
    tokens = tree_tokens(model, PARENTS, COMMITTED)
    tree = committed_session(family, model, scale)
    logits = tree.forward(tokens, parents=PARENTS)
    assert logits.shape == (len(PARENTS), model.geometry.vocab_size) and tree.nfe == 3
    chain = committed_session(family, model, scale)
    for node in range(len(PARENTS)):
        path = root_to_node(PARENTS, node)
        expected = chain.forward(tokens[path])[-1]  # also forced one-hot where position COMMITTED + depth + 1 is a slot
        torch.testing.assert_close(logits[node], expected, atol=ATOL, rtol=0, msg=f"node {node}, path {path}")


@pytest.mark.parametrize("node", [9, 11, 2])
def test_commit_of_a_tree_path_equals_having_appended_it(family, model, node):
    path = root_to_node(PARENTS, node)
    tokens = tree_tokens(model, PARENTS, COMMITTED)
    tree = committed_session(family, model, family.guidance_scale)
    logits = tree.forward(tokens, parents=PARENTS)
    tree.commit(path)
    assert tree.position == COMMITTED + len(path) and torch.equal(tree.next_logits, logits[node])

    chain = committed_session(family, model, family.guidance_scale)
    chain.forward(tokens[path])
    chain.commit(len(path))
    torch.testing.assert_close(tree.next_logits, chain.next_logits, atol=ATOL, rtol=0)
    after = valid_tokens(model, 3, seed=11, start=tree.position)
    torch.testing.assert_close(tree.forward(after), chain.forward(after), atol=ATOL, rtol=0)
    # and trees go on from there; two roots with the same token see the same context
    more = valid_tokens(model, 2, seed=13, start=tree.position)
    again = tree.forward(torch.cat([more, more[:1]]), parents=[-1, 0, -1])
    torch.testing.assert_close(again[:2], chain.forward(more), atol=ATOL, rtol=0)
    torch.testing.assert_close(again[2], again[0], atol=ATOL, rtol=0)


def test_eager_attention_takes_the_same_masks():
    """SDPA takes the session's boolean mask, eager attention an additive one: same logits (Emu3:
    left-padded guidance rows and a tree)."""
    family = FAMILIES["emu3"]
    sdpa, eager = emu3(), emu3(attention="eager")
    assert eager.network.model.text_model.config._attn_implementation == "eager"
    tokens = tree_tokens(sdpa, PARENTS, COMMITTED)
    got = [committed_session(family, model, 3.0).forward(tokens, parents=PARENTS) for model in (sdpa, eager)]
    torch.testing.assert_close(got[0], got[1], atol=ATOL, rtol=0)


# ---- passes out of raster order (ZipAR) ----------------------------------------------------------


@pytest.mark.parametrize("guided", [False, True])
def test_passes_out_of_raster_order_see_what_a_raster_chain_sees(family, model, guided):
    """Positions 0-2 fed first, a stand-in at 4, then 3 and the real 4 (which replaces the stand-in)
    in one pass, then 5 and 6: every row of logits equals the raster chain's, so a token sees the
    tokens at earlier positions (this pass's included), never later ones, never a replaced stand-in."""
    scale = family.guidance_scale if guided else 1.0
    tokens = valid_tokens(model, 7)
    stand_in = valid_tokens(model, 7, seed=5)[4:5]
    chain = model.session(family.prompt, scale).forward(tokens)
    session = model.session(family.prompt, scale)
    first = session.forward_at(tokens[:3], [0, 1, 2])
    session.forward_at(stand_in, [4])
    middle = session.forward_at(tokens[3:5], [3, 4])
    last = session.forward_at(tokens[[6, 5]], [6, 5])
    assert session.nfe == 5 and session.tokens_fed == 8
    got = torch.cat([first, middle, last[[1, 0]]])
    torch.testing.assert_close(got, chain, atol=ATOL, rtol=0)
    with pytest.raises(ValueError, match="out of raster order"):
        session.forward(tokens[:1])


def test_passes_out_of_raster_order_refuse_repeated_and_outside_positions(tiny):
    session = tiny.session("rocket", 1.0)
    tokens = torch.zeros(2, dtype=torch.long)
    with pytest.raises(ValueError, match="distinct positions"):
        session.forward_at(tokens, [3, 3])
    with pytest.raises(ValueError, match="lie in the sequence"):
        session.forward_at(tokens, [0, tiny.geometry.seq_len])


# ---- passes of drafts (PJD): an explicit mask among the pass's tokens, and only what is kept stays ----------


@pytest.mark.parametrize("guided", [False, True])
def test_a_pass_of_drafts_sees_what_its_mask_says_and_keeps_only_what_it_is_told(family, model, guided):
    """Two chains of drafts at the same positions (3-5 and 3-4) in one pass, each seeing only itself: each
    row equals the uncached forward of its own sequence. Keeping the second chain's first token (not the
    first token fed) gathers it into place: the next pass sees it, not the dropped ones. A kept token at a
    held position replaces it."""
    scale = family.guidance_scale if guided else 1.0
    a, b, c = (valid_tokens(model, 9, seed=seed) for seed in (3, 5, 7))
    image = torch.tensor(model.geometry.layout[1:]) == IMAGE_CELL  # the positions a row of logits predicts

    def expected(sequence: torch.Tensor, positions: list[int]) -> torch.Tensor:
        return uncached_logits(model, family.prompt, scale, sequence)[[p + 1 for p in positions]]

    def check(got: torch.Tensor, sequence: torch.Tensor, positions: list[int]) -> None:
        shown = image[positions]
        torch.testing.assert_close(got[shown], expected(sequence, positions)[shown], atol=ATOL, rtol=0)

    session = model.session(family.prompt, scale)
    session.forward_at(a[:3], [0, 1, 2])
    chains = torch.zeros(5, 5, dtype=torch.bool)
    chains[:3, :3] = chains[3:, 3:] = True
    logits = session.forward_at(torch.cat([a[3:6], b[3:5]]), [3, 4, 5, 3, 4], chains.tril())
    check(logits[:3], a[:6], [3, 4, 5])
    check(logits[3:], torch.cat([a[:3], b[3:5]]), [3, 4])
    session.keep([3])  # b's token at 3 stays; a's 3-5 and b's 4 leave
    kept = torch.cat([a[:3], b[3:4]])
    logits = session.forward_at(c[4:6], [4, 5], torch.ones(2, 2, dtype=torch.bool).tril())
    check(logits, torch.cat([kept, c[4:6]]), [4, 5])
    session.keep([0, 1])
    session.forward_at(a[6:7], [6], torch.ones(1, 1, dtype=torch.bool))
    session.keep([0])
    session.forward_at(b[6:7], [6], torch.ones(1, 1, dtype=torch.bool))
    session.keep([0])  # b's token at 6 replaces a's
    logits = session.forward_at(c[7:8], [7], torch.ones(1, 1, dtype=torch.bool))
    check(logits, torch.cat([kept, c[4:6], b[6:7], c[7:8]]), [7])
    assert session.nfe == 7 and session.tokens_fed == 13  # the prefill and six passes


def test_a_pass_of_drafts_refuses_a_mask_of_another_shape_and_two_kept_tokens_at_one_position(tiny):
    session = tiny.session("rocket", 1.0)
    tokens = torch.zeros(2, dtype=torch.long)
    with pytest.raises(ValueError, match=r"sees must be an \(2, 2\) mask"):
        session.forward_at(tokens, [0, 0], torch.zeros(2, 3, dtype=torch.bool))
    session.forward_at(tokens, [0, 0], torch.zeros(2, 2, dtype=torch.bool))  # each token sees itself regardless
    with pytest.raises(ValueError, match="distinct positions"):
        session.keep([0, 1])
    with pytest.raises(ValueError, match="cannot keep"):
        session.keep([2])
