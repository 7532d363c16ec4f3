"""The model protocol's contract, on the embedded model and on a synthetic step function."""

import pytest
import torch
from transformers import DynamicCache

from specviz.models.protocol import IMAGE_CELL, Geometry, ImageModel, Session
from specviz.models.session import CachedSession

# float32 on CPU: a window pass and single-token passes differ only by summation order
MULTI_TOKEN_ATOL = 1e-4


def test_tiny_implements_the_protocol(tiny):
    assert isinstance(tiny, ImageModel)
    session = tiny.session("red apple", 3.0)
    assert isinstance(session, Session)
    assert session.geometry.seq_len == 256 and session.geometry.vocab_size == 1024
    assert session.nfe == 1 and session.length == 0


def test_one_forward_of_n_tokens_equals_n_single_forwards(tiny):
    tokens = torch.randint(0, 1024, (12,), generator=torch.Generator().manual_seed(1))
    window = tiny.session("red apple", 3.0)
    together = window.forward(tokens)
    single = tiny.session("red apple", 3.0)
    one_by_one = []
    for token in tokens:
        one_by_one.append(single.forward(token.view(1))[0])
        single.commit(1)
    torch.testing.assert_close(together, torch.stack(one_by_one), atol=MULTI_TOKEN_ATOL, rtol=0)
    assert window.nfe == 2 and single.nfe == 13


def test_rollback_then_forward_reproduces_logits_exactly(tiny):
    session = tiny.session("rocket", 2.0)
    prefix, drafts = torch.tensor([5, 9, 700]), torch.tensor([1, 2, 3, 4])
    session.forward(prefix)
    session.commit(3)
    first = session.forward(drafts).clone()
    session.commit(0)  # rollback: the drafts leave no trace in the cache
    session.forward(torch.tensor([77, 78]))
    again = session.forward(drafts)
    assert torch.equal(first, again)
    session.commit(2)
    assert session.length == 5
    assert torch.equal(session.next_logits, first[1])


def test_commit_beyond_appended_tokens_is_refused(tiny):
    session = tiny.session("sun", 1.0)
    session.forward(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="cannot commit 3 of 2"):
        session.commit(3)


def _direct_logits(tiny, prompt, tokens, conditional=True):
    """Next-token logits of every generated position by one uncached pass over the whole sequence."""
    net = tiny.network
    text = None
    if conditional:
        from specviz.models.tiny.text import shared_text_encoder

        text = shared_text_encoder()([prompt])
    embeds = torch.cat([net.prefix(text, 1), net.embed_tokens(tokens[None])], dim=1)
    with torch.no_grad():
        logits = net.lm(inputs_embeds=embeds).logits[0]
    return logits[net.config.prefix_len - 1 :]


def test_guidance_scale_one_is_the_conditional_model(tiny):
    tokens = torch.tensor([3, 14, 15, 92, 65])
    session = tiny.session("smiling cat", 1.0)
    cached = torch.cat([session.next_logits[None], session.forward(tokens)])
    torch.testing.assert_close(cached, _direct_logits(tiny, "smiling cat", tokens), atol=MULTI_TOKEN_ATOL, rtol=0)


def test_guidance_combines_conditional_and_unconditional_logits(tiny):
    tokens = torch.tensor([3, 14, 15])
    scale = 4.0
    guided = tiny.session("smiling cat", scale)
    got = torch.cat([guided.next_logits[None], guided.forward(tokens)])
    cond = _direct_logits(tiny, "smiling cat", tokens)
    uncond = _direct_logits(tiny, "smiling cat", tokens, conditional=False)
    torch.testing.assert_close(got, uncond + scale * (cond - uncond), atol=1e-3, rtol=0)


def test_layout_slots_are_forced_one_hot():
    """An end-of-row token after every row, as Emu3 and Lumina-mGPT have, whatever the model says."""
    end_of_row = 4
    layout = []
    for _ in range(2):
        layout += [IMAGE_CELL, IMAGE_CELL, end_of_row]
    geometry = Geometry(rows=2, cols=2, vocab_size=5, layout=tuple(layout))
    assert geometry.cell_of_position() == [0, 1, -1, 2, 3, -1]

    def step(tokens, cache):
        return torch.randn(tokens.shape[0], tokens.shape[1], 5)

    session = CachedSession(geometry, DynamicCache(), torch.randn(2, 5), step, 3.0, rows=2)
    logits = session.forward(torch.tensor([0, 1, 4, 2, 3]))  # rows for positions 1..5
    forced = torch.tensor([False, True, False, False, True])
    assert torch.all(logits[forced].argmax(-1) == end_of_row)
    assert torch.all(logits[forced].softmax(-1).max(-1).values == 1.0)
    assert torch.isfinite(logits[~forced]).all()
