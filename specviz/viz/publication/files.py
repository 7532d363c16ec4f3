"""Which figures a set of traces gets and the files they are written to: options checked, file names
from the traces (slugs that cannot leave the folder), formats and their metadata."""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import matplotlib as mpl
from matplotlib.figure import Figure

from specviz.core.figure_options import FIGURE_KINDS, FORMATS, STYLES, WIDTH_RANGE_IN, FigureKind, Style
from specviz.metrics import (
    has_trees,
)
from specviz.trace import Trace
from specviz.viz.publication.drawings import (
    acceptance_map,
    comparison,
    comparison_notes,
    depth_map,
    iterations,
    shown_iteration,
    tree_shapes,
    window,
)
from specviz.viz.publication.style import Decoder, FigureOptionError, GridTooFine, Setting, rc_params

# a PNG has at most this many pixels (128 MB of RGBA while it is drawn; 0.9 GB at peak for the largest): a
# figure that would have more at its style's resolution is written at a lower one. Grid panels are already
# bounded by the width (style.MAX_GRID_HEIGHT), so this lowers only the resolution of figures made wider
# than the styles' own (--width-in 16 at the paper's 600 dpi: about 430 dpi)
MAX_PNG_PIXELS = 32_000_000
METADATA = {"pdf": {"Creator": "specviz", "CreationDate": None}, "svg": {"Creator": "specviz", "Date": None}, "png": {}}
_DRAWING = threading.Lock()  # matplotlib's rcParams are global: one figure is drawn at a time


@dataclass(frozen=True)
class Need:
    """Records a figure needs from a trace; `missing` completes 'no ... in TRACE'."""

    missing: str
    present: Callable[[Trace], bool]


@dataclass(frozen=True)
class Drawing(FigureKind):
    """A figure with what it needs from a trace and its drawing function (None: announced, drawn once
    traces record its need)."""

    needs: Need | None = None
    draw: Callable[..., Figure] | None = None
    notes: Callable[[Sequence[Trace]], list[str]] | None = None  # what the figure leaves out, if anything


def _records_continuous_tokens(trace: Trace) -> bool:
    """Trace version 2 records no continuous tokens; continuous models (issue 13) add them."""
    return False


DRAFT_TREES = Need("draft trees", has_trees)
WINDOWS = Need("Jacobi windows", lambda trace: not has_trees(trace))  # a tree run's passes are trees
CONTINUOUS_TOKENS = Need("continuous-token records", _records_continuous_tokens)


@dataclass
class FigureFiles:
    """What `write_figures` wrote, and one line per figure it skipped or showed only in part."""

    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


DRAWINGS = {  # how each figure of FIGURE_KINDS is drawn, and what it needs from a trace
    "acceptance-map": {"draw": acceptance_map},
    "window": {"draw": window, "needs": WINDOWS},
    "iterations": {"draw": iterations},
    "comparison": {"draw": comparison, "notes": comparison_notes},
    "depth-map": {"draw": depth_map, "needs": DRAFT_TREES},
    "tree-shapes": {"draw": tree_shapes, "needs": DRAFT_TREES},
}
FIGURES = (
    *(Drawing(**asdict(kind), **DRAWINGS[kind.name]) for kind in FIGURE_KINDS),
    Drawing("token-acceptance", "per-token acceptance and log density ratio", per_trace=True, needs=CONTINUOUS_TOKENS),
)


def parse_formats(text: str) -> list[str]:
    """'pdf,svg' as ['pdf', 'svg'], refusing unknown or no formats."""
    formats = [part.strip().lower().lstrip(".") for part in text.split(",") if part.strip()]
    unknown = [name for name in formats if name not in FORMATS]
    if unknown or not formats:
        raise FigureOptionError(f"unknown format {', '.join(unknown) or repr(text)}; choose from {', '.join(FORMATS)}")
    return list(dict.fromkeys(formats))


def check_options(
    traces: Sequence[tuple[str, Trace]], style: str, width_in: float | None, iteration: int | None
) -> Style:
    """The style asked for, once the width and iteration are known to fit every trace."""
    if style not in STYLES:
        raise FigureOptionError(f"unknown style {style!r}; choose from {', '.join(STYLES)}")
    low, high = WIDTH_RANGE_IN
    if width_in is not None and not low <= width_in <= high:
        raise FigureOptionError(f"width {width_in} in is out of range; give {low} to {high} inches")
    if not traces:
        raise FigureOptionError("no traces given")
    for name, trace in traces:
        if not trace.iterations:
            raise FigureOptionError(f"{name} has no iterations to draw")
        if iteration is not None and not 0 <= iteration < len(trace.iterations):
            last = len(trace.iterations) - 1
            raise FigureOptionError(f"iteration {iteration} is out of range for {name}: it has iterations 0 to {last}")
    return STYLES[style]


SLUG_CHARS = 40  # of each part of a file name taken from a trace (method, model, prompt)


