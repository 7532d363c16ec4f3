"""The AR baseline: reproducible from the seed, and the same loop as transformers' generate()."""

import numpy as np

from specviz.core.settings import SamplingSettings
from specviz.decoding import run


def test_same_seed_same_tokens(tiny):
    first = run(tiny, "ar", "red apple", seed=7)
    second = run(tiny, "ar", "red apple", seed=7)
    assert first.tokens == second.tokens


def test_different_seeds_different_images(tiny):
    # a free-text prompt: for a training caption the model has memorised its emoji almost exactly
    images = [np.asarray(tiny.decode(run(tiny, "ar", "a smiling cat", seed=s).tokens)) for s in (1, 2)]
    assert not np.array_equal(images[0], images[1])


def test_trace_of_ar_counts_one_pass_per_token(tiny):
    trace = run(tiny, "ar", "rocket", seed=0)
    assert len(trace.tokens) == 256 and trace.nfe == 256 and len(trace.iterations) == 256
    assert trace.lossless and trace.method == "ar" and trace.model == "tiny"
    assert trace.sampling.guidance_scale == tiny.default_sampling.guidance_scale
    assert all(len(it.committed) == 1 for it in trace.iterations)


def test_greedy_ignores_the_seed_and_matches_generate(tiny):
    greedy = SamplingSettings(temperature=0, guidance_scale=1.0)
    ours = run(tiny, "ar", "grinning face", seed=0, sampling=greedy).tokens
    assert run(tiny, "ar", "grinning face", seed=123, sampling=greedy).tokens == ours
    assert tiny.reference_generate("grinning face", greedy, seed=0) == ours
