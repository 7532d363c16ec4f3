"""The decoding engine v2: every draft's fate in the trace, the refined draft, resets in a stall,
version 1 traces, and the host syncs of a pass (one for a window, two for a tree, none between a tree's
pass and its record)."""

from pathlib import Path

import pytest
import torch

from specviz.core.settings import SamplingSettings
from specviz.decoding import run
from specviz.decoding.window import RESIDUAL_TOP
from specviz.trace import TRACE_VERSION, Trace

DATA = Path(__file__).parent / "data"


def _fates_match_the_next_window(trace: Trace) -> int:
    """Check every kept/redrawn fate against the token the next window holds there; count kept."""
    kept = 0
    for it, following in zip(trace.iterations[1:], trace.iterations[2:], strict=False):
        if it.kind != "window" or it.rejected_at is None:
            continue
        for offset in range(it.accepted + 1, len(it.drafts)):
            position = it.start + offset
            carried = following.drafts[position - following.start]
            assert it.fate[offset] == ("kept" if carried == it.drafts[offset] else "redrawn")
            kept += it.fate[offset] == "kept"
    return kept


def _residual_tops_are_the_true_tops(model, trace: Trace, sampling: SamplingSettings) -> int:
    """Check each rejected window's `residual_top` against the target computed afresh: the whole final
    sequence in one pass of a new session gives the target at every position (a rejected position's
    prefix is committed, so its p_new is the target given the final tokens before it). The record must
    hold the RESIDUAL_TOP tokens most likely under the target or the draft, most likely first, each with
    its own probabilities: no token left out, the rejected draft included, is more likely than the last
    one kept. Returns the windows checked."""
    session = model.session(trace.prompt, sampling.guidance_scale)
    tokens = torch.tensor(trace.tokens)
    target = sampling.probabilities(torch.cat([session.next_logits[None], session.forward(tokens[:-1])]))
    checked = 0
    for it in trace.iterations:
        if it.kind != "window" or it.rejected_at is None:
            continue
        p = target[it.start + it.rejected_at]
        kept = [token for token, _, _ in it.residual_top]
        likeliest = [max(old, new) for _, old, new in it.residual_top]
        assert len(set(kept)) == len(kept) == RESIDUAL_TOP and likeliest == sorted(likeliest, reverse=True)
        assert [new for _, _, new in it.residual_top] == pytest.approx(p[kept].tolist(), abs=1e-4)
        left_out = torch.ones_like(p, dtype=torch.bool)
        left_out[kept] = False
        assert p[left_out].max().item() <= likeliest[-1] + 1e-4
        draft, draft_p = it.drafts[it.rejected_at], it.p_old[it.rejected_at]
        if draft in kept:
            assert it.residual_top[kept.index(draft)][1] == pytest.approx(draft_p)
        else:
            assert draft_p <= likeliest[-1]
        checked += 1
    return checked


def test_scd_mc_trace_tells_kept_from_redrawn(tiny):
    trace = run(tiny, "scd-mc", "slice of pizza", seed=1, params={"window": 16})
    assert _fates_match_the_next_window(trace) > 0
    windows = [it for it in trace.iterations if it.kind == "window"]
    assert {"accepted", "rejected", "kept", "redrawn"} <= {f for it in windows for f in it.fate}
    # the coupling's uniforms are recorded after the rejection too; TV in [0, 1] for every draft
    rejected = next(it for it in windows if it.rejected_at is not None and it.rejected_at < len(it.drafts) - 1)
    assert all(u is not None for u in rejected.uniform)
    assert all(0.0 <= tv <= 1.0 for it in windows for tv in it.tv)
    assert Trace.from_json(trace.to_json()) == trace


def test_sjd_at_a_low_temperature_counts_a_redraw_to_the_same_token_as_kept(tiny):
    cold = SamplingSettings(temperature=0.3, guidance_scale=1.5)
    trace = run(tiny, "sjd", "red apple", seed=0, sampling=cold, params={"window": 16})
    kept = _fates_match_the_next_window(trace)
    redrawn = sum(it.changed for it in trace.iterations)
    assert kept > 0 and redrawn > 0  # an independent redraw that repeats the token is kept, not redrawn
    # SJD's later drafts were redrawn, not decided by a uniform: none is recorded for them
    rejected = [it for it in trace.iterations if it.kind == "window" and it.rejected_at is not None]
    assert all(u is None for it in rejected for u in it.uniform[it.accepted + 1 :])
    assert _residual_tops_are_the_true_tops(tiny, trace, cold) == len(rejected) > 0


