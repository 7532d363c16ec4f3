"""Every target of the embedded model as a stage (issue 29), measured on one weights folder in one command.

    python -m specviz.stage.targets [--weights DIR] [--seeds 2] [--captions 200] [--json FILE]

Prints one line per target: what is asked, the value measured and whether it is met. The runs:

- entropy per token along AR samples at the weights' default sampling (`measure`), for the shipped
  training captions and free text;
- `bench` on the free-text prompts (prompts the model was not trained on): SJD at W = 16 for the share
  of carried drafts that change per pass and the share of passes in stalls; SJD, SCD-MC and SCD-GS at
  W = 32 for the SCD effect; SJD, LANTERN and GSD at their defaults for the relaxed methods' gain;
- recognition (`recognition`) of AR samples for `--captions` training captions x `--seeds` seeds: by the
  recogniser (issue 60: >= 60% / 80% of its own top-1 / top-5 on real held-out designs), the nearest
  training image beside it;
- AR seconds per image (bench's AR runs, on the threads `SPECVIZ_THREADS` gives) and the weights' size.

Run it on a quiet machine: the AR time is a timing.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specviz.core.settings import SamplingSettings

if TYPE_CHECKING:
    from specviz.models.tiny.adapter import TinyModel

MEGABYTE = 1024 * 1024


@dataclass(frozen=True)
class Target:
    name: str
    asked: str
    measured: float
    met: bool | None  # None: a figure shown beside the targets, with none of its own
    unit: str = ""

    def line(self) -> str:
        value = f"{self.measured:.0%}" if self.unit == "%" else f"{self.measured:.3g}{self.unit}"
        verdict = "       " if self.met is None else "met    " if self.met else "MISSED "
        return f"{verdict} {self.name:<48} {self.asked:<12} {value}"


def measure_targets(weights: Path, seeds: int, captions: int, cache: Path) -> list[Target]:
    from specviz.measure.bench import bench
    from specviz.models.tiny.adapter import TinyModel
    from specviz.stage.measure import CONFIDENT, report
    from specviz.stage.recognition import training_captions
    from specviz.stage.samples import FREE_TEXT, TRAINING_CAPTIONS

    model = TinyModel.load(weights)
    sampling: SamplingSettings = model.default_sampling
    targets = []
    for label, prompts in (("training captions", TRAINING_CAPTIONS), ("free text", FREE_TEXT)):
        entropy, confident = report(model, prompts, seeds, sampling)
        targets.append(Target(f"entropy per token, {label}", ">= 1.0 nats", entropy, entropy >= 1.0, " nats"))
        targets.append(
            Target(f"positions with top p > {CONFIDENT}, {label}", "<= 30%", confident, confident <= 0.30, "%")
        )

    def results(methods: list[str], window: int | None) -> dict:
        params = {name: {"window": window} for name in methods} if window else None
        found = bench(model, methods, FREE_TEXT, range(seeds), sampling, params, compare_generate=False)
        return {result.method: result for result in found.results}

    narrow = results(["sjd"], 16)
    sjd = narrow["sjd"]
    targets.append(Target("SJD W=16: carried drafts changed per pass", ">= 60%", sjd.changed_share,
                          sjd.changed_share >= 0.60, "%"))  # fmt: skip
    targets.append(Target("SJD W=16: passes in stalls", "<= 10%", sjd.stall_share, sjd.stall_share <= 0.10, "%"))
    ar_seconds = narrow["ar"].mean_seconds
    wide = results(["sjd", "scd-mc", "scd-gs"], 32)
    for method in ("scd-mc", "scd-gs"):
        ratio = wide[method].mean_nfe / wide["sjd"].mean_nfe
        targets.append(Target(f"{method} / SJD passes, W=32", "<= 0.85", ratio, ratio <= 0.85))
    relaxed = results(["sjd", "lantern", "gsd"], None)
    for method in ("lantern", "gsd"):
        ratio = relaxed[method].mean_nfe / relaxed["sjd"].mean_nfe
        targets.append(Target(f"{method} / SJD passes, defaults", "<= 0.90", ratio, ratio <= 0.90))
    targets += recognition_targets(model, training_captions(cache, captions), seeds, cache)
    targets.append(Target("AR seconds per image", "<= 1.5 s", ar_seconds, ar_seconds <= 1.5, " s"))
    size = sum(path.stat().st_size for path in weights.glob("*.safetensors")) / MEGABYTE
    targets.append(Target("weights (head included)", "<= 40 MB", size, size <= 40, " MB"))
    return targets


def recognition_targets(model: TinyModel, captions: list[str], seeds: int, cache: Path) -> list[Target]:
    """The recogniser's top-1 / top-5 on the samples as a share of its own on real held-out designs (>= 60% /
    80%), and the nearest-image figures beside them (no target: they reward memorising)."""
    from specviz.stage.recognition import recognised, shipped_recogniser

    recogniser = shipped_recogniser()
    found = recognised(model, captions, seeds, cache, recogniser=recogniser)
    targets = [
        Target("nearest training image, top-1 (no target)", "-", found.by_caption.top1, None, "%"),
        Target("nearest training image, top-5 (no target)", "-", found.by_caption.top5, None, "%"),
    ]
    if recogniser is None or found.by_recogniser is None:
        return [*targets, Target("recogniser's weights (assets/recogniser)", "present", 0, False)]
    for name, share, own, least in (
        ("top-1", found.by_recogniser.top1, recogniser.held_out[0], 0.6),
        ("top-5", found.by_recogniser.top5, recogniser.held_out[1], 0.8),
    ):
        asked = f">= {least:.0%} of {own:.0%}"
        targets.append(Target(f"recognised by the recogniser, {name}", asked, share, share >= least * own, "%"))
    return targets


def main(argv: list[str] | None = None) -> None:
    from specviz.core.threads import configure_threads
    from specviz.models.tiny.adapter import ASSETS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", type=Path, default=ASSETS)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--captions", type=int, default=200, help="training captions whose samples are recognised")
    parser.add_argument("--cache", type=Path, default=Path(".cache"), help="where the emoji designs are kept")
    parser.add_argument("--json", type=Path, help="also write the targets to this JSON file")
    args = parser.parse_args(argv)
    threads = configure_threads()
    targets = measure_targets(args.weights, args.seeds, args.captions, args.cache)
    print(f"{args.weights} on {threads} threads, seeds 0..{args.seeds - 1}:")
    for target in targets:
        print(target.line())
    if args.json:
        args.json.write_text(json.dumps([asdict(target) for target in targets], indent=1) + "\n")


if __name__ == "__main__":
    main()