def slug(text: str, fallback: str) -> str:
    """A file-name part from any text: lower-case ASCII letters, digits and single hyphens, at most
    SLUG_CHARS long, or `fallback` where nothing is left. Names taken from a trace go through here, so
    an uploaded trace cannot name a path ('../..', '/', a NUL byte) or an over-long file."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower())[:SLUG_CHARS].strip("-") or fallback


def file_stems(traces: Sequence[Trace]) -> list[str]:
    """A file name stem per trace: its method, with the model, prompt and seed where those differ
    between the traces given, and a counter where that still leaves two alike; every part a slug."""
    parts = [[slug(trace.method, "method")] for trace in traces]
    for value in (lambda t: slug(t.model, "model"), lambda t: slug(t.prompt, "prompt"), lambda t: f"seed{t.seed}"):
        if len({value(trace) for trace in traces}) > 1:
            for part, trace in zip(parts, traces, strict=True):
                part.append(value(trace))
    stems, seen = [], {}
    for part in parts:
        stem = "-".join(part)
        seen[stem] = seen.get(stem, 0) + 1
        stems.append(stem if seen[stem] == 1 else f"{stem}-{seen[stem]}")
    return stems


def _save(fig: Figure, out: Path, stem: str, formats: Sequence[str], style: Style) -> list[Path]:
    """`fig` as out/stem.FORMAT for each format; a path that would leave `out` once resolved (a symbolic
    link planted in the folder, a stem that is not a plain name) is refused before anything is written."""
    folder = out.resolve()
    paths = [out / f"{stem}.{kind}" for kind in formats]
    for path in paths:
        if path.resolve().parent != folder:
            raise FigureOptionError(f"{path.name[:80]} would be written outside {out}; nothing was written there")
    for kind, path in zip(formats, paths, strict=True):
        dpi = png_dpi(fig, style) if kind == "png" else style.png_dpi  # vector files: only the image panel's
        fig.savefig(path, format=kind, dpi=dpi, metadata=METADATA[kind])
    return paths


def png_dpi(fig: Figure, style: Style) -> float:
    """The style's PNG resolution, or the highest below it at which the figure has at most MAX_PNG_PIXELS."""
    width_in, height_in = fig.get_size_inches()
    return min(style.png_dpi, math.floor(math.sqrt(MAX_PNG_PIXELS / (width_in * height_in))))


def write_figures(
    traces: Sequence[tuple[str, Trace]],
    out: Path,
    formats: Sequence[str] = ("pdf",),
    style: str = "paper",
    width_in: float | None = None,
    iteration: int | None = None,
    decode: Decoder | None = None,
) -> FigureFiles:
    """Every figure of FIGURES that the (name, trace) pairs allow, one file per figure and format,
    into the folder `out` (created if missing); a figure a trace lacks the records for is skipped with
    a note naming the traces by their given names, as is a grid figure whose cells would be too small
    to read (style.GridTooFine: a grid panel is at most MAX_GRID_HEIGHT times the width tall)."""
    chosen = check_options(traces, style, width_in, iteration)
    out.mkdir(parents=True, exist_ok=True)
    setting = Setting(chosen, width_in or chosen.width_in, iteration, decode)
    runs = [trace for _, trace in traces]
    stems = file_stems(runs)
    result = FigureFiles()
    with _DRAWING, mpl.rc_context(rc_params(chosen)):
        for kind in FIGURES:
            lacking = [name for name, trace in traces if kind.needs and not kind.needs.present(trace)]
            if lacking:
                result.notes.append(f"no {kind.needs.missing} in {', '.join(lacking)}: {kind.title} skipped")
            if kind.draw is None:
                continue
            if kind.notes:
                result.notes += kind.notes(runs)
            if not kind.per_trace:
                result.files += _save(kind.draw(runs, setting), out, kind.name, formats, chosen)
                continue
            for (name, trace), stem in zip(traces, stems, strict=True):
                if kind.needs and not kind.needs.present(trace):
                    continue
                suffix = f"-{shown_iteration(trace, iteration)}" if kind.at_iteration else ""
                try:
                    fig = kind.draw(trace, setting)
                except GridTooFine as error:
                    result.notes.append(f"{kind.title} of {name} skipped: {error}")
                    continue
                result.files += _save(fig, out, f"{stem}-{kind.name}{suffix}", formats, chosen)
    return result


def write_figure(name: str, trace: Trace, out: Path, stem: str, kind: str = "png", style: str = "slides") -> Path:
    """One per-trace figure of FIGURES as one file `out/stem.kind`, such as the depth map that `run`
    writes beside a tree run's image (slides style: titled, legible at a glance)."""
    figure = next(figure for figure in FIGURES if figure.name == name)
    if figure.draw is None or not figure.per_trace or (figure.needs and not figure.needs.present(trace)):
        raise FigureOptionError(f"the {figure.title} cannot be drawn from a {trace.method} trace")
    chosen = STYLES[style]
    with _DRAWING, mpl.rc_context(rc_params(chosen)):
        (path,) = _save(figure.draw(trace, Setting(chosen, chosen.width_in, None, None)), out, stem, [kind], chosen)
    return path
