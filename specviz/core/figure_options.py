"""What the `figures` command offers, without matplotlib: formats, widths, styles and the figures.

The command line describes these in its help before anything heavy is imported;
`specviz.viz.publication` draws them (FIGURES there: each kind below with its drawing function).
"""

from __future__ import annotations

from dataclasses import dataclass

FORMATS = ("pdf", "svg", "png")
WIDTH_RANGE_IN = (1.5, 16.0)  # narrower cannot hold a label; wider is no page or slide


@dataclass(frozen=True)
class Style:
    """Type sizes and theme of one target: a two-column paper or a slide (light or dark)."""

    name: str
    width_in: float  # default width
    font_pt: float
    small_pt: float  # ticks and legends
    line_pt: float
    titles: bool  # a paper's caption replaces the title
    dark: bool
    serif: bool  # Times-like text next to a paper's body text
    png_dpi: int

    @property
    def font_in(self) -> float:
        return self.font_pt / 72


STYLES = {
    "paper": Style("paper", 3.3, 9, 8, 0.6, titles=False, dark=False, serif=True, png_dpi=600),
    "slides": Style("slides", 6.4, 14, 12, 1.0, titles=True, dark=False, serif=False, png_dpi=300),
    "dark": Style("dark", 6.4, 14, 12, 1.0, titles=True, dark=True, serif=False, png_dpi=300),
}


@dataclass(frozen=True)
class FigureKind:
    """One figure as the command line offers it: its file name, what it shows, whether it draws one trace
    or all of them (`specviz.viz.publication.Drawing` adds how it is drawn and what it needs)."""

    name: str
    title: str
    per_trace: bool
    at_iteration: bool = False  # drawn at one iteration, which its file name gives


# every figure `figures` writes, in the order it writes them; publication.FIGURES adds how each is drawn
FIGURE_KINDS = (
    FigureKind("acceptance-map", "acceptance map", per_trace=True),
    FigureKind("window", "window at an iteration", per_trace=True, at_iteration=True),
    FigureKind("iterations", "accepted length and drafts changed per iteration", per_trace=True),
    FigureKind("comparison", "NFE, step compression and latency against AR", per_trace=False),
    FigureKind("depth-map", "draft-tree depth map", per_trace=True),
    FigureKind("tree-shapes", "per-tree (depth, top-k) maps", per_trace=True),
)
