"""`python -m specviz bench-report DIR`: every rank's results of `bench --out DIR` merged into tables and figures.

It reads the results wherever they are in the folder, so a run made by any number of ranks, resumed or
not, merges the same way. Per method: runs and failures, NFE, step compression and latency speedup as
medians with their interquartile range (each run's latency against AR's run of the same prompt and seed),
drafts accepted per pass, stalls, NLL under AR; the same per category where the prompt set has them
(PartiPrompts' categories, GenEval's tags, DPG-Bench's sources). Figures (matplotlib, PDF, SVG or PNG):
step compression per method, seconds against NFE for every run, and acceptance by position (the mean
length of the accepted run that committed each grid cell).

Quality: the CLIP score of every method's images with a CLIP model from a local folder (`--clip`,
`specviz.measure.quality`); without one the report says so. It always gives NLL under AR, the deviation measure
every discrete run has.

The folder is untrusted input (it may come from another machine): every file is read by the loaders
here, bounded, as a regular file reached without following a link (specviz.core.inputs.read_inside), and
checked against the schema of what a bench writes (pydantic, strict: no value converted from another
type); the report is written inside the folder, never through a link. A bad file is refused with one
line naming it and what is wrong. `specviz.measure.sharded` reads a resumed run's files with the same loaders.
"""

from __future__ import annotations

import json
import re
import statistics
import warnings
from collections import defaultdict
from io import BytesIO
from pathlib import Path
from typing import Annotated

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from specviz.core.inputs import (
    MAX_PROMPT_FILE_BYTES,
    MAX_SEED,
    FolderError,
    InputError,
    brief,
    entry_inside,
    list_inside,
    read_json_inside,
    shown_path,
    write_inside,
)
from specviz.viz.narration import ratio_text
from specviz.viz.palette import OKABE_ITO

FIGURE_STEMS = ("step-compression", "latency-vs-nfe", "acceptance-by-position")
COLOURS = [OKABE_ITO[name] for name in ("black", "orange", "sky_blue", "bluish_green", "blue", "vermillion",
                                        "reddish_purple", "yellow")]  # fmt: skip
REPORT = "report"  # the report's subfolder of a results folder
MAX_SETTINGS_BYTES = 1024 * 1024  # run.json
MAX_RESULT_BYTES = 8 * 1024 * 1024  # a job's result: its metrics and its acceptance map
MAX_FAILURE_BYTES = 1024 * 1024  # a failed job's record
MAX_CELLS = 256 * 256  # grid cells of a result's acceptance map
MAX_COUNT = 10**12  # passes, tokens, drafts: far beyond any run
MAX_SEEDS = 1000  # as `bench --seeds` allows
MAX_ERROR_SHOWN = 300  # characters of a failed job's error in report.md


class NoResults(InputError):
    """The folder holds no result of `bench --out`."""


class _Record(BaseModel):
    """A file of a results folder: no unknown keys, and no value converted from another type ("5" is no count)."""

    model_config = ConfigDict(extra="forbid", strict=True)


Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Positive = Annotated[int, Field(ge=1, le=MAX_COUNT)]
Amount = Annotated[float, Field(ge=0, allow_inf_nan=False)]  # a duration, a rate, a mean of counts
Name = Annotated[str, Field(min_length=1, max_length=100)]
Label = Annotated[str, Field(max_length=1000)]
Place = Annotated[str, Field(max_length=4096)]


class SamplingRecord(_Record):
    temperature: Annotated[float, Field(ge=0, le=100)]
    top_k: Positive | None
    top_p: Annotated[float, Field(gt=0, le=1)]
    guidance_scale: Annotated[float, Field(ge=0, le=50)]


class PromptsRecord(_Record):
    name: Annotated[str, Field(min_length=1, max_length=4096)]
    category: Label | None
    limit: Positive | None
    count: Positive


