"""What MAR's passes cost on this device, at the release's shapes, from random weights (no download).

CSpD's speedup rests on two costs. A draft token costs the draft's backbone pass over the whole
grid (one row per guidance branch) plus its head's denoising loop for one token; a verification
costs the target's backbone over gamma rows (row j knows the first drafts; specviz's exact pass) plus
the target head along gamma paths. The cost ratio c is a draft token over a target token, the
paper's 0.38 for MAR-B against MAR-H at batch size 128. On a GPU a pass over gamma rows costs about
one row's while gamma is small; on a CPU it costs about gamma rows'. specviz's encoder runs every
slot (masked tokens are left out as attention keys, not dropped), so its pass costs what the release's
costs near the end of an image, where nearly every token is known; early passes of the release are
cheaper, which lowers its per-token cost and shifts c. Timings are medians of
`repeats` after one warm-up, synchronised on CUDA, weights random (bf16 backbones on CUDA as loaded).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from specviz.models.hub import default_dtype
from specviz.models.mar.network import RELEASES, Mar, MarConfig
from specviz.models.networks.diffusion_head import DiffusionHead


@dataclass(frozen=True)
class PassCost:
    model: str
    rows: int  # gamma: rows of one backbone pass, tokens of one head call
    backbone_ms: float  # one pass over `rows` rows, both guidance branches
    head_ms: float  # the head's whole denoising loop for `rows` tokens

    @property
    def token_ms(self) -> float:
        """AR's cost of one token (valid for rows = 1): a backbone pass and a denoising loop."""
        return self.backbone_ms + self.head_ms


def random_mar(config: MarConfig, device: torch.device) -> Mar:
    """A MAR of `config` with random weights, allocated without the release's (slow) initialisation."""
    with torch.device("meta"):
        network = Mar(config)
    network = network.to_empty(device=device)
    with torch.no_grad():
        for parameter in network.parameters():
            parameter.normal_(0, 0.02)
    network.eval().requires_grad_(False)
    for name, parameter in network.named_parameters():
        if not name.startswith("denoiser."):
            parameter.data = parameter.data.to(default_dtype(device))
    return network


def _median_ms(work: Callable[[], object], device: torch.device, repeats: int) -> float:
    times = []
    for attempt in range(repeats + 1):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        work()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if attempt:  # the first is a warm-up
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


@torch.inference_mode()
def measure(
    name: str, device: torch.device, rows: list[int], repeats: int = 3, config: MarConfig | None = None
) -> list[PassCost]:
    """Backbone and head costs of `name` (a release size, or `config`) for each row count."""
    config = config or RELEASES[name]
    network = random_mar(config, device)
    head = DiffusionHead(network.denoiser, config.sampling_steps, x0_limit=math.inf)
    classes = network.class_embeddings(0, True)
    seq_len, dim = config.seq_len, config.token_dim
    costs = []
    for count in rows:
        tokens = torch.randn(2 * count, seq_len, dim, device=device)
        known = torch.rand(2 * count, seq_len, device=device) < 0.5
        batch_classes = classes.repeat(count, 1)
        backbone = _median_ms(lambda: network.conditions(tokens, known, batch_classes), device, repeats)  # noqa: B023
        conditions = torch.randn(count, 2, config.width, device=device)
        noise = torch.randn(count, head.steps + 1, dim, device=device)
        head_ms = _median_ms(lambda: head.sample(conditions, noise, 3.0, 1.0), device, repeats)  # noqa: B023
        costs.append(PassCost(name, count, backbone, head_ms))
    return costs


def cost_table(costs: dict[str, list[PassCost]], device: torch.device) -> str:
    """Markdown: per model and row count the backbone pass, the head loop, the pass's cost over one
    row's; then the cost ratio c of every draft/target pair measured."""
    lines = [
        f"MAR pass costs on {device} (random weights at the release's shapes; ms, median)",
        "",
        "| model | rows (gamma) | backbone pass | head, all rows | pass / one row's |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, rows in costs.items():
        one = rows[0].backbone_ms
        for cost in rows:
            lines.append(
                f"| {name} | {cost.rows} | {cost.backbone_ms:.1f} | {cost.head_ms:.1f} | {cost.backbone_ms / one:.2f} |"
            )
    names = sorted((name for name in costs if costs[name][0].rows == 1), key=lambda name: costs[name][0].token_ms)
    pairs = [(draft, target) for i, draft in enumerate(names) for target in names[i + 1 :]]  # the cheaper drafts
    if pairs:
        lines += ["", "| draft | target | draft token | target token | c |", "|---|---|---:|---:|---:|"]
        for draft, target in pairs:
            q, p = costs[draft][0].token_ms, costs[target][0].token_ms
            lines.append(f"| {draft} | {target} | {q:.1f} | {p:.1f} | {q / p:.2f} |")
    return "\n".join(lines)
