"""The Jacobi-family methods on the embedded model and on the toy model."""

import pytest
import torch

from specviz.core.params import INIT_STRATEGIES, WindowParameters
from specviz.core.settings import SamplingSettings, SettingsError
from specviz.decoding import METHODS, run
from specviz.decoding.gsd import dynamic_groups
from specviz.decoding.sampling import gumbel_noise, maximal_coupling, nearest_tokens, residual
from specviz.models.protocol import UnsupportedMethod
from specviz.models.toys.discrete import ToyModel
from specviz.trace import Trace

WINDOW_METHODS = [name for name, method in METHODS.items() if issubclass(method.parameters, WindowParameters)]


@pytest.mark.parametrize("method", WINDOW_METHODS)
def test_every_method_completes_the_image_with_a_valid_trace(tiny, method):
    trace = run(tiny, method, "red apple", seed=2, params={"window": 8})
    assert len(trace.tokens) == 256 and trace.nfe == len(trace.iterations)
    assert trace.lossless == METHODS[method].lossless
    assert Trace.from_json(trace.to_json()) == trace  # the record passes full validation
    windows = [it for it in trace.iterations if it.kind == "window"]
    assert {it.kind for it in trace.iterations} == ({"token", "window"} if method != "ar" else {"token"})
    assert all(len(it.drafts) <= 8 for it in windows)
    assert all(it.accepted == len(it.drafts) or it.rejected_at == it.accepted for it in windows)
    assert all(len(it.fate) == len(it.uniform) == len(it.tv) == len(it.drafts) for it in windows)


def _neighbour(position: int, cols: int, side: str) -> int:
    """The cell a new draft copies or samples from on a plain grid: its left or upper neighbour, the other
    one on the first column or row, none at the origin."""
    row, col = divmod(position, cols)
    left, above = (position - 1 if col else -1), (position - cols if row else -1)
    return (left if left >= 0 else above) if side == "left" else (above if above >= 0 else left)


@pytest.mark.parametrize("init", INIT_STRATEGIES)
def test_sjd_initialisations_reproduce_and_fill_new_slots_as_named(tiny, init):
    """Every draft verified for the first time came from where its strategy says: uniform (no source), a
    copy of the neighbour's token at the time (repeat-*), or a draw from a computed distribution at or
    before the neighbour (sample-*)."""
    first = run(tiny, "sjd", "sun", seed=5, params={"init": init, "window": 16})
    second = run(tiny, "sjd", "sun", seed=5, params={"init": init, "window": 16})
    assert first.tokens == second.tokens
    cols, side, checked = tiny.geometry.cols, init.split("-")[-1], 0
    for it in (it for it in first.iterations if it.kind == "window"):
        news = range(len(it.drafts) - len(it.new_init), len(it.drafts))  # offsets from it.start
        for offset, origin, source in zip(news, it.new_init, it.new_source, strict=True):
            position = it.start + offset
            if origin == "refined":
                continue
            assert origin == init
            if init == "random":
                assert source == -1
                continue
            neighbour = _neighbour(position, cols, side)
            if init.startswith("repeat"):
                assert source == neighbour
                if source >= 0:
                    value = first.tokens[source] if source < it.start else it.drafts[source - it.start]
                    assert it.drafts[offset] == value
            else:
                assert 0 <= source <= neighbour < position
            checked += source >= 0
    assert checked > 100 or init == "random"


@pytest.mark.parametrize("method", ["jacobi", "sjd", "scd-mc", "scd-gs"])
def test_greedy_jacobi_family_reproduces_greedy_ar_exactly(tiny, greedy_ar, method):
    greedy, ar = SamplingSettings(temperature=0, guidance_scale=3.0), greedy_ar
    trace = run(tiny, method, "cat face", seed=9, sampling=greedy, params={"window": 16})
    assert trace.tokens == ar.tokens and trace.lossless
    assert trace.nfe < ar.nfe


def test_window_of_one_and_a_window_past_the_end(tiny):
    assert len(run(tiny, "sjd", "rocket", seed=0, params={"window": 1}).tokens) == 256
    assert len(run(tiny, "scd-mc", "rocket", seed=0, params={"window": 128}).tokens) == 256