class SettingsRecord(_Record):
    """run.json: the settings every rank and every resume of the run shares."""

    model: Name
    weights: Place | None
    methods: Annotated[list[Name], Field(min_length=1, max_length=100)]
    params: Annotated[dict[Name, dict[Name, bool | int | float | Name]], Field(max_length=100)]
    prompts: PromptsRecord
    seeds: Annotated[list[Annotated[int, Field(ge=0, le=MAX_SEED)]], Field(min_length=1, max_length=MAX_SEEDS)]
    sampling: SamplingRecord

    @model_validator(mode="after")
    def _each_method_once(self) -> SettingsRecord:
        if len(set(self.methods)) < len(self.methods):
            raise ValueError("methods names a method twice")
        if len(set(self.seeds)) < len(self.seeds):
            raise ValueError("seeds names a seed twice")
        return self


class JobRecord(_Record):
    index: Count  # the prompt's place in its set
    prompt: Annotated[str, Field(min_length=1, max_length=MAX_PROMPT_FILE_BYTES)]  # as read, before normalising
    category: Label
    seed: Annotated[int, Field(ge=0, le=MAX_SEED)]
    method: Name

    @property
    def stem(self) -> str:  # as specviz.measure.sharded.Job names its files
        return f"{self.index:05d}-s{self.seed}"


class MetricsRecord(_Record):
    """A run's numbers, as specviz.measure.bench.job_metrics gives them (and the latency against AR's run)."""

    method: Name
    lossless: bool
    nfe: Positive
    tokens: Positive
    seconds: Amount
    step_compression: Amount
    draft_passes: Count
    accepted: Count
    changed: Count
    carried: Count
    longest_stall: Count
    stalled_passes: Count
    forward_ms: Amount
    verify_ms: Amount
    nll_under_ar: Amount | None
    outside_ar: Count | None
    run_length: Annotated[list[Amount | None], Field(max_length=MAX_CELLS)]
    grid: Annotated[list[Annotated[int, Field(ge=1, le=MAX_CELLS)]], Field(min_length=2, max_length=2)]
    tau: Amount | None = None  # draft-tree methods
    ar_seconds: Amount | None = None  # where AR's run of the same prompt and seed was done first
    latency_speedup: Amount | None = None

    @model_validator(mode="after")
    def _consistent(self) -> MetricsRecord:
        rows, cols = self.grid
        if len(self.run_length) != rows * cols:
            raise ValueError(f"run_length has {len(self.run_length)} cells; the grid {rows}x{cols} has {rows * cols}")
        if not self.longest_stall <= self.stalled_passes <= self.draft_passes:
            raise ValueError("the stalls do not add up: longest_stall <= stalled_passes <= draft_passes")
        return self


class ResultRecord(_Record):
    """jobs/METHOD/STEM.json: a finished job."""

    job: JobRecord
    metrics: MetricsRecord
    trace: Place
    image: Place
    device: Name

    @model_validator(mode="after")
    def _its_own_files(self) -> ResultRecord:
        method, stem = self.job.method, self.job.stem
        if self.metrics.method != method:
            raise ValueError(f"metrics.method {brief(self.metrics.method)} is not the job's {brief(method)}")
        if Path(self.trace) != Path("traces", method, f"{stem}.json"):
            raise ValueError(f"trace {brief(self.trace)} is not the job's own, traces/{method}/{stem}.json")
        if Path(self.image) != Path("images", method, f"{stem}.png"):
            raise ValueError(f"image {brief(self.image)} is not the job's own, images/{method}/{stem}.png")
        return self


class FailureRecord(_Record):
    """jobs/METHOD/STEM.error.json: a job that raised."""

    job: JobRecord
    error: Annotated[str, Field(max_length=MAX_FAILURE_BYTES)]
    traceback: Annotated[str, Field(max_length=MAX_FAILURE_BYTES)]


def _describe(error: ValidationError) -> str:
    """The first problems of a validation error, each with where in the file it is and the value found there."""
    problems = []
    for item in error.errors()[:3]:
        where = ".".join(str(part) for part in item["loc"])
        message = re.sub(r" or instance of \w+", "", item["msg"].removeprefix("Value error, "))
        if item["type"] not in ("missing", "value_error", "extra_forbidden") and not isinstance(item["input"], dict):
            message += f", got {brief(item['input'])}"
        problems.append(f"{where}: {message}" if where else message)
    more = error.error_count() - len(problems)
    return "; ".join(problems) + (f" (and {more} more)" if more > 0 else "")


