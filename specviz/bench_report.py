"""`python -m specviz bench-report DIR`: every rank's results of `bench --out DIR` merged into tables and figures.

It reads the results wherever they are in the folder, so a run made by any number of ranks, resumed or
not, merges the same way. Per method: runs and failures, NFE, step compression and latency speedup as
medians with their interquartile range (each run's latency against AR's run of the same prompt and seed),
drafts accepted per pass, stalls, NLL under AR; the same per category where the prompt set has them
(PartiPrompts' categories, GenEval's tags, DPG-Bench's sources). Figures (matplotlib, PDF, SVG or PNG):
step compression per method, seconds against NFE for every run, and acceptance by position (the mean
length of the accepted run that committed each grid cell).

Quality: the CLIP score of every method's images with a CLIP model from a local folder (`--clip`,
`specviz.quality`); without one the report says so. It always gives NLL under AR, the deviation measure
every discrete run has.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

import numpy as np

from specviz.inputs import InputError
from specviz.viz.narration import ratio_text
from specviz.viz.palette import OKABE_ITO

FIGURE_STEMS = ("step-compression", "latency-vs-nfe", "acceptance-by-position")
COLOURS = [OKABE_ITO[name] for name in ("black", "orange", "sky_blue", "bluish_green", "blue", "vermillion",
                                        "reddish_purple", "yellow")]  # fmt: skip


class NoResults(InputError):
    """The folder holds no result of `bench --out`."""


def load(root: Path) -> tuple[dict, list[dict], list[dict]]:
    """The run's settings, its results and its failures (a failure later redone is not one)."""
    settings_path = root / "run.json"
    if not settings_path.is_file():
        raise NoResults(f"{root} holds no run.json: not a folder written by `bench --out`")
    settings = json.loads(settings_path.read_text())
    results = [json.loads(path.read_text()) for path in sorted(root.glob("jobs/*/*.json"))
               if not path.name.endswith(".error.json")]  # fmt: skip
    done = {(r["job"]["method"], r["job"]["index"], r["job"]["seed"]) for r in results}
    errors = [json.loads(path.read_text()) for path in sorted(root.glob("jobs/*/*.error.json"))]
    errors = [e for e in errors if (e["job"]["method"], e["job"]["index"], e["job"]["seed"]) not in done]
    if not results and not errors:
        raise NoResults(f"{root} holds no finished job yet")
    return settings, results, errors


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, median, q3 = np.percentile(values, [25, 50, 75])
    return float(q1), float(median), float(q3)


def method_rows(results: list[dict], errors: list[dict], methods: list[str]) -> list[dict]:
    """One row per method: medians with interquartile ranges, and pooled rates."""
    by_method: dict[str, list[dict]] = defaultdict(list)
    for result in results:
        by_method[result["job"]["method"]].append(result["metrics"])
    failed = defaultdict(int)
    for error in errors:
        failed[error["job"]["method"]] += 1
    rows = []
    for method in methods:
        runs = by_method.get(method, [])
        row: dict = {"method": method, "runs": len(runs), "failed": failed[method]}
        if runs:
            speedups = [m["latency_speedup"] for m in runs if "latency_speedup" in m]
            nll = [m["nll_under_ar"] for m in runs if m.get("nll_under_ar") is not None and not m["outside_ar"]]
            draft_passes = sum(m["draft_passes"] for m in runs)
            row.update(
                lossless=runs[0]["lossless"],
                nfe=statistics.fmean(m["nfe"] for m in runs),
                step_compression=_quartiles([m["step_compression"] for m in runs]),
                latency_speedup=_quartiles(speedups) if speedups else None,
                seconds=statistics.median(m["seconds"] for m in runs),
                accepted_per_pass=sum(m["accepted"] for m in runs) / draft_passes if draft_passes else 0.0,
                longest_stall=max(m["longest_stall"] for m in runs),
                stall_share=sum(m["stalled_passes"] for m in runs) / draft_passes if draft_passes else 0.0,
                nll_under_ar=statistics.fmean(nll) if nll else None,
                outside_ar=sum(m.get("outside_ar") or 0 for m in runs),
                tau=statistics.fmean(m["tau"] for m in runs) if "tau" in runs[0] else None,
            )
        rows.append(row)
    return rows


