import pytest
import torch

from specviz.core.settings import SamplingSettings, SettingsError

LOGITS = torch.tensor([[2.0, 1.0, 0.5, -1.0, 0.0]])


def test_plain_softmax_with_temperature():
    probs = SamplingSettings(temperature=2.0).probabilities(LOGITS)
    torch.testing.assert_close(probs, (LOGITS / 2).softmax(-1))


def test_top_k_keeps_the_k_most_likely():
    probs = SamplingSettings(top_k=2).probabilities(LOGITS)
    assert (probs > 0).sum() == 2 and probs[0, 0] > probs[0, 1] > 0
    torch.testing.assert_close(probs.sum(), torch.tensor(1.0))


def test_top_k_above_vocabulary_keeps_everything():
    torch.testing.assert_close(SamplingSettings(top_k=50).probabilities(LOGITS), LOGITS.softmax(-1))


def test_top_p_keeps_the_smallest_set_reaching_p():
    full = LOGITS.softmax(-1)[0]
    probs = SamplingSettings(top_p=float(full[0]) + 1e-3).probabilities(LOGITS)[0]
    assert (probs > 0).tolist() == [True, True, False, False, False]


def test_greedy_is_one_hot_argmax():
    probs = SamplingSettings(temperature=0).probabilities(LOGITS)
    assert probs.tolist() == [[1.0, 0.0, 0.0, 0.0, 0.0]]


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"top_k": 0}, "top-k must be a positive integer"),
        ({"top_k": -3}, "top-k must be a positive integer"),
        ({"temperature": -0.5}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 0.0}, "top-p"),
        ({"top_p": 1.5}, "top-p"),
        ({"guidance_scale": -1.0}, "guidance"),
    ],
)
def test_out_of_range_settings_are_refused(settings, message):
    with pytest.raises(SettingsError, match=message):
        SamplingSettings(**settings)