def test_the_refined_draft_comes_from_the_row_after_the_window(tiny):
    trace = run(tiny, "sjd", "rocket", seed=2, params={"window": 4})
    windows = [it for it in trace.iterations if it.kind == "window"]
    refined = [it for it in windows if "refined" in it.new_init]
    assert refined, "a rejected window hands the row after it to the next window"
    for it in refined:
        assert it.new_init[0] == "refined" and it.new_source[0] == -1
    plain = run(tiny, "sjd", "rocket", seed=2, params={"window": 4, "refine": False})
    plain_windows = [it for it in plain.iterations if it.kind == "window"]
    assert all("refined" not in it.new_init for it in plain_windows)
    assert {"random"} == {origin for it in plain_windows for origin in it.new_init}


def test_a_reset_in_a_stall_discards_the_drafts_after_the_rejection(tiny):
    params = {"window": 8, "init": "repeat-left", "reset_in_stall": 2}
    trace = run(tiny, "scd-mc", "slice of pizza", seed=3, params=params)
    assert len(trace.tokens) == 256
    windows = [it for it in trace.iterations if it.kind == "window"]
    reset = [index for index, it in enumerate(windows) if "reset" in it.fate]
    assert reset, "this run stalls, so the option acts"
    for index in reset:  # only after two passes in a row accepted nothing, this one included
        assert windows[index].accepted == 0 and windows[index - 1].accepted == 0
        assert set(windows[index].fate[1:]) == {"reset"}
        assert windows[index + 1].new_init[0] == "repeat-left"  # the slots were initialised afresh


@pytest.mark.parametrize("init", ["repeat-left", "sample-above"])
def test_new_drafts_record_their_source_cell(tiny, init):
    trace = run(tiny, "sjd", "cat face", seed=1, params={"window": 20, "init": init, "refine": False})
    first_window = trace.iterations[1]
    assert first_window.new_init == [init] * 20
    # position 1's left neighbour is position 0; position 16 (row 1, column 0) has none to the left
    # and takes the one above, position 0
    assert first_window.new_source[0] == 0 and first_window.new_source[15] == 0
    if init == "repeat-left":
        assert first_window.new_source[1] == 1  # position 2 copies position 1, itself a new slot
        assert first_window.drafts[:16] == [trace.tokens[0]] * 16  # a row of copies of the first token


def test_a_version_1_trace_loads_as_version_3():
    trace = Trace.load(DATA / "trace-v1-scd-mc.json")
    assert trace.version == TRACE_VERSION and trace.method == "scd-mc" and trace.nfe == 137 and trace.kind == "window"
    assert _fates_match_the_next_window(trace) > 0
    windows = [it for it in trace.iterations if it.kind == "window"]
    assert all(len(it.fate) == len(it.drafts) and it.tv == [None] * len(it.drafts) for it in windows)
    assert {origin for it in windows for origin in it.new_init} == {"unknown"}
    assert Trace.from_json(trace.to_json()) == trace


HOST_READS = ("tolist", "item", "numpy", "cpu", "nonzero", "__int__", "__float__", "__bool__", "__index__")


def _host_reads_of_passes(tiny, method: str, settings: dict, monkeypatch, passes: int = 5) -> list[str]:
    """The host reads of `passes` passes of `method` after its first record."""
    from specviz.decoding.registry import get_method

    spec = get_method(method)
    params = spec.resolve(settings)
    session = tiny.session("rocket", 1.5)
    spec.prepare(session, params)
    steps = spec.iterate(session, tiny.default_sampling, torch.Generator().manual_seed(0), params)
    next(steps)  # the first token, drawn from the prefill (and a window's first drafts)
    reads = []
    for name in HOST_READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            reads.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    with torch.inference_mode():
        for _ in range(passes):
            next(steps)
    monkeypatch.undo()
    return reads


@pytest.mark.parametrize("method", ["sjd", "scd-mc", "scd-gs", "jacobi", "lantern", "gsd", "sjd-pac"])
def test_one_host_read_per_window_pass(tiny, method, monkeypatch):
    """On a GPU every read of a tensor's value on the host is a sync: a pass makes exactly one."""
    assert _host_reads_of_passes(tiny, method, {"window": 8}, monkeypatch) == ["tolist"] * 5


