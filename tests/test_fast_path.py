"""The fast path (`specviz.models.fast.fixed_passes`): a static cache and passes padded to fixed widths give
every method the plain path's distributions, pass by pass, on `tiny` and on every family's random-weight
test model (tests/model_zoo.py: guidance rows of left-padded prompts, layout slots, trees, ZipAR's rows).

On the CPU the padded passes run without CUDA graphs; tests/test_cuda.py runs the same checks with them."""

from __future__ import annotations

import inspect

import pytest
import torch
from model_zoo import FAMILIES, Family, janus
from test_unchanged import random_tiny

from specviz.core.errors import ModelUnavailable, UnsupportedMethod
from specviz.decoding import METHODS, run
from specviz.measure.syncs import hidden_reads
from specviz.models.fast.fixed_passes import pass_width, widest_pass
from specviz.models.fast.shadow import ShadowedModel, ShadowedSession
from specviz.models.registry import MODELS, load_model
from specviz.models.tiny.adapter import TinyModel

DISCRETE = [name for name, method in METHODS.items() if method.iterate is not None]
# float rounding apart: the padded passes attend over the whole static cache and reduce in another order
# (below 1e-6 here, 6e-6 on the shipped tiny; a pass that sees a slot it should not: about 0.9)
ROUNDING = 1e-4
# the families' test models: largest 5e-6 (Janus-Pro's widened weights), most below 2e-6
FAMILY_ROUNDING = 1e-5


def fast_twin(model: TinyModel) -> TinyModel:
    """The same network and head on the fast path."""
    return TinyModel(
        model.network, model.tokenizer, model.device, model.default_sampling, model.draft_head, fast_path=True
    )


@pytest.fixture(scope="module")
def pair() -> tuple[TinyModel, TinyModel]:
    plain = random_tiny()
    return plain, fast_twin(plain)


def test_passes_are_padded_to_powers_of_two_up_to_the_sequence_or_any_window():
    assert [pass_width(count) for count in (1, 2, 3, 5, 8, 9, 17, 64, 65, 256)] == [1, 2, 4, 8, 8, 16, 32, 64, 128, 256]
    assert [widest_pass(seq_len) for seq_len in (16, 256, 2352)] == [256, 256, 4096]  # a window of 128 and its head


def test_every_method_on_the_fast_path_sees_the_plain_paths_distributions(pair):
    """Every pass of every method (chains, windows, trees with their kept paths gathered, ZipAR's passes
    out of raster order, rollbacks) runs on both paths in lock-step; their next-token distributions agree
    to float rounding. One fast model serves every run, so its pooled caches are reused throughout."""
    plain, _ = pair
    fast = fast_twin(plain)
    for method in DISCRETE:
        shadowed = ShadowedModel(fast, plain)
        trace = run(shadowed, method, "red apple", 0)
        passes = sum(session.passes for session in shadowed.sessions)
        assert len(trace.tokens) == plain.geometry.seq_len and passes >= trace.nfe - 1, method
        assert shadowed.largest_gap < ROUNDING, (method, shadowed.largest_gap)
    assert fast.static.made == 1  # each run's session took the one cache back in turn


def test_the_lock_step_comparison_sees_a_different_distribution(pair):
    """The check can fail: two sessions at different guidance differ at the first token."""
    plain, _ = pair
    shadowed = ShadowedSession(plain.session("red apple", 1.5), plain.session("red apple", 3.0))
    assert shadowed.largest_gap > 0.01


def test_padding_is_given_back_after_each_pass(pair):
    _, fast = pair
    session = fast.session("red apple", 1.5)
    cache = session._cache
    written = int(cache.layers[0].cumulative_length)
    session.forward(torch.tensor([1, 2, 3]))  # padded to 4
    assert int(cache.layers[0].cumulative_length) == written + 3
    session.commit(2)
    assert int(cache.layers[0].cumulative_length) == written + 2


def test_sessions_alive_at_once_hold_their_own_caches(pair):
    _, fast = pair
    first, second = fast.session("red apple", 1.5), fast.session("a cat", 1.5)
    assert first._cache is not second._cache
    first.forward(torch.tensor([4, 5]))
    first.commit(2)
    logits = second.forward(torch.tensor([4]))  # the first session's writes are not in the second's cache
    alone = fast.session("a cat", 1.5)
    del first, second
    torch.testing.assert_close(alone.forward(torch.tensor([4])), logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", [name for name in FAMILIES if name != "tiny"])
def test_every_method_on_each_familys_fast_path_sees_the_plain_paths_distributions(family):
    """The same lock-step check on each family's test model at its release's sampling (guidance on): two
    batch rows of left-padded prompts (Emu3, Anole, Lumina-mGPT) or hidden caption padding (LlamaGen t2i)
    moved onto a static cache, layout slots forced, trees gathered, ZipAR's rows out of raster order."""
    spec: Family = FAMILIES[family]
    plain, fast = spec.build(), spec.build(fast_path=True)
    gaps = {}
    for method in DISCRETE:
        shadowed = ShadowedModel(fast, plain)
        trace = run(shadowed, method, spec.prompt, 0)
        passes = sum(session.passes for session in shadowed.sessions)
        assert len(trace.tokens) == plain.geometry.seq_len and passes >= trace.nfe - 1, method
        gaps[method] = shadowed.largest_gap
    assert max(gaps.values()) < FAMILY_ROUNDING, gaps
    assert fast.static.made == 1 and plain.static is None  # every run's session took the one cache back
    # nothing in a window's or a tree's pass reads the device back, which a CUDA graph's capture would refuse
    assert [hidden_reads(fast, method, {}, prompt=spec.prompt) for method in ("sjd", "eagle2")] == [0, 0]


def test_every_model_with_discrete_tokens_loads_on_its_fast_path():
    """The registry offers the fast path for every discrete family, each loader takes it, and a loaded model
    (Janus-Pro's test model from a folder, as a user's weights load) runs its sessions on it."""
    for name, entry in MODELS.items():
        assert entry.fast_path == (not entry.continuous), name
        assert entry.continuous or "fast_path" in inspect.signature(entry.load).parameters, name


def test_a_family_loaded_on_the_fast_path_runs_on_it(tmp_path):
    saved = janus()
    saved.network.save_pretrained(tmp_path)
    saved.processor.save_pretrained(tmp_path)
    loaded = load_model("janus-pro", str(tmp_path), fast_path=True)
    trace = run(loaded, "sjd", "a red apple", 0)
    assert len(trace.tokens) == loaded.geometry.seq_len and loaded.static.made == 1


def test_a_model_without_a_fast_path_says_which_have_one():
    with pytest.raises(ModelUnavailable, match=r"tiny-continuous has no fast path .*tiny, tiny-uncertain"):
        load_model("tiny-continuous", fast_path=True)


def test_a_tree_wider_than_the_widest_pass_is_refused_before_the_run(pair):
    _, fast = pair
    with pytest.raises(UnsupportedMethod, match=r"up to 256 tokens and a tree of 300 drafts needs 301: choose at most"):
        run(fast, "eagle2", "red apple", 0, params={"tree_tokens": 300})


def test_the_fast_paths_passes_make_no_hidden_host_read(pair):
    """Padding, the cache's rewind and the widths' bookkeeping happen on the device (tests/test_cuda.py
    counts the same on a GPU, where a CPU-only scalar read would also show)."""
    _, fast = pair
    assert {method: hidden_reads(fast, method, {}) for method in DISCRETE if method != "ar"} == dict.fromkeys(
        [method for method in DISCRETE if method != "ar"], 0
    )
