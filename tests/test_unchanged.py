"""Behaviour unchanged: a fixed set of runs gives the tokens and passes it gave when the file was written.

Every method on every toy model (`specviz.models.toys.discrete`, `specviz.models.toys.continuous`) and on a small
random-weight `tiny` of an 8 x 8 grid, each at two seeds, records its committed tokens per pass (a
continuous run its values, to 4 decimals). A refactoring of the loops, sessions or runner must leave
them as they were; a change meant to alter behaviour re-writes the file on purpose:

    python tests/test_unchanged.py   # rewrites tests/unchanged_runs.json
"""

import json
from pathlib import Path

import torch

from specviz.decoding import METHODS, run
from specviz.measure.lossless import TOY_PARAMETERS
from specviz.models.networks.draft_head import DraftHead
from specviz.models.protocol import UnsupportedMethod
from specviz.models.tiny.adapter import TinyModel
from specviz.models.tiny.network import TinyConfig, TinyTextToImage
from specviz.models.tiny.tokenizer import PatchTokenizer
from specviz.models.toys.continuous import ContinuousToy
from specviz.models.toys.discrete import TOYS

RECORDED = Path(__file__).with_name("unchanged_runs.json")
SEEDS = (0, 1)
PROMPT = "red apple"
# on tiny besides each method's defaults: the other initialisations, resets and the EAGLE head's drafts
VARIANTS = {
    "sjd+sample-above": ("sjd", {"init": "sample-above", "reset_in_stall": 2}),
    "sjd+repeat-left": ("sjd", {"init": "repeat-left"}),
    "scd-mc+window-4": ("scd-mc", {"window": 4, "refine": False}),
    "eagle2+head": ("eagle2", {"drafter": "head"}),
    "peanut+head": ("peanut", {"drafter": "head"}),
}


def random_tiny() -> TinyModel:
    """tiny's classes at 8 x 8 tokens of 64 codes with random weights, sharpened so that drafts are both
    accepted and rejected, and a random EAGLE head."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        config = TinyConfig(vocab_size=64, rows=8, cols=8, hidden_size=32, num_layers=1, num_heads=2,
                            intermediate_size=64)  # fmt: skip
        network = TinyTextToImage(config)
        with torch.no_grad():
            for parameter in network.parameters():
                if parameter.dim() == 2:
                    parameter.normal_(0.0, 0.3)
        lm = network.lm
        head = DraftHead.sized_for(lm.config, lm.get_input_embeddings(), lm.lm_head)
        return TinyModel(network, PatchTokenizer(torch.rand(64, 27)), torch.device("cpu"), draft_head=head)


def models() -> dict:
    return {**{name: build() for name, build in TOYS.items()}, "continuous": ContinuousToy(), "tiny": random_tiny()}


def recorded_runs() -> dict[str, list]:
    """`model/method/seed` -> the committed tokens of each pass (a continuous run: its values)."""
    runs = {}
    for model_name, model in models().items():
        for method, spec in METHODS.items():
            try:
                spec.runs_on(model)
            except UnsupportedMethod:  # a method for the other kind of tokens
                continue
            known = {name for name, _, _ in spec.parameters.fields()}
            window = getattr(model, "window", 8)
            params = {k: v for k, v in {**TOY_PARAMETERS, "window": window}.items() if k in known}
            if model_name == "tiny":
                params = {k: v for k, v in params.items() if k == "window"}
            for seed in SEEDS:
                runs[f"{model_name}/{method}/{seed}"] = record(run(model, method, PROMPT, seed, params=params))
    tiny = random_tiny()
    for name, (method, params) in VARIANTS.items():
        for seed in SEEDS:
            runs[f"tiny/{name}/{seed}"] = record(run(tiny, method, PROMPT, seed, params=params))
    return runs


def record(trace) -> list:
    """A discrete run's committed tokens per pass; a continuous run's values to 4 decimals."""
    if trace.vectors is not None:
        return [round(value, 4) for vector in trace.vectors for value in vector]
    return [it.committed for it in trace.iterations]


def test_every_recorded_run_is_unchanged():
    recorded = json.loads(RECORDED.read_text())
    now = recorded_runs()
    assert now.keys() == recorded.keys()
    changed = [key for key in recorded if now[key] != recorded[key]]
    assert not changed, f"{len(changed)} of {len(recorded)} runs changed, first {changed[:5]}"


if __name__ == "__main__":
    torch.set_num_threads(1)
    RECORDED.write_text(json.dumps(recorded_runs(), separators=(",", ":")) + "\n")
    print(f"wrote {RECORDED}")