def _hidden_reads_of_passes(model, method: str, settings: dict, passes: int = 3) -> int:
    from specviz.measure.syncs import hidden_reads

    return hidden_reads(model, method, settings, passes)


@pytest.mark.parametrize(
    "method, settings",
    [
        *((method, {"window": 8}) for method in ("jacobi", "sjd", "scd-mc", "scd-gs", "lantern", "gsd", "sjd-pac")),
        *((method, {"tree_tokens": 12}) for method in ("eagle2", "peanut", "peanut-lantern")),
        ("lantern++", {}),
        ("zipar", {}),
    ],
)
def test_no_hidden_host_reads_in_window_and_tree_passes(tiny, method, settings):
    """On a GPU each `aten::item` is a device sync: a window or tree pass reads only its record, in one copy."""
    assert _hidden_reads_of_passes(tiny, method, settings) == 0


def test_ar_reads_each_token_once_for_its_record(tiny, monkeypatch):
    assert _hidden_reads_of_passes(tiny, "ar", {}) == 0
    assert _host_reads_of_passes(tiny, "ar", {}, monkeypatch, passes=3) == ["tolist"] * 3


def test_the_hidden_read_count_sees_indexing_with_a_device_scalar(tiny, monkeypatch):
    """The count must see what a Python-level count cannot: the rejected row taken as p[row] with a 0-d
    tensor `row`, as window.py once did, reads `row` on the host in C++."""
    from specviz.decoding import window

    def indexing_with_a_scalar(p, row):  # the old way of taking the row: p[0-d tensor]
        return p[row[0]]

    original = window.copy_to_host

    def copy_with_a_hidden_read(step, verdict, vocab, clock):
        indexing_with_a_scalar(step.p, verdict.accepted.view(1))
        return original(step, verdict, vocab, clock)

    monkeypatch.setattr(window, "copy_to_host", copy_with_a_hidden_read)
    assert _hidden_reads_of_passes(tiny, "sjd", {"window": 8}) == 3


@pytest.mark.parametrize("method", ["eagle2", "peanut"])
def test_two_host_reads_per_tree_pass(tiny, method, monkeypatch):
    """A tree pass reads the grown tree (its attention mask is built on the host) and the record."""
    settings = {"tree_tokens": 12, "drafter": "training-free"}
    assert _host_reads_of_passes(tiny, method, settings, monkeypatch) == ["tolist"] * 10


@pytest.mark.parametrize("method", ["eagle2", "peanut"])
def test_a_tree_goes_to_the_device_once_per_pass(tiny, method, monkeypatch):
    """The grown tree's mask is built on the host and copied once; the session's pass takes it as it is."""
    from specviz.models import session as session_module

    built = []
    original = session_module.tree_structure
    monkeypatch.setattr(session_module, "tree_structure", lambda parents: built.append(1) or original(parents))
    _hidden_reads_of_passes(tiny, method, {"tree_tokens": 12}, passes=3)
    assert len(built) == 3


def test_tree_verification_neither_reads_nor_copies_from_the_host(monkeypatch):
    """A copy from the host waits for the device as a read does: between a tree's pass and its record
    (the verification) there is neither; the tree went to the device in one copy before the pass."""
    from specviz.decoding.tree import GrownTree, verify_tree

    tree = GrownTree.on(torch.device("cpu"), [3, 5, 7, 2], [-1, -1, 0, 2], [1, 1, 2, 3], [0.5, 0.3, 0.6, 0.9])
    p = torch.softmax(torch.randn(5, 10, generator=torch.Generator().manual_seed(0)), -1)

    def forbidden(*args, **kwargs):
        raise AssertionError("a host read or a copy from the host during verification")

    for name in (*HOST_READS, "to", "cuda"):
        monkeypatch.setattr(torch.Tensor, name, forbidden)
    for name in ("tensor", "as_tensor", "from_numpy"):
        monkeypatch.setattr(torch, name, forbidden)
    verdict = verify_tree(p, tree, torch.Generator().manual_seed(1))
    monkeypatch.undo()
    fate = verdict.fate.tolist()
    assert fate[0] > 0 and len(fate) == 4  # the head's first child is always tested
