"""Benchmarks: every method against AR on the same model, prompts and seeds, in one run.

Methods are interleaved per (prompt, seed) so that machine noise hits all of them alike, and each
is warmed up once before timing. The AR loop itself is checked against the model family's own
`generate()`: if it were slower, every speedup over it would be inflated.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from functools import partial

import numpy as np
import torch

from specviz.core.settings import SamplingSettings
from specviz.decoding import get_method, run
from specviz.metrics import STALL_PASSES, acceptance_maps, changed_share, has_trees, per_tree, stalls
from specviz.models.protocol import IMAGE_CELL, ImageModel, in_raster_order
from specviz.viz.narration import ratio_text


@dataclass
class TreeResult:
    """What a draft-tree method's passes looked like, over all its runs."""

    tau: float  # tokens committed per tree pass: the accepted path and the token drawn after it
    depth: float  # mean depth asked of a tree (PEANUT's adaptive d; EAGLE-2's fixed one)
    levels: float  # mean depth the trees reached (fewer where the image ends)
    top_k: float  # mean top-k asked
    size: float  # mean nodes per tree
    draft_share: float  # the drafter's own time (growing the trees) as a share of the model's passes


@dataclass
class MethodResult:
    method: str
    lossless: bool
    runs: int
    mean_nfe: float
    mean_tokens: float
    mean_seconds: float
    step_compression: float  # tokens per model pass
    latency_speedup: float  # AR seconds / method seconds, same prompts and seeds
    worst_nfe: int  # the most passes any one run needed
    accepted_per_pass: float  # drafts accepted per window or tree pass
    changed_per_pass: float  # drafts carried into the next window with another token (what SCD reduces)
    changed_share: float  # of the drafts carried into the next window, the share whose token changed
    longest_stall: int  # longest run of consecutive window or tree passes that accepted nothing
    stall_share: float  # share of those passes spent in stalls (runs of at least STALL_PASSES)
    verify_share: float  # the method's own work per pass, as a share of the forward pass
    trace_share: float  # time spent writing trace records, as a share of the whole run
    # the mean negative log-likelihood of an image token under the AR model (nats), a cross-entropy: AR's row
    # estimates the model's entropy and a lossless method's matches it within noise; a lossy method's differs
    # where it samples other images (not a divergence: images of lower entropy can score below AR's)
    nll_under_ar: float | None  # None for a continuous pair, whose tokens have densities
    outside_ar: int  # tokens AR could not have drawn (probability 0 under its sampling): NLL infinite
    trees: TreeResult | None = None  # draft-tree methods only


@dataclass
class ReferenceResult:
    """Our AR loop against the family's own generate(), both at the same sampling and guidance."""

    ours_tokens_per_second: float
    generate_tokens_per_second: float
    guidance_scale: float

    @property
    def ratio(self) -> float:
        return self.ours_tokens_per_second / self.generate_tokens_per_second


