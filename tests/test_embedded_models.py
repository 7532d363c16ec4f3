"""The two embedded text-to-emoji models as shipped: each loads by its name from its own folder with its own
prompts, `tiny` is nearly certain and `tiny-uncertain` is not (what the presets and measurements rely on)."""

from __future__ import annotations

import pytest

from specviz.decoding import run
from specviz.models.registry import get_entry
from specviz.stage.measure import CONFIDENT, uncertainty


@pytest.fixture(scope="module")
def uncertain():
    return get_entry("tiny-uncertain").load()


def test_the_uncertain_model_loads_by_name_with_its_own_prompts(uncertain, tiny):
    entry = get_entry("tiny-uncertain")
    assert entry.offline() is None and uncertain.name == "tiny-uncertain" and tiny.name == "tiny"
    trace = run(uncertain, "ar", "red apple", 0)
    assert trace.model == "tiny-uncertain" and len(trace.tokens) == uncertain.geometry.seq_len
    known, first = entry.known_prompts(), get_entry("tiny").known_prompts()
    assert "red apple" in known and len(known) > len(first)  # four designs' captions, not OpenMoji's alone
    assert uncertain.network.config.hidden_size < tiny.network.config.hidden_size


def test_tiny_is_nearly_certain_and_tiny_uncertain_is_not(tiny, uncertain):
    """Mean entropy per token and the share of positions whose top probability exceeds CONFIDENT, along one
    AR sample at each model's default sampling."""
    certain_entropy, certain_share = uncertainty(tiny, "red apple", 0, tiny.default_sampling)
    entropy, share = uncertainty(uncertain, "red apple", 0, uncertain.default_sampling)
    assert certain_entropy < 0.3 and certain_share > 0.6, (certain_entropy, certain_share, CONFIDENT)
    assert entropy > 3 * certain_entropy and share < certain_share, (entropy, share)
