"""Inspect's words and jumps: one sentence per iteration that says what the trace records, and the
passes worth stepping to."""

from __future__ import annotations

import pytest

from specviz.decoding import run
from specviz.metrics import stalls
from specviz.ui.inspection import describe_iteration, next_of_kind, step_by
from specviz.viz import GLOSSARY, iteration_sentence, jump
from specviz.viz.narration import SENTENCES


@pytest.fixture(scope="module")
def stalled(tiny):
    return run(tiny, "sjd", "a red car", 1, params={"window": 16, "init": "random"})


def test_a_window_pass_is_told_with_the_numbers_that_decided_it(stalled):
    j = jump(stalled, 0, "long")
    it = stalled.iterations[j]
    k = it.rejected_at
    sentence = iteration_sentence(stalled, j)
    assert sentence.startswith(f"Iteration {j} (from token {it.start}): {it.accepted} drafts accepted")
    ordinal = f"{k + 1}{'th' if 10 <= (k + 1) % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get((k + 1) % 10, 'th')}"
    assert f"the {ordinal} (offset {k}) was rejected because" in sentence  # the offset the window's axis shows
    assert f"p_new = {it.p_new[k]:.2g}" in sentence and f"uniform draw {it.uniform[k]:.2g}" in sentence
    assert "drawn from the residual" in sentence and "Left in the window" in sentence
    assert "no drafts to verify; the model drew one token" in iteration_sentence(stalled, 0)


def test_jumps_find_rejections_long_runs_and_stalls(stalled):
    its = stalled.iterations
    start, length = stalls(stalled)[0]
    assert jump(stalled, 0, "stall") == start and length >= 8
    assert all(its[k].accepted == 0 for k in range(start, start + length))
    long = jump(stalled, 0, "long")
    assert its[long].accepted >= max(2, max(it.accepted for it in its) / 2)
    rejection = jump(stalled, 0, "rejection")
    assert its[rejection].rejected_at is not None and rejection > 0
    assert jump(stalled, rejection, "rejection", forward=False) == rejection  # none before it
    last = len(its) - 1
    assert jump(stalled, last, "stall") == last  # nothing after the end: stay
    with pytest.raises(ValueError, match="rejection, long, stall"):
        jump(stalled, 0, "boring")


def test_tree_and_continuous_passes_have_their_own_sentences(eagle2_trace, tiny):
    j = max(range(len(eagle2_trace.iterations)), key=lambda k: eagle2_trace.iterations[k].accepted)
    sentence = iteration_sentence(eagle2_trace, j)
    assert "One pass verified a tree of" in sentence and "drew one more token after it" in sentence
    best = eagle2_trace.iterations[j]  # as the image's last tree: its path fixed, no token drawn after it
    ended = SENTENCES["tree"](best.model_copy(update={"committed": best.committed[: best.accepted]}))
    assert f"({best.accepted} tokens fixed)" in ended and "no token was drawn after it" in ended
    assert "drew one more" not in ended
    from test_mar import pair_of_random_mars

    trace = run(pair_of_random_mars(), "cspd", "3", 0, params={"gamma": 3, "prefill": 0.1})
    told = [iteration_sentence(trace, k) for k in range(len(trace.iterations))]
    assert "The target drew this token alone" in told[0]
    assert any("was rejected (density ratio" in line and "discarded" in line for line in told)
    rejecting = next(it for it in trace.iterations if "rejected" in it.fate)  # as if its resampling hit the cap
    capped = rejecting.model_copy(update={"source": [*rejecting.source[:-1], "capped"], "tries": 1000})
    assert "resampling gave up after 1000 tries" in SENTENCES["continuous"](capped)
    assert "kept the target's last draw, a small departure from exactness" in SENTENCES["continuous"](capped)
    # the drafts after the rejected one, counted in words that agree with their number
    offset = rejecting.accepted
    endings = {2: "; the 2 after it were discarded.", 1: "; the 1 after it was discarded.", 0: "tried)."}
    for discarded, ending in endings.items():
        fate = [*rejecting.fate[: offset + 1], *["discarded"] * discarded]
        assert SENTENCES["continuous"](rejecting.model_copy(update={"fate": fate})).endswith(ending)
    assert all(line.startswith("Iteration ") for line in told)


def test_the_inspect_handlers_step_jump_and_describe(stalled):
    runs = {"trace": stalled}
    start = stalls(stalled)[0][0]
    assert next_of_kind("stall", runs, 0)[0] == start
    last = len(stalled.iterations) - 1  # nothing after the end: the iteration stays and the note says so
    stay, note = next_of_kind("rejection", runs, last)
    assert stay == {"__type__": "update"} and note == f"No rejection after iteration {last} in this run."
    assert step_by(-1, runs, 0) == 0 and step_by(1, runs, len(stalled.iterations) - 1) == len(stalled.iterations) - 1
    assert describe_iteration(runs, start) == iteration_sentence(stalled, start)
    length = stalls(stalled)[0][1]
    article = "an" if str(length).startswith("8") or length in (11, 18) else "a"
    assert iteration_sentence(stalled, start + 2).endswith(f" Pass 3 of {article} {length}-pass stall.")
    assert "stall" not in iteration_sentence(stalled, start - 1)
    assert describe_iteration({}, 3).startswith("Nothing to inspect yet: press Run or a preset")
    for word in ("NFE", "Step compression", "p_old", "Acceptance ratio", "coupling", "Stall", "Tau", "Alpha"):
        assert word in GLOSSARY
