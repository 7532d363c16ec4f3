"""The CSpD benchmark: acceptance and latency of cspd and cspd-exact over draft lengths and pre-fill.

For each method, draft length gamma and pre-filled share, every prompt and seed is run and compared
with the target's AR on the same prompt and seed: alpha (accepted share of the tested drafts, the
paper's table 1 column), target and draft passes, resampling tries and caps, seconds and the
latency speedup. The cost ratio c (a draft token's time over a target token's, both alone) is
measured from `ar-draft` against `ar` (medians over interleaved rounds), and the walltime improvement
the speculative decoding paper predicts from alpha, gamma and c, (1 - alpha^(gamma + 1)) /
((1 - alpha)(gamma c + 1)), is printed beside the measured one.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

import torch

from specviz.core.settings import SamplingSettings
from specviz.decoding.runner import run
from specviz.metrics import draft_acceptance
from specviz.models.continuous import ContinuousPair
from specviz.trace import Trace
from specviz.viz.narration import ratio_text

# rounds of AR and draft-alone runs behind c: from one round of two images, c drifted from 0.27 to 0.35
# between two runs of the same pair on a quiet 2-core machine
COST_ROUNDS = 3


@dataclass
class SweepRow:
    method: str
    gamma: int
    prefill: float
    alpha: float  # accepted share of the tested drafts
    target_passes: float
    draft_passes: float
    seconds: float
    latency_speedup: float  # AR seconds / method seconds, same prompts and seeds
    predicted_speedup: float  # from alpha, gamma and c (Leviathan et al.)
    tries: float  # resampling proposals per rejection
    capped: int  # rejections whose resampling hit the cap
    log_sigma: float | None  # cspd: mean log Sigma (Eq. 4) of the tested drafts


@dataclass
class SweepReport:
    model: str
    device: str
    threads: int
    sampling: dict
    prompts: list[str]
    seeds: list[int]
    ar_seconds: float
    draft_seconds: float
    cost_ratio: float  # c: a draft token's time over a target token's
    cost_rounds: int  # interleaved rounds of both models alone behind the medians
    rows: list[SweepRow] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def markdown(self) -> str:
        lines = [
            f"model {self.model} on {self.device} ({self.threads} torch threads), {len(self.prompts)} prompts x "
            f"{len(self.seeds)} seeds, sampling {self.sampling}",
            f"target AR {self.ar_seconds:.2f} s per image, draft alone {self.draft_seconds:.2f} s (medians of "
            f"{self.cost_rounds} interleaved rounds): cost ratio c = {self.cost_ratio:.2f}",
            "",
            "| method | gamma | pre-fill | alpha | target passes | draft passes | seconds | latency speedup "
            "| predicted | tries/rejection | capped | mean log Sigma |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in self.rows:
            sigma = "" if r.log_sigma is None else f"{r.log_sigma:.2f}"
            lines.append(
                f"| {r.method} | {r.gamma} | {r.prefill:.0%} | {r.alpha:.2f} | {r.target_passes:.1f} | "
                f"{r.draft_passes:.1f} | {r.seconds:.2f} | {ratio_text(r.latency_speedup)} | "
                f"{ratio_text(r.predicted_speedup)} | {r.tries:.2f} | {r.capped} | {sigma} |"
            )
        lines += [
            "",
            "alpha: accepted share of the drafts tested (the CSpD paper's table 1 reports 0.18-0.39 on MAR); "
            "predicted: (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1)) from the measured alpha and c; "
            "capped: rejections whose resampling reached max_tries and kept a plain target draw.",
        ]
        return "\n".join(lines)


def _alpha(traces: list[Trace]) -> float:
    alpha = draft_acceptance([it for trace in traces for it in trace.iterations])
    return float("nan") if alpha is None else alpha


def predicted_speedup(alpha: float, gamma: int, cost: float) -> float:
    """Expected walltime improvement of speculative decoding (Leviathan et al., Eq. 35 of CSpD's appendix B)."""
    if alpha >= 1:
        return (gamma + 1) / (gamma * cost + 1)
    return (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * cost + 1))


def sweep(
    model: ContinuousPair,
    prompts: list[str],
    seeds: list[int],
    sampling: SamplingSettings,
    gammas: list[int],
    prefills: list[float],
    methods: tuple[str, ...] = ("cspd", "cspd-exact"),
    cost_rounds: int = COST_ROUNDS,
) -> SweepReport:
    for warm_up in ("ar", "ar-draft"):  # lazy imports, allocator, prompt encoder: for each model, before timing
        run(model, warm_up, prompts[0], seeds[0], sampling)
    cases = [(prompt, seed) for prompt in prompts for seed in seeds]
    ar: list[Trace] = []
    draft: list[Trace] = []
    for _ in range(cost_rounds):  # interleaved, so a slow spell of the machine falls on both models
        for prompt, seed in cases:
            ar.append(run(model, "ar", prompt, seed, sampling))
            draft.append(run(model, "ar-draft", prompt, seed, sampling))
    ar_seconds = statistics.median(t.seconds for t in ar)
    draft_seconds = statistics.median(t.seconds for t in draft)
    cost = draft_seconds / ar_seconds
    report = SweepReport(
        model.name, str(model.device), torch.get_num_threads(), sampling.to_dict(), prompts, seeds,
        ar_seconds, draft_seconds, cost, cost_rounds,
    )  # fmt: skip
    for method in methods:
        for gamma in gammas:
            for prefill in prefills:
                params = {"gamma": gamma, "prefill": prefill}
                traces = [run(model, method, prompt, seed, sampling, params) for prompt, seed in cases]
                steps = [it for t in traces for it in t.iterations]
                rejections = [s for s in steps if "rejected" in s.fate]
                sigmas = [
                    value
                    for s in steps
                    if s.log_sigma is not None
                    for value, fate in zip(s.log_sigma, s.fate, strict=True)
                    if fate != "discarded"
                ]
                alpha = _alpha(traces)
                seconds = statistics.fmean(t.seconds for t in traces)
                report.rows.append(
                    SweepRow(
                        method=method,
                        gamma=gamma,
                        prefill=prefill,
                        alpha=alpha,
                        target_passes=statistics.fmean(t.nfe for t in traces),
                        draft_passes=statistics.fmean(t.draft_nfe for t in traces),
                        seconds=seconds,
                        latency_speedup=ar_seconds / seconds,
                        predicted_speedup=predicted_speedup(alpha, gamma, cost),
                        tries=statistics.fmean(s.tries for s in rejections) if rejections else 0.0,
                        capped=sum(s.source.count("capped") for s in steps),
                        log_sigma=statistics.fmean(sigmas) if sigmas else None,
                    )
                )
    return report