@pytest.mark.parametrize(
    "method, params, message",
    [
        ("sjd", {"window": 0}, "window must be an integer from 1 to 128"),
        ("sjd", {"window": 129}, "window must be an integer from 1 to 128"),
        ("sjd", {"window": 2.5}, "window must be an integer from 1 to 128, got 2.5"),
        ("sjd", {"window": True}, "window must be an integer"),
        ("sjd", {"init": "diagonal"}, "init must be one of random, repeat-left"),
        ("sjd", {"refine": "yes"}, "refine must be true or false"),
        ("sjd", {"reset_in_stall": 4}, r"reset_in_stall needs a repeat-\* or sample-\* initialisation"),
        ("ar", {"window": 4}, "method ar has no parameter window"),
        ("sjd", {"group_size": 4}, "method sjd has no parameter group_size"),
        ("lantern", {"delta": 2.0}, "delta must be a number from 0 to 1, got 2.0"),
        ("lantern", {"delta": float("nan")}, "delta must be a number from 0 to 1"),
        ("gsd", {"ranks_above": -1}, "ranks_above must be an integer from 0 to 1000"),
        ("gsd", {"prob_gap": 1.5}, "prob_gap must be a number from 0 to 1"),
    ],
)
def test_out_of_range_method_parameters_are_refused(tiny, method, params, message):
    with pytest.raises(SettingsError, match=message):
        run(tiny, method, "sun", seed=0, params=params)


def test_relaxed_methods_need_codebook_vectors():
    model = ToyModel()
    model.token_vectors = None
    with pytest.raises(UnsupportedMethod, match="lantern needs the tokenizer's codebook vectors"):
        run(model, "lantern", "x", seed=0)


def test_gumbel_noise_is_a_function_of_key_and_position():
    positions = torch.tensor([3, 7, 3])
    noise = gumbel_noise(42, positions, 1024)
    assert torch.equal(noise[0], noise[2]) and not torch.equal(noise[0], noise[1])
    assert not torch.equal(noise[0], gumbel_noise(43, positions, 1024)[0])
    many = gumbel_noise(1, torch.arange(200), 1024)
    assert abs(many.mean().item() - 0.5772) < 0.01  # the Euler-Mascheroni constant: standard Gumbel mean
    assert abs(many.var().item() - torch.pi**2 / 6) < 0.05


def test_maximal_coupling_keeps_marginal_and_maximises_agreement():
    p_new = torch.tensor([[0.5, 0.3, 0.2]]).expand(200_000, 3)
    p_old = torch.tensor([[0.2, 0.3, 0.5]]).expand(200_000, 3)
    generator = torch.Generator().manual_seed(0)
    previous = torch.multinomial(p_old, 1, replacement=True, generator=generator).squeeze(1)
    uniform = torch.rand(200_000, generator=generator)
    coupled = maximal_coupling(p_new, p_old, previous, uniform, generator)
    frequencies = torch.bincount(coupled, minlength=3) / 200_000
    torch.testing.assert_close(frequencies, p_new[0], atol=5e-3, rtol=0)
    agreement = (coupled == previous).float().mean().item()
    assert abs(agreement - 0.7) < 5e-3  # 1 - TV(p_new, p_old) = 1 - 0.3


def test_residual_falls_back_to_p_when_the_distributions_agree():
    p = torch.tensor([[0.25, 0.75]])
    torch.testing.assert_close(residual(p, p), p)
    torch.testing.assert_close(
        residual(torch.tensor([[0.5, 0.5]]), torch.tensor([[0.7, 0.3]])), torch.tensor([[0.0, 1.0]])
    )


def test_nearest_tokens_excludes_itself_and_orders_by_distance():
    vectors = torch.tensor([[0.0], [1.0], [3.0], [10.0]])
    assert nearest_tokens(vectors, 2).tolist() == [[1, 2], [0, 2], [1, 0], [2, 1]]


def test_gsd_groups_are_formed_from_the_target_rank_probability_and_codebook():
    # target over 6 tokens, ranked 2 > 0 > 4 > 1 > 5 > 3; the draft is token 0 (rank 1)
    p = torch.tensor([[0.30, 0.10, 0.35, 0.01, 0.20, 0.04]])
    near = torch.tensor([[4, 1], [0, 2], [0, 1], [5, 4], [0, 5], [3, 4]])  # each token's 2 nearest codes
    candidates, member = dynamic_groups(p, torch.tensor([0]), near, above=2, below=2, prob_gap=0.15)
    groups = {int(t) for t, m in zip(candidates[0], member[0], strict=True) if m}
    # two ranks either side of the draft: token 2 above (nothing above it), 4 and 1 below; 2 is not
    # near 0, 1 is near but 0.20 less likely, 4 is near and within 0.15: the group is {0, 4}
    assert groups == {0, 4}
    _, member = dynamic_groups(p, torch.tensor([0]), near, above=0, below=0, prob_gap=0.15)
    assert int(member.sum()) == 1  # no ranks either side: the draft alone


def test_gsd_with_groups_of_one_is_sjd_token_for_token(tiny):
    sjd = run(tiny, "sjd", "rocket", seed=4)
    gsd = run(tiny, "gsd", "rocket", seed=4, params={"ranks_above": 0, "ranks_below": 0})
    assert gsd.tokens == sjd.tokens and gsd.nfe == sjd.nfe
