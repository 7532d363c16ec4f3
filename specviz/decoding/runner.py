"""Run one method on one prompt and seed, and record it as a Trace."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from specviz.decoding.registry import get_method
from specviz.decoding.window import check_window
from specviz.models.protocol import ImageModel
from specviz.models.sampling import SamplingSettings
from specviz.trace import Iteration, Trace, TraceGeometry, TraceSampling

MAX_PROMPT_CHARS = 2000


class PromptError(ValueError):
    """An empty or oversized prompt."""


def check_prompt(prompt: str) -> str:
    text = prompt.strip()
    if not text:
        raise PromptError("the prompt is empty; describe an image, for example 'red apple'")
    if len(text) > MAX_PROMPT_CHARS:
        raise PromptError(f"the prompt has {len(text)} characters; the limit is {MAX_PROMPT_CHARS}")
    return text


def run(
    model: ImageModel,
    method: str,
    prompt: str,
    seed: int,
    sampling: SamplingSettings | None = None,
    params: dict | None = None,
    on_iteration: Callable[[Iteration], None] | None = None,
) -> Trace:
    """Generate one image with `method` and return its Trace; all randomness comes from `seed`."""
    spec = get_method(method)
    prompt = check_prompt(prompt)
    sampling = sampling or model.default_sampling
    params = spec.resolve(params)
    if "window" in params:
        check_window(params["window"], params["init"])
    generator = torch.Generator(device=model.device).manual_seed(seed)
    started = time.perf_counter()
    session = model.session(prompt, sampling.guidance_scale)
    prefill_ms = (time.perf_counter() - started) * 1000
    iterations = []
    with torch.inference_mode():
        for iteration in spec.decode(session, sampling, generator, **params):
            iterations.append(iteration)
            if on_iteration is not None:
                on_iteration(iteration)
    seconds = time.perf_counter() - started
    geometry = model.geometry
    return Trace(
        model=model.name,
        method=method,
        lossless=spec.is_lossless(sampling.greedy),
        prompt=prompt,
        seed=seed,
        sampling=TraceSampling(**sampling.to_dict()),
        params=params,
        geometry=TraceGeometry(
            rows=geometry.rows, cols=geometry.cols, vocab_size=geometry.vocab_size, layout=list(geometry.layout)
        ),
        tokens=[token for it in iterations for token in it.committed],
        nfe=session.nfe,
        seconds=seconds,
        prefill_ms=prefill_ms,
        iterations=iterations,
    )