def _spread(quartiles: tuple[float, float, float] | None, ratio: bool = False) -> str:
    if quartiles is None:
        return "-"
    low, median, high = quartiles
    if ratio:
        return f"{ratio_text(median)} ({ratio_text(low)} to {ratio_text(high)})"
    return f"{median:.2f}x ({low:.2f}-{high:.2f})"


def methods_table(rows: list[dict]) -> list[str]:
    lines = [
        "| method | lossless | runs | failed | NFE | step compression | latency speedup | seconds | accepted/pass "
        "| longest stall | in stalls | tau | NLL under AR |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        if not row["runs"]:
            lines.append(f"| {row['method']} | - | 0 | {row['failed']} |" + " - |" * 9)
            continue
        nll = "-" if row["nll_under_ar"] is None else f"{row['nll_under_ar']:.3f}"
        if row["outside_ar"]:
            nll += f" ({row['outside_ar']} tokens outside AR's support left out)"
        tau = "-" if row["tau"] is None else f"{row['tau']:.2f}"
        lines.append(
            f"| {row['method']} | {'yes' if row['lossless'] else 'no'} | {row['runs']} | {row['failed']} | "
            f"{row['nfe']:.1f} | {_spread(row['step_compression'])} | {_spread(row['latency_speedup'], True)} | "
            f"{row['seconds']:.3f} | {row['accepted_per_pass']:.2f} | {row['longest_stall']} | "
            f"{row['stall_share']:.1%} | {tau} | {nll} |"
        )
    return lines


def category_tables(results: list[dict], methods: list[str]) -> list[str]:
    """Median step compression and latency speedup per category and method."""
    cells: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for result in results:
        cells[(result["job"]["category"], result["job"]["method"])].append(result["metrics"])
    categories = sorted({category for category, _ in cells if category})
    if not categories:
        return []
    lines = []
    for title, key in (("Step compression", "step_compression"), ("Latency speedup", "latency_speedup")):
        lines += ["", f"### {title} by category (median over its runs)", ""]
        lines += ["| category | runs | " + " | ".join(methods) + " |", "|---|---:|" + "---:|" * len(methods)]
        for category in categories:
            row = [category, str(len(cells.get((category, methods[0]), [])))]
            for method in methods:
                values = [m[key] for m in cells.get((category, method), []) if key in m]
                row.append("-" if not values else f"{statistics.median(values):.2f}x")
            lines.append("| " + " | ".join(row) + " |")
    return lines


def quality_lines(clip: dict[str, float] | None, weights: Path | None) -> list[str]:
    """The quality section: CLIP scores where a scorer's weights were given, else what is there instead."""
    lines = ["", "## Quality", ""]
    if clip:
        lines += [f"CLIP score (100 x the cosine of the image's and the prompt's CLIP embeddings, floored at 0, "
                  f"mean over the images), with the CLIP model in `{weights}`:", "",
                  "| method | CLIP score |", "|---|---:|"]  # fmt: skip
        lines += [f"| {method} | {score:.2f} |" for method, score in clip.items()]
        lines += [""]
    else:
        lines += [
            "No CLIP score: give `bench-report DIR --clip FOLDER`, a local copy of a CLIP model (nothing is "
            "downloaded). FID is not computed here: the scorers' Inception networks come with torchvision, which "
            "does not import beside this project's CPU build of torch; the images are kept under `images/` for it.",
            "",
        ]
    lines.append(
        "The deviation measure every discrete run has is NLL under AR: the mean negative log-likelihood (nats) of the "
        "images' tokens under the AR model at the same sampling; a lossless method's matches AR's within noise, a "
        "lossy method's differs where it draws other images."
    )
    return lines


def markdown(
    settings: dict, results: list[dict], errors: list[dict], clip: dict[str, float] | None = None,
    weights: Path | None = None,
) -> str:  # fmt: skip
    methods = settings["methods"]
    rows = method_rows(results, errors, methods)
    devices = sorted({result["device"] for result in results})
    jobs = settings["prompts"]["count"] * len(settings["seeds"]) * len(methods)
    lines = [
        f"# Benchmark: {settings['model']}, {settings['prompts']['name']}",
        "",
        f"{settings['prompts']['count']} prompts x {len(settings['seeds'])} seeds x {len(methods)} methods: "
        f"{len(results)} of {jobs} jobs done, {len(errors)} failed; on {', '.join(devices) or '-'}; sampling "
        f"{settings['sampling']}.",
        "",
        "Step compression and latency speedup: the median over runs, the interquartile range in brackets; each "
        "run's latency is a ratio against AR's run of the same prompt and seed on the same rank.",
        "",
        *methods_table(rows),
        *category_tables(results, methods),
        *quality_lines(clip, weights),
    ]
    if errors:
        lines += ["", "## Failed jobs", ""]
        lines += [f"- {e['job']['method']} on prompt {e['job']['index']}, seed {e['job']['seed']}: `{e['error']}`"
                  for e in errors[:50]]  # fmt: skip
    return "\n".join(lines) + "\n"


def figures(results: list[dict], methods: list[str], out: Path, formats: list[str]) -> list[Path]:
    """The three figures in every format asked for; the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_method = {method: [r["metrics"] for r in results if r["job"]["method"] == method] for method in methods}
    shown = [method for method in methods if by_method[method]]
    colour = {method: COLOURS[index % len(COLOURS)] for index, method in enumerate(methods)}
    written = []

    def save(figure, stem: str) -> None:
        for fmt in formats:
            path = out / f"{stem}.{fmt}"
            figure.savefig(path, dpi=200, bbox_inches="tight")
            written.append(path)
        plt.close(figure)

    figure, axes = plt.subplots(figsize=(max(4.0, 0.7 * len(shown) + 1.5), 3.2))
    axes.boxplot([[m["step_compression"] for m in by_method[method]] for method in shown], showfliers=True)
    axes.set_xticks(range(1, len(shown) + 1), shown, rotation=30, ha="right")
    axes.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    axes.set_ylabel("step compression (tokens per pass)")
    axes.set_title("Step compression per run")
    save(figure, "step-compression")

    figure, axes = plt.subplots(figsize=(5.0, 3.6))
    for method in shown:
        runs = by_method[method]
        axes.scatter([m["nfe"] for m in runs], [m["seconds"] for m in runs], s=14, color=colour[method],
                     label=method, alpha=0.8)  # fmt: skip
    axes.set_xlabel("model passes (NFE)")
    axes.set_ylabel("seconds per image")
    axes.set_title("Latency against passes, every run")
    axes.legend(fontsize=7, frameon=False)
    save(figure, "latency-vs-nfe")

    drafted = [method for method in shown if method != "ar"]
    columns = max(1, min(4, len(drafted)))
    rows = max(1, -(-len(drafted) // columns))
    figure, grid = plt.subplots(rows, columns, figsize=(2.4 * columns, 2.4 * rows), squeeze=False)
    for axes in grid.ravel():
        axes.set_axis_off()
    means = {}
    for method in drafted:
        lengths = np.array([[np.nan if v is None else v for v in m["run_length"]] for m in by_method[method]])
        rows_, cols_ = by_method[method][0]["grid"]
        means[method] = np.nanmean(lengths, axis=0).reshape(rows_, cols_)
    top = max([float(np.nanmax(mean)) for mean in means.values()] + [1.0])
    image = None
    for axes, (method, mean) in zip(grid.ravel(), means.items(), strict=False):
        image = axes.imshow(mean, cmap="viridis", vmin=1, vmax=top)  # one scale: the panels compare
        axes.set_title(method, fontsize=9)
    if image is not None:
        figure.colorbar(image, ax=grid.ravel().tolist(), fraction=0.03, pad=0.02, label="tokens")
    figure.suptitle("Acceptance by position: mean length of the run that committed each cell", fontsize=9)
    save(figure, "acceptance-by-position")
    return written


def bench_report(root: Path, formats: list[str], clip_weights: Path | None = None) -> tuple[Path, list[Path]]:
    """report.md, report.json and the figures under ROOT/report (and CLIP scores with a CLIP model's folder)."""
    settings, results, errors = load(root)
    clip = None
    if clip_weights is not None:
        from specviz.quality import clip_scores

        clip = clip_scores(root, results, clip_weights)
    out = root / "report"
    out.mkdir(exist_ok=True)
    methods = settings["methods"]
    page = out / "report.md"
    page.write_text(markdown(settings, results, errors, clip, clip_weights))
    rows = method_rows(results, errors, methods)
    summary = {"settings": settings, "methods": rows, "clip_score": clip}
    (out / "report.json").write_text(json.dumps(summary, indent=1))
    written = figures(results, methods, out, formats) if results else []
    return page, written
