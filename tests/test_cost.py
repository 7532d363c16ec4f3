"""The pass-cost measurement: what a pass of n tokens costs against one, and what that means for a speedup."""

from __future__ import annotations

import pytest

from specviz.cli import main
from specviz.measure.cost import PassCost, cost_sentence, pass_costs
from specviz.viz import pass_cost_figure


def test_pass_costs_time_each_size_and_leave_the_session_as_it_was(tiny):
    costs = pass_costs(tiny, "red apple", (4, 17), repeats=1)
    assert [cost.tokens for cost in costs] == [1, 4, 17]  # the one-token pass is always the reference
    assert costs[0].ratio == 1.0 and all(cost.ms > 0 for cost in costs)
    assert costs[2].ratio == pytest.approx(costs[2].ms / costs[0].ms)


def test_the_sentence_divides_step_compression_by_the_window_pass_ratio():
    costs = [PassCost(1, 10.0, 1.0), PassCost(17, 30.0, 3.0)]
    text = cost_sentence(costs, step_compression=2.9)
    assert "a 17-token pass costs 3.0x a one-token pass" in text
    assert "for a step compression of 2.90x, every pass 17 tokens: 1.03x slower than AR." in text
    figure = pass_cost_figure(costs)
    assert [trace.name for trace in figure.data][-1].startswith("measured here")


def test_the_sentence_gives_the_range_its_repeats_allow_and_says_when_they_were_disturbed():
    """One noisy number is not stated as fact: the repeats' range goes with the median, and timings that
    cannot be right (a longer pass cheaper, repeats far apart) are called disturbed."""
    quiet = [PassCost(1, 10.0, 1.0, 9.5, 10.5, 5), PassCost(17, 40.0, 4.0, 38.0, 42.0, 5)]
    text = cost_sentence(quiet, step_compression=8.0)
    assert "4.0x a one-token pass (40.0 ms against 10.0 ms, medians, from 3.6x to 4.4x across the repeats)" in text
    assert ": 2.00x latency speedup over AR (1.81-2.21x over 5 timings)." in text and "disturbed" not in text
    busy = [PassCost(1, 10.0, 1.0, 5.0, 30.0, 5), PassCost(17, 40.0, 4.0, 38.0, 42.0, 5)]
    assert "These timings were disturbed (the 1-token pass's repeats ranged from 5.00 to 30.00 ms)" in (
        cost_sentence(busy)
    )


def test_the_command_prints_a_table(capsys):
    assert main(["pass-cost", "--sizes", "1,3", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "| 3 |" in out and "costs" in out
    assert main(["pass-cost", "--sizes", "0"]) == 2
