"""SJD++'s reuse rule and its record. Its exactness on the toys is checked in test_lossless.py from its catalogue
entry, where the third-party port's rule (reused drafts recorded at p_new) is caught."""

import json

import pytest
import torch

from specviz.core.settings import SettingsError
from specviz.decoding import METHODS, run
from specviz.decoding.sjd_plus import reuse
from specviz.trace import Trace
from specviz.viz.narration import iteration_sentence


def _rows(n: int = 6, vocab: int = 7, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """p_new and q rows with some zeros in each, and a draft drawn from each row of q."""
    generator = torch.Generator().manual_seed(seed)
    p = torch.rand(n, vocab, generator=generator) * (torch.rand(n, vocab, generator=generator) > 0.3)
    q = torch.rand(n, vocab, generator=generator) * (torch.rand(n, vocab, generator=generator) > 0.3)
    p[:, 0] += 0.1  # every row has mass
    q[:, 1] += 0.1
    p, q = p / p.sum(1, keepdim=True), q / q.sum(1, keepdim=True)
    return p, q, torch.multinomial(q, 1, generator=generator).squeeze(1)


@pytest.mark.parametrize("tau", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_the_mixture_is_a_distribution_and_agrees_with_the_drafts_test(tau):
    p, q, drafts = _rows()
    keep, mixture = reuse(p, q, drafts, tau)
    torch.testing.assert_close(mixture.sum(1), torch.ones(len(p)))
    assert (mixture >= 0).all()
    confidence = (p.gather(1, drafts[:, None]) / q.gather(1, drafts[:, None])).squeeze(1).clamp(max=1)
    assert keep.tolist() == (confidence > tau).tolist()
    assert (mixture.gather(1, drafts[:, None])[keep] > 0).all()  # a reused draft keeps its mass under q'


def test_a_threshold_of_one_reuses_nothing_and_records_p_new_exactly():
    p, q, drafts = _rows()
    keep, mixture = reuse(p, q, drafts, 1.0)
    assert not keep.any() and torch.equal(mixture, p)  # SJD's redraw and its record, bit for bit


def test_a_one_hot_draft_is_kept_with_its_one_hot_or_redrawn_from_p_new():
    """A one-hot q (a random, repeat-* or forced slot): the draft x passes when p_new(x) > tau, and then is
    the next draft surely (q' one-hot); otherwise it is surely redrawn (q' = p_new)."""
    p, _, _ = _rows()
    drafts = torch.tensor([0, 1, 2, 3, 4, 5])
    q = torch.nn.functional.one_hot(drafts, p.shape[1]).float()
    tau = float(p.gather(1, drafts[:, None]).median())
    keep, mixture = reuse(p, q, drafts, tau)
    assert keep.tolist() == (p.gather(1, drafts[:, None]).squeeze(1) > tau).tolist() and 0 < keep.sum() < len(p)
    torch.testing.assert_close(mixture, torch.where(keep[:, None], q, p))


def test_the_mixture_is_the_law_of_the_next_draft():
    """Draw x ~ q, keep it where it passes, else draw from p_new: the frequencies are q'."""
    p, q, _ = _rows(n=3, seed=4)
    samples, generator = 200_000, torch.Generator().manual_seed(1)
    for row in range(len(p)):
        old = torch.multinomial(q[row], samples, replacement=True, generator=generator)
        fresh = torch.multinomial(p[row], samples, replacement=True, generator=generator)
        keep, mixture = reuse(p[row].expand(samples, -1), q[row].expand(samples, -1), old, 0.5)
        new = torch.where(keep, old, fresh)
        frequencies = torch.bincount(new, minlength=p.shape[1]).float() / samples
        torch.testing.assert_close(frequencies, mixture[0], atol=5e-3, rtol=0)


def test_a_threshold_of_one_is_sjd_token_for_token(tiny):
    plain = run(tiny, "sjd", "sun", seed=3, params={"window": 8})
    reusing_none = run(tiny, "sjd++", "sun", seed=3, params={"window": 8, "reuse_threshold": 1.0})
    assert reusing_none.tokens == plain.tokens and reusing_none.nfe == plain.nfe


@pytest.mark.parametrize("tau", [1.5, float("inf")])
def test_a_threshold_above_one_is_refused_saying_one_is_plain_sjd(tau):
    with pytest.raises(SettingsError, match="1 already reuses no draft, which is plain SJD"):
        METHODS["sjd++"].resolve({"reuse_threshold": tau})


@pytest.mark.parametrize("tau", [-0.1, float("nan")])
def test_a_negative_threshold_is_refused(tau):
    with pytest.raises(SettingsError, match="reuse_threshold must be a number from 0 to 1"):
        METHODS["sjd++"].resolve({"reuse_threshold": tau})


@pytest.fixture(scope="module")
def reusing(tiny) -> Trace:
    return run(tiny, "sjd++", "sun", seed=3, params={"window": 8, "reuse_threshold": 0.1})


def test_the_record_marks_reused_drafts_among_the_kept_ones(reusing, tiny):
    windows = [it for it in reusing.iterations if it.kind == "window"]
    assert all(it.reused is not None and len(it.reused) == len(it.drafts) for it in windows)
    assert all(it.fate[i] == "kept" for it in windows for i, reused in enumerate(it.reused) if reused)
    assert sum(sum(it.reused) for it in windows) > 0
    assert Trace.from_json(reusing.to_json()) == reusing
    plain = run(tiny, "sjd", "sun", seed=3, params={"window": 8})  # a rule that reuses nothing marks nothing
    assert all(it.reused is None for it in plain.iterations if it.kind == "window")


def test_a_trace_without_reuse_marks_still_loads(reusing):
    older = json.loads(reusing.to_json())
    for it in older["iterations"]:
        it.pop("reused", None)
    loaded = Trace.from_json(json.dumps(older))
    assert all(getattr(it, "reused", None) is None for it in loaded.iterations)


def test_a_reuse_mark_on_a_redrawn_draft_is_refused(reusing):
    data = json.loads(reusing.to_json())
    it = next(it for it in data["iterations"] if it["kind"] == "window" and "redrawn" in it["fate"])
    it["reused"][it["fate"].index("redrawn")] = True
    with pytest.raises(Exception, match="reused needs one entry per draft"):
        Trace.from_json(json.dumps(data))


def test_inspect_says_how_many_drafts_were_reused(reusing):
    j, it = next(
        (j, it)
        for j, it in enumerate(reusing.iterations)
        if it.kind == "window"
        and it.rejected_at is not None
        and sum(it.reused) > 0
        and it.accepted + 2 < len(it.drafts)
    )
    after = len(it.drafts) - it.accepted - 1
    assert f"{sum(it.reused)} of the {after} drafts after the rejection reused as drafted" in iteration_sentence(
        reusing, j
    )


def test_a_reused_drafts_cell_says_so_on_hover(reusing):
    from specviz.viz.figures import window_figure

    j, it = next((j, it) for j, it in enumerate(reusing.iterations) if it.kind == "window" and any(it.reused))
    hover = window_figure(reusing, j).data[2].customdata  # the window's bars, one per draft
    said = ["reused as drafted" in text for text in hover]
    assert said == it.reused