@dataclass
class BenchReport:
    model: str
    device: str
    threads: int
    sampling: dict
    prompts: list[str]
    seeds: list[int]
    results: list[MethodResult] = field(default_factory=list)
    reference: ReferenceResult | None = None

    def to_dict(self) -> dict:
        data = asdict(self)
        if self.reference is not None:
            data["reference"]["ratio"] = self.reference.ratio
        return data

    def markdown(self) -> str:
        lines = [
            f"model {self.model} on {self.device} ({self.threads} torch threads; SPECVIZ_THREADS sets them), "
            f"{len(self.prompts)} prompts x "
            f"{len(self.seeds)} seeds, sampling {self.sampling}",
            "",
            "| method | lossless | NFE | worst NFE | step compression | seconds | latency speedup "
            "| accepted/pass | changed/pass | changed share | longest stall | in stalls | verify/forward | trace "
            "| NLL under AR |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in self.results:
            nll = "-" if r.nll_under_ar is None else f"{r.nll_under_ar:.3f}"
            nll = f"inf ({r.outside_ar} tokens outside)" if r.outside_ar else nll
            lines.append(
                f"| {r.method} | {'yes' if r.lossless else 'no'} | {r.mean_nfe:.1f} | {r.worst_nfe} | "
                f"{r.step_compression:.2f}x | {r.mean_seconds:.3f} | {ratio_text(r.latency_speedup)} | "
                f"{r.accepted_per_pass:.2f} | {r.changed_per_pass:.2f} | {r.changed_share:.0%} | {r.longest_stall} | "
                f"{r.stall_share:.1%} | {r.verify_share:.1%} | {r.trace_share:.2%} | {nll} |"
            )
        lines += [
            "",
            f"changed share: of the drafts carried into the next window, those whose token changed; a stall: at least "
            f"{STALL_PASSES} window or tree passes in a row that accepted no draft (each fixed one token, as AR does). "
            "NLL under AR: the mean negative log-likelihood (nats) of the images' tokens under the AR model at the "
            "same sampling and guidance, a cross-entropy: AR's own row estimates the model's entropy and a lossless "
            "method's matches it within noise; a lossy method's differs where it draws other images (it is not a "
            "divergence: images of lower entropy than AR's can score below it).",
        ]
        trees = [r for r in self.results if r.trees is not None]
        if trees:
            lines += [
                "",
                "| draft trees | tau | depth asked | depth reached | top-k asked | nodes | drafter/forward |",
                "|---|---:|---:|---:|---:|---:|---:|",
            ]
            lines += [
                f"| {r.method} | {r.trees.tau:.2f} | {r.trees.depth:.2f} | {r.trees.levels:.2f} | "
                f"{r.trees.top_k:.1f} | {r.trees.size:.1f} | {r.trees.draft_share:.1%} |"
                for r in trees
            ]
            lines += [
                "",
                "tau: tokens committed per tree pass, the accepted path and the token drawn after it (as PEANUT's and "
                "EAGLE's tables count; AR's is 1); drafter/forward: the time spent growing the trees against the "
                "time of the model passes that verified them.",
            ]
        if self.reference is not None:
            ref = self.reference
            lines += [
                "",
                f"AR loop against transformers generate() (guidance {ref.guidance_scale:g} on both, same sampling):",
                "",
                "| loop | tokens/s |",
                "|---|---:|",
                f"| specviz ar | {ref.ours_tokens_per_second:.1f} |",
                f"| generate() | {ref.generate_tokens_per_second:.1f} |",
                f"| ratio | {ref.ratio:.2f} |",
            ]
        return "\n".join(lines)


def _tree_result(traces: list) -> TreeResult:
    """Means over every tree pass of the runs (pooled, so a long run weighs by its passes)."""
    series = [per_tree(trace) for trace in traces]

    def pooled(key: str) -> float:
        return statistics.fmean(value for s in series for value in s[key].tolist())

    forward_ms = sum(float(s["forward_ms"].sum()) for s in series)
    draft_ms = sum(float(s["draft_ms"].sum()) for s in series)
    return TreeResult(
        tau=pooled("tau"),
        depth=pooled("depth"),
        levels=pooled("levels"),
        top_k=pooled("top_k"),
        size=pooled("size"),
        draft_share=draft_ms / max(forward_ms, 1e-9),
    )


@torch.inference_mode()
def _log_likelihood(model: ImageModel, trace, sampling: SamplingSettings) -> tuple[float, int] | None:
    """Mean log-probability of a run's image tokens under the AR model at `sampling` (one uncached-prefix
    pass over the whole sequence, in raster order), over the tokens AR could draw, and how many it could
    not (probability 0: outside its top-k or top-p). None for a continuous pair, whose tokens have densities."""
    if trace.continuous:
        return None
    tokens = trace.tokens
    if trace.geometry.order is not None:
        tokens, _ = in_raster_order(model.geometry, tokens, trace.geometry.order)
    tokens = torch.tensor(tokens, device=model.device)
    session = model.session(trace.prompt, sampling.guidance_scale)
    logits = torch.cat([session.next_logits[None], session.forward(tokens[:-1])])
    probability = sampling.probabilities(logits).gather(1, tokens[:, None]).squeeze(1).double()
    image = torch.tensor(model.geometry.layout, device=model.device) == IMAGE_CELL
    drawable = image & (probability > 0)
    return float(probability[drawable].log().mean()), int((image & ~drawable).sum())


def job_metrics(model: ImageModel, trace, sampling: SamplingSettings) -> dict:
    """One run's numbers, as `bench --out` keeps them per job and `bench-report` pools them: the same
    quantities as a `MethodResult`, with the sums a pooled ratio needs, and the length of the accepted run
    that committed each grid cell (acceptance by position)."""
    passes = [it for it in trace.iterations if it.verifies_drafts]
    likelihood = _log_likelihood(model, trace, sampling)
    run_length = acceptance_maps(trace)["run_length"]
    metrics = {
        "method": trace.method,
        "lossless": trace.lossless,
        "nfe": trace.nfe,
        "tokens": len(trace.tokens),
        "seconds": trace.seconds,
        "step_compression": len(trace.tokens) / trace.nfe,
        "draft_passes": len(passes),
        "accepted": sum(it.accepted for it in passes),
        "changed": sum(it.changed for it in passes),
        "carried": sum(it.carried for it in passes),
        "longest_stall": max((length for _, length in stalls(trace)), default=0),
        "stalled_passes": sum(length for _, length in stalls(trace)),
        "forward_ms": sum(it.forward_ms for it in trace.iterations),
        "verify_ms": sum(it.verify_ms for it in passes),
        "nll_under_ar": None if likelihood is None else -likelihood[0],
        "outside_ar": None if likelihood is None else likelihood[1],
        "run_length": [None if np.isnan(value) else float(value) for value in run_length.ravel()],
        "grid": [trace.geometry.rows, trace.geometry.cols],
    }
    if has_trees(trace):
        metrics["tau"] = float(per_tree(trace)["tau"].mean())
    return metrics


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def bench(
    model: ImageModel,
    methods: list[str],
    prompts: list[str],
    seeds: Iterable[int],
    sampling: SamplingSettings,
    params: dict[str, dict] | None = None,
    compare_generate: bool = True,
) -> BenchReport:
    seeds = list(seeds)
    methods = ["ar"] + [m for m in methods if m != "ar"]
    for name in methods:
        get_method(name)
    runs: dict[str, list] = {name: [] for name in methods}
    params = params or {}
    for name in methods:  # warm-up: lazy imports, allocator, prompt encoder
        run(model, name, prompts[0], seeds[0], sampling, params.get(name))
    for prompt in prompts:
        for seed in seeds:
            for name in methods:
                runs[name].append(run(model, name, prompt, seed, sampling, params.get(name)))
    likelihoods = {name: [_log_likelihood(model, trace, sampling) for trace in runs[name]] for name in methods}
    ar_seconds = statistics.fmean(t.seconds for t in runs["ar"])
    report = BenchReport(
        model=model.name,
        device=str(model.device),
        threads=torch.get_num_threads(),
        sampling=sampling.to_dict(),
        prompts=prompts,
        seeds=seeds,
    )
    for name in methods:
        traces = runs[name]
        nfe = statistics.fmean(t.nfe for t in traces)
        tokens = statistics.fmean(len(t.tokens) for t in traces)
        seconds = statistics.fmean(t.seconds for t in traces)
        passes = [it for t in traces for it in t.iterations if it.verifies_drafts]
        forward_ms = sum(it.forward_ms for t in traces for it in t.iterations)
        stalled = [found for t in traces for found in stalls(t)]
        report.results.append(
            MethodResult(
                method=name,
                lossless=traces[0].lossless,
                runs=len(traces),
                mean_nfe=nfe,
                mean_tokens=tokens,
                mean_seconds=seconds,
                step_compression=tokens / nfe,
                latency_speedup=ar_seconds / seconds,
                worst_nfe=max(t.nfe for t in traces),
                accepted_per_pass=statistics.fmean(it.accepted for it in passes) if passes else 0.0,
                changed_per_pass=statistics.fmean(it.changed for it in passes) if passes else 0.0,
                changed_share=changed_share(passes) or 0.0,
                longest_stall=max((length for _, length in stalled), default=0),
                stall_share=sum(length for _, length in stalled) / len(passes) if passes else 0.0,
                verify_share=sum(it.verify_ms for it in passes) / max(forward_ms, 1e-9),
                trace_share=sum(it.record_ms for t in traces for it in t.iterations) / (1000 * seconds * len(traces)),
                nll_under_ar=None
                if None in likelihoods[name]
                else -statistics.fmean(ll for ll, _ in likelihoods[name]),
                outside_ar=sum(outside for _, outside in filter(None, likelihoods[name])),
                trees=_tree_result(traces) if has_trees(traces[0]) else None,
            )
        )
    if compare_generate and model.reference_generate is not None:
        report.reference = _compare_generate(model, prompts, seeds, sampling)
    return report


def _compare_generate(
    model: ImageModel, prompts: list[str], seeds: list[int], sampling: SamplingSettings
) -> ReferenceResult | None:
    """Time our AR loop and the family's generate() at the benchmark's sampling. Where that generate()
    cannot form guidance this way (tiny's takes its prompt as embeddings, which transformers cannot
    guide; Janus's always guides), both run at the nearest setting it can: guidance off, then the
    model's default."""
    reference = model.reference_generate
    options = [sampling.guidance_scale, 1.0, model.default_sampling.guidance_scale]
    for scale in dict.fromkeys(options):
        settings = SamplingSettings(**{**sampling.to_dict(), "guidance_scale": scale})
        try:
            reference(prompts[0], settings, seeds[0])  # also the warm-up
        except ValueError:
            continue
        ours, theirs = 0.0, 0.0
        for prompt in prompts:
            for seed in seeds:
                ours += _timed(partial(run, model, "ar", prompt, seed, settings))
                theirs += _timed(partial(reference, prompt, settings, seed))
        tokens = model.geometry.seq_len * len(prompts) * len(seeds)
        return ReferenceResult(tokens / ours, tokens / theirs, scale)
    return None