def _record(root: Path, relative: str, schema: type[_Record], limit: int, what: str) -> dict:
    """A JSON file of the folder, read bounded and checked against `schema`; as parsed (nothing converted)."""
    where = f"{what} {shown_path(root / relative)}"
    data = read_json_inside(root, relative, limit, what)
    if not isinstance(data, dict):
        raise FolderError(f"{where} holds a JSON {type(data).__name__ if data is not None else 'null'}, not an object")
    try:
        schema.model_validate(data)
    except ValidationError as error:
        raise FolderError(f"{where}: {_describe(error)}") from None
    return data


def _placed(root: Path, relative: str, record: dict, suffix: str, what: str) -> dict:
    """`record`, once its job is the one its file's name says (a result copied to another job's name would
    count as that job done)."""
    job = JobRecord.model_validate(record["job"])
    own = f"jobs/{job.method}/{job.stem}{suffix}"
    if Path(relative) != Path(own):
        raise FolderError(
            f"{what} {shown_path(root / relative)} holds the job of {brief(job.method)} on prompt {job.index}, seed "
            f"{job.seed}, whose file is {own}"
        )
    return record


def read_settings(root: Path) -> dict:
    """run.json, checked; NoResults where there is none."""
    if entry_inside(root, "run.json") is None:
        raise NoResults(f"{shown_path(root)} holds no run.json: not a folder written by `bench --out`")
    return _record(root, "run.json", SettingsRecord, MAX_SETTINGS_BYTES, "settings file")


def read_result(root: Path, relative: str) -> dict:
    """A job's result, checked, at its job's own name."""
    record = _record(root, relative, ResultRecord, MAX_RESULT_BYTES, "result")
    return _placed(root, relative, record, ".json", "result")


def read_failure(root: Path, relative: str) -> dict:
    """A failed job's record, checked, at its job's own name."""
    record = _record(root, relative, FailureRecord, MAX_FAILURE_BYTES, "failure record")
    return _placed(root, relative, record, ".error.json", "failure record")


def _check_belongs(root: Path, relative: str, job: dict, settings: dict) -> None:
    """A job of this run: one of its methods, prompts and seeds."""
    if job["method"] not in settings["methods"] or job["seed"] not in settings["seeds"]:
        problem = f"method {brief(job['method'])} and seed {job['seed']}"
    elif job["index"] >= settings["prompts"]["count"]:
        problem = f"prompt {job['index']} of {settings['prompts']['count']}"
    else:
        return
    raise FolderError(f"{shown_path(root / relative)} holds a job this run does not have ({problem}; see run.json)")


def load(root: Path) -> tuple[dict, list[dict], list[dict]]:
    """The run's settings, its results and its failures (a failure later redone is not one), every file checked:
    regular JSON files only, never through a link, bounded in size, every value of the type and range a bench
    writes; a file that is not is refused with its name and what is wrong."""
    settings = read_settings(root)
    results: list[tuple[str, dict]] = []
    failures: list[tuple[str, dict]] = []
    for folder, _ in list_inside(root, "jobs"):
        if folder.startswith("."):
            continue
        for name, _ in list_inside(root, f"jobs/{folder}"):  # refuses a folder that is a link or a file
            relative = f"jobs/{folder}/{name}"
            if name.startswith(".") or not name.endswith(".json"):  # a temporary file, or not the run's
                continue
            if name.endswith(".error.json"):
                failures.append((relative, read_failure(root, relative)))
            else:
                results.append((relative, read_result(root, relative)))
    grids = {}
    for relative, record in results + failures:
        _check_belongs(root, relative, record["job"], settings)
        if "metrics" in record:
            grids.setdefault(tuple(record["metrics"]["grid"]), relative)
    if len(grids) > 1:
        (first, one), (second, other) = list(grids.items())[:2]
        raise FolderError(
            f"result {shown_path(root / other)} has a {second[0]}x{second[1]} grid where {one} has "
            f"{first[0]}x{first[1]}: one run's images share one grid"
        )
    done = {(r["job"]["method"], r["job"]["index"], r["job"]["seed"]) for _, r in results}
    errors = [e for _, e in failures if (e["job"]["method"], e["job"]["index"], e["job"]["seed"]) not in done]
    if not results and not errors:
        raise NoResults(f"{shown_path(root)} holds no finished job yet")
    return settings, [record for _, record in results], errors


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
            speedups = [m["latency_speedup"] for m in runs if m.get("latency_speedup") is not None]
            taus = [m["tau"] for m in runs if m.get("tau") is not None]
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
                tau=statistics.fmean(taus) if taus else None,
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
                values = [m[key] for m in cells.get((category, method), []) if m.get(key) is not None]
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
        lines += [f"- {e['job']['method']} on prompt {e['job']['index']}, seed {e['job']['seed']}: "
                  f"`{_one_line(e['error'])}`" for e in errors[:50]]  # fmt: skip
    return "\n".join(lines) + "\n"


