"""The continuous lossless check's energy test: blocked so that its memory stays bounded, and with the
statistics and p-values the whole distance matrix gave."""

import pytest
import torch

import specviz.measure.continuous_lossless as continuous_lossless
from specviz.measure.continuous_lossless import PERMUTATIONS, energy_test


def _whole_matrix_energy_test(x: torch.Tensor, y: torch.Tensor, generator: torch.Generator) -> tuple[float, float]:
    """The test as it was, with the (2n)^2 distance matrix and all labellings held at once."""
    pooled = torch.cat([x, y]).double()
    distances = torch.cdist(pooled, pooled)
    n, total = len(x), len(pooled)

    def statistic(labels):
        ones, zeros = labels, 1 - labels
        within_x = (ones * (distances @ ones)).sum(0) / n**2
        within_y = (zeros * (distances @ zeros)).sum(0) / (total - n) ** 2
        between = (ones * (distances @ zeros)).sum(0) / (n * (total - n))
        return 2 * between - within_x - within_y

    observed = statistic(torch.cat([torch.ones(n), torch.zeros(total - n)]).double()[:, None])[0]
    orders = torch.stack([torch.randperm(total, generator=generator) for _ in range(PERMUTATIONS)], dim=1)
    labels = (orders < n).double()
    exceed = sum(int((statistic(labels[:, i : i + 250]) >= observed).sum()) for i in range(0, PERMUTATIONS, 250))
    return float(observed), (exceed + 1) / (PERMUTATIONS + 1)


@pytest.mark.parametrize("shift", [0.0, 0.5])
def test_the_blocked_test_gives_the_whole_matrixs_statistic_and_p_value(monkeypatch, shift):
    generator = torch.Generator().manual_seed(3)
    x, y = torch.randn(150, 6, generator=generator), torch.randn(150, 6, generator=generator) + shift
    whole = _whole_matrix_energy_test(x, y, torch.Generator().manual_seed(11))
    monkeypatch.setattr(continuous_lossless, "DISTANCES_PER_BLOCK", 300 * 120)  # 3 blocks of rows, the last short
    energy, p_value = energy_test(x, y, torch.Generator().manual_seed(11))
    assert energy == pytest.approx(whole[0], rel=1e-9) and p_value == whole[1]


def test_no_more_distances_than_a_block_are_held_at_once(monkeypatch):
    """At 20,000 samples a side the whole matrix took 12.8 GB and the check ran for 44 minutes."""
    largest = []
    cdist = torch.cdist

    def measured(a, b):
        largest.append(len(a) * len(b))
        return cdist(a, b)

    monkeypatch.setattr(torch, "cdist", measured)
    monkeypatch.setattr(continuous_lossless, "DISTANCES_PER_BLOCK", 400 * 150)
    generator = torch.Generator().manual_seed(0)
    energy_test(torch.randn(200, 6, generator=generator), torch.randn(200, 6, generator=generator), generator)
    assert max(largest) <= 400 * 150 < 400 * 400
