"""What the `figures` command offers, without matplotlib: formats, widths, styles and the figures.

The command line describes these in its help before anything heavy is imported;
`specviz.viz.publication` draws them (FIGURES there: each kind below with its drawing function).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from specviz.trace import Trace
    from specviz.viz.publication import Need

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

    def rc(self) -> dict:
        """matplotlib settings: sizes, colours, embedded TrueType in PDF, text kept as text in SVG
        (editable and typeset by LaTeX's svg package), and a fixed hash salt so files are reproducible."""
        from specviz.viz.palette import BACKGROUND, FOREGROUND  # here: specviz.viz imports plotly

        background, foreground = BACKGROUND[self.dark], FOREGROUND[self.dark]
        return {
            "font.family": "serif" if self.serif else "sans-serif",
            "font.serif": ["STIXGeneral", "DejaVu Serif"],
            "font.sans-serif": ["DejaVu Sans"],
            "mathtext.fontset": "stix" if self.serif else "dejavusans",
            "text.parse_math": False,  # text from a trace ('$' in a prompt) is drawn as written, never as TeX
            "font.size": self.font_pt,
            "axes.labelsize": self.font_pt,
            "axes.titlesize": self.font_pt,
            "figure.titlesize": self.font_pt + 1,
            "xtick.labelsize": self.small_pt,
            "ytick.labelsize": self.small_pt,
            "legend.fontsize": self.small_pt,
            "legend.frameon": False,
            "legend.handlelength": 1.2,
            "legend.handleheight": 1.0,
            "legend.columnspacing": 1.0,
            "axes.linewidth": self.line_pt,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "xtick.major.width": self.line_pt,
            "ytick.major.width": self.line_pt,
            "xtick.major.size": 2.5 * self.line_pt / 0.6,
            "ytick.major.size": 2.5 * self.line_pt / 0.6,
            "lines.linewidth": 1.5 * self.line_pt,
            "hatch.linewidth": 0.6 * self.line_pt,
            "figure.facecolor": background,
            "axes.facecolor": background,
            "savefig.facecolor": background,
            "text.color": foreground,
            "axes.labelcolor": foreground,
            "axes.edgecolor": foreground,
            "xtick.color": foreground,
            "ytick.color": foreground,
            "pdf.fonttype": 42,
            "svg.fonttype": "none",
            "svg.hashsalt": "specviz",
            "svg.id": "specviz",
        }


STYLES = {
    "paper": Style("paper", 3.3, 9, 8, 0.6, titles=False, dark=False, serif=True, png_dpi=600),
    "slides": Style("slides", 6.4, 14, 12, 1.0, titles=True, dark=False, serif=False, png_dpi=300),
    "dark": Style("dark", 6.4, 14, 12, 1.0, titles=True, dark=True, serif=False, png_dpi=300),
}


@dataclass(frozen=True)
class FigureKind:
    """One figure: its file name, what it shows, whether it draws one trace or all of them, what it
    needs from a trace, and its drawing function (None: announced, drawn once traces record its need)."""

    name: str
    title: str
    per_trace: bool
    needs: Need | None = None
    draw: Callable[..., Figure] | None = None
    at_iteration: bool = False  # drawn at one iteration, which its file name gives
    notes: Callable[[Sequence[Trace]], list[str]] | None = None  # what the figure leaves out, if anything


# every figure `figures` writes, in the order it writes them; publication.FIGURES adds how each is drawn
FIGURE_KINDS = (
    FigureKind("acceptance-map", "acceptance map", per_trace=True),
    FigureKind("window", "window at an iteration", per_trace=True, at_iteration=True),
    FigureKind("iterations", "accepted length and drafts changed per iteration", per_trace=True),
    FigureKind("comparison", "NFE, step compression and latency against AR", per_trace=False),
    FigureKind("depth-map", "draft-tree depth map", per_trace=True),
    FigureKind("tree-shapes", "per-tree (depth, top-k) maps", per_trace=True),
)