def _one_line(text: str) -> str:
    """A failed job's error on one line of the report, cut short."""
    text = " ".join(text.split()).replace("`", "'")
    return text if len(text) <= MAX_ERROR_SHOWN else text[:MAX_ERROR_SHOWN] + "..."


def figures(results: list[dict], methods: list[str], root: Path, formats: list[str]) -> list[Path]:
    """The three figures in every format asked for, in ROOT/report; the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_method = {method: [r["metrics"] for r in results if r["job"]["method"] == method] for method in methods}
    shown = [method for method in methods if by_method[method]]
    colour = {method: COLOURS[index % len(COLOURS)] for index, method in enumerate(methods)}
    written = []

    def save(figure, stem: str) -> None:
        for fmt in formats:
            drawn = BytesIO()
            figure.savefig(drawn, format=fmt, dpi=200, bbox_inches="tight")
            write_inside(root, f"{REPORT}/{stem}.{fmt}", drawn.getvalue())  # never through a link
            written.append(root / REPORT / f"{stem}.{fmt}")
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
        with warnings.catch_warnings():  # a cell no run committed by a draft stays blank
            warnings.simplefilter("ignore", RuntimeWarning)
            means[method] = np.nanmean(lengths, axis=0).reshape(rows_, cols_)
    top = max([float(np.nanmax(mean)) for mean in means.values() if np.isfinite(mean).any()] + [1.0])
    image = None
    for axes, (method, mean) in zip(grid.ravel(), means.items(), strict=False):
        image = axes.imshow(mean, cmap="viridis", vmin=1, vmax=top)  # one scale: the panels compare
        axes.set_title(method, fontsize=9)
    if image is not None:
        figure.colorbar(image, ax=grid.ravel().tolist(), fraction=0.03, pad=0.02, label="tokens")
    figure.suptitle("Acceptance by position: mean length of the run that committed each cell", fontsize=9)
    save(figure, "acceptance-by-position")
    return written


def report_files(formats: list[str]) -> list[str]:
    """What `bench_report` writes, relative to the results folder."""
    return [f"{REPORT}/report.md", f"{REPORT}/report.json", *(f"{REPORT}/{stem}.{fmt}" for stem in FIGURE_STEMS
                                                            for fmt in formats)]  # fmt: skip


def bench_report(root: Path, formats: list[str], clip_weights: Path | None = None) -> tuple[Path, list[Path], str]:
    """report.md, report.json and the figures under ROOT/report (and CLIP scores with a CLIP model's folder); the
    page's path, the figures' paths and the page. Every file is written inside ROOT, never through a link."""
    settings, results, errors = load(root)
    clip = None
    if clip_weights is not None:
        from specviz.measure.quality import clip_scores

        clip = clip_scores(root, results, clip_weights)
    methods = settings["methods"]
    page = markdown(settings, results, errors, clip, clip_weights)
    write_inside(root, f"{REPORT}/report.md", page.encode())
    rows = method_rows(results, errors, methods)
    summary = {"settings": settings, "methods": rows, "clip_score": clip}
    write_inside(root, f"{REPORT}/report.json", json.dumps(summary, indent=1).encode())
    written = figures(results, methods, root, formats) if results else []
    return root / REPORT / "report.md", written, page
