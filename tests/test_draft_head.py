"""The EAGLE draft head: its tree drafting sees exactly each node's ancestors, it loads and refuses
malformed weights clearly, the `head` drafter refuses a model without one, and its training losses
learn. (That trees drafted by a head stay exact is proven in test_lossless.py.)"""

import json
import shutil

import pytest
import torch

from specviz.core.errors import ModelUnavailable
from specviz.decoding import run
from specviz.decoding.drafters import Frontier, HeadDrafter
from specviz.models.networks.draft_head import DraftHead
from specviz.models.protocol import UnsupportedMethod, capabilities
from specviz.models.tiny.adapter import ASSETS, TinyModel
from specviz.models.tiny.network import TinyConfig, TinyTextToImage
from specviz.models.tiny.tokenizer import PatchTokenizer
from specviz.models.toys.discrete import LlamaToyModel
from specviz.training.tiny_head import head_losses, target_features


def test_tree_levels_see_the_committed_entries_and_their_own_ancestors_only():
    """A level-2 node's predicted feature equals the head run as a plain chain along its path."""
    toy = LlamaToyModel()
    session = toy.session("toy", 2.0)
    assert "draft_head" in capabilities(session)
    drafter = HeadDrafter(session, session.next_logits.softmax(-1), width=2)
    head_token = torch.tensor([1])
    level1 = drafter.expand(Frontier(head_token, 0, torch.tensor([-1])), 2)
    children = level1.tokens.flatten()
    level2 = drafter.expand(Frontier(children, 1, torch.tensor([0, 0]), level1.state.flatten(0, 1)), 2)
    head, rows = toy.draft_head, session.prefill_features.shape[0]
    for slot, child in enumerate(children.tolist()):
        tokens = torch.tensor([[1, child]]).expand(rows, -1)
        features = torch.cat([session.prefill_features[:, None], level1.state[0, slot][:, None]], dim=1)
        chain = head(tokens, features, torch.arange(2)[None].expand(rows, -1))
        torch.testing.assert_close(level2.state[slot, 0], chain[:, 1], atol=1e-5, rtol=1e-4)


def _tiny_copy(tmp_path, with_head: bool):
    folder = tmp_path / "tiny"
    folder.mkdir()
    for name in ("config.json", "model.safetensors", "codebook.safetensors"):
        shutil.copy(ASSETS / name, folder / name)
    if with_head:
        model = TinyModel.load(folder)
        lm = model.network.lm
        torch.manual_seed(0)
        DraftHead.sized_for(lm.config, lm.get_input_embeddings(), lm.lm_head).save(folder, training={"steps": 0})
    return folder


def test_the_head_drafter_refuses_a_model_without_a_head(tmp_path):
    model = TinyModel.load(_tiny_copy(tmp_path, with_head=False))
    with pytest.raises(UnsupportedMethod, match="head drafter needs draft_head"):
        run(model, "eagle2", "red apple", 0, None, {"drafter": "head"})


def test_a_saved_head_loads_and_drafts_and_a_malformed_one_is_refused(tmp_path):
    folder = _tiny_copy(tmp_path, with_head=True)
    model = TinyModel.load(folder)
    trace = run(model, "eagle2", "red apple", 0, None, {"drafter": "head", "tree_depth": 3, "tree_tokens": 12})
    assert len(trace.tokens) == model.geometry.seq_len and trace.nfe < model.geometry.seq_len
    about = json.loads((folder / "head.json").read_text())
    about["config"]["hidden_size"] = 192  # a valid config, weights of another width
    (folder / "head.json").write_text(json.dumps(about))
    with pytest.raises(ModelUnavailable, match=r"head\.safetensors does not fit"):
        TinyModel.load(folder)


def test_the_head_training_losses_learn_on_a_small_random_tiny():
    torch.manual_seed(0)
    config = TinyConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
    model = TinyModel(TinyTextToImage(config), PatchTokenizer(torch.rand(1024, 27)), torch.device("cpu"))
    lm = model.network.lm
    head = DraftHead.sized_for(lm.config, lm.get_input_embeddings(), lm.lm_head)
    tokens = torch.randint(1024, (2, config.seq_len))
    with torch.no_grad():
        features = target_features(model, torch.randn(2, 384), tokens)
    assert features.shape == (4, config.seq_len, 32)
    optimizer = torch.optim.AdamW(head.parameters(), lr=1e-2)
    history = []
    for _ in range(60):
        feature_loss, token_loss, agreement = head_losses(head, features, tokens.repeat(2, 1), 0.1, None)
        (feature_loss + 0.1 * token_loss).backward()
        optimizer.step()
        optimizer.zero_grad()
        history.append((feature_loss.item(), agreement.item()))
    (first_loss, first_agreement), (last_loss, last_agreement) = history[0], history[-1]
    assert last_loss < 0.5 * first_loss  # measured: 0.48 -> 0.16
    assert first_agreement < 0.05 < 0.15 < last_agreement  # measured: 0.004 -> 0.26
