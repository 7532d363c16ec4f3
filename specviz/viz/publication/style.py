"""The house style of publication figures: sizes in inches, the palette, grey marks (hatches and outlines
for fates whose colours print alike in grey), and the grid drawing every map and window shares."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import PatchCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from PIL import Image

from specviz.core.figure_options import Style
from specviz.trace import Trace
from specviz.viz.palette import BACKGROUND, FOREGROUND, STATES, colors, lightness

HATCHES = {
    "rejected": "xxxx", "kept": "----", "redrawn": "////", "reset": "\\\\\\\\", "new": "....", "discarded": "||||"
}  # fmt: skip
OUTLINED = frozenset({"accepted"})  # accepted cells are always committed this iteration, so always outlined
GREY_STEP = 10.0  # CIE L* apart: two plain colours this far apart stay distinct when printed in grey
Decoder = Callable[[Trace, list[int]], Image.Image]
# A grid panel is drawn with square cells as wide as its place allows, but never taller than this many
# times the figure's width: a tall grid (256 x 1) is drawn with smaller cells instead of as a figure
# hundreds of inches tall, so a figure's size, and the memory its drawing takes, follow the width asked for.
MAX_GRID_HEIGHT = 1.5
# The smallest cell drawn, in points: a pixel of the PNG at the slides' 300 dpi (two at the paper's 600),
# a quarter of a point in print. A grid that would need smaller cells is not drawn (its figure is skipped
# with a note): neither a cell nor the map's pattern could be read.
MIN_CELL_PT = 0.25


def rc_params(style: Style) -> dict:
    """matplotlib settings: sizes, colours, embedded TrueType in PDF, text kept as text in SVG
    (editable and typeset by LaTeX's svg package), and a fixed hash salt so files are reproducible."""
    background, foreground = BACKGROUND[style.dark], FOREGROUND[style.dark]
    return {
        "font.family": "serif" if style.serif else "sans-serif",
        "font.serif": ["STIXGeneral", "DejaVu Serif"],
        "font.sans-serif": ["DejaVu Sans"],
        "mathtext.fontset": "stix" if style.serif else "dejavusans",
        "text.parse_math": False,  # text from a trace ('$' in a prompt) is drawn as written, never as TeX
        "font.size": style.font_pt,
        "axes.labelsize": style.font_pt,
        "axes.titlesize": style.font_pt,
        "figure.titlesize": style.font_pt + 1,
        "xtick.labelsize": style.small_pt,
        "ytick.labelsize": style.small_pt,
        "legend.fontsize": style.small_pt,
        "legend.frameon": False,
        "legend.handlelength": 1.2,
        "legend.handleheight": 1.0,
        "legend.columnspacing": 1.0,
        "axes.linewidth": style.line_pt,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "xtick.major.width": style.line_pt,
        "ytick.major.width": style.line_pt,
        "xtick.major.size": 2.5 * style.line_pt / 0.6,
        "ytick.major.size": 2.5 * style.line_pt / 0.6,
        "lines.linewidth": 1.5 * style.line_pt,
        "hatch.linewidth": 0.6 * style.line_pt,
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


class FigureOptionError(ValueError):
    """Options that cannot make figures (unknown style or format, width or iteration out of range)."""


class GridTooFine(FigureOptionError):
    """A grid whose cells would be too small to read in a figure of the width asked for."""


@dataclass(frozen=True)
class Setting:
    """Everything a drawing function needs besides the traces."""

    style: Style
    width_in: float
    iteration: int | None
    decode: Decoder | None

    @property
    def palette(self) -> dict[str, str]:
        return colors(self.style.dark)

    @property
    def foreground(self) -> str:
        return FOREGROUND[self.style.dark]


def state_lightness(state: str, dark: bool = False) -> float:
    """CIE L* of a cell state's colour in one theme."""
    return lightness(colors(dark)[state])


def grey_mark(state: str) -> tuple[str, bool]:
    """What tells a state apart when colour is gone, besides its lightness: (hatch, outlined)."""
    return HATCHES.get(state, ""), state in OUTLINED


def hatch_color(fill: str) -> str:
    """Hatch lines that contrast with the fill they cross."""
    return "#000000" if lightness(fill) > 50 else "#FFFFFF"


def state_patch(state: str, setting: Setting, **kwargs: object) -> Patch:
    """A legend swatch of one state: its colour, hatch and outline."""
    fill = setting.palette[state]
    hatch, outlined = grey_mark(state)
    return Patch(
        facecolor=fill,
        hatch=hatch or None,
        hatchcolor=hatch_color(fill),
        edgecolor=setting.foreground if outlined else "none",
        linewidth=setting.style.line_pt * 1.2 if outlined else 0,
        **kwargs,
    )


def mark_patches(patches: Sequence[Patch], states: Sequence[str], setting: Setting) -> None:
    """Give bars or areas already coloured by state their hatch and outline."""
    for patch, state in zip(patches, states, strict=True):
        hatch, outlined = grey_mark(state)
        if hatch:
            patch.set_hatch(hatch)
            patch.set_hatchcolor(hatch_color(setting.palette[state]))
        if outlined:
            patch.set_edgecolor(setting.foreground)
            patch.set_linewidth(setting.style.line_pt)


def new_figure(setting: Setting, height_in: float, title: str) -> Figure:
    """A figure of the asked width, laid out so that nothing spills over its edges."""
    fig = Figure(figsize=(setting.width_in, height_in), layout="constrained")
    fig.get_layout_engine().set(w_pad=2 / 72, h_pad=2 / 72, wspace=0.04, hspace=0.04)
    if setting.style.titles:
        fig.suptitle(title)
    return fig


def title_space(setting: Setting) -> float:
    return 2.2 * setting.style.font_in if setting.style.titles else 0.0


def bare_grid_axes(ax: Axes, rows: int, cols: int) -> None:
    """Axes that show a token grid: square cells, row 0 on top, no ticks."""
    ax.set_xlim(-0.5, cols - 0.5)
    ax.set_ylim(rows - 0.5, -0.5)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)


def grid_panel(rows: int, cols: int, room_in: float, setting: Setting) -> tuple[float, float]:
    """(width, height) in inches of a grid panel of square cells in a place `room_in` wide: as wide as
    the place where the grid is square or wide, narrower where it is so tall that it would be taller than
    MAX_GRID_HEIGHT times the figure's width; GridTooFine where a cell would be smaller than MIN_CELL_PT."""
    tallest = MAX_GRID_HEIGHT * setting.width_in
    cell = min(room_in / cols, tallest / rows)
    if 72 * cell < MIN_CELL_PT:
        most_rows, most_cols = int(72 * tallest / MIN_CELL_PT), int(72 * room_in / MIN_CELL_PT)
        raise GridTooFine(
            f"a {rows}x{cols} grid would have cells of {72 * cell:.2g} pt, under the {MIN_CELL_PT} pt that can be "
            f"read; at {setting.width_in:g} in wide this figure draws at most {most_rows} rows and {most_cols} "
            "columns (--width-in widens it)"
        )
    return cell * cols, cell * rows


def cell_gap(ax_width_in: float, cols: int) -> float:
    """Gap between cells as a fraction of a cell: about half a point, none when cells are tiny."""
    cell_pt = 72 * ax_width_in / cols
    return 0.0 if cell_pt < 3 else min(0.08, 0.5 / cell_pt)


def seams(gap: float) -> dict:
    """Edges of abutting cells: none where a gap separates them; otherwise a hairline in each cell's own
    colour, or PDF viewers show seams between them."""
    return {"edgecolor": "none", "linewidth": 0} if gap else {"edgecolor": "face", "linewidth": 0.2}


def draw_states(ax: Axes, states: np.ndarray, now: np.ndarray, setting: Setting, gap: float) -> None:
    """Grid cells in their state colours and hatches, the ones committed this iteration outlined."""
    for state in STATES:
        cells = np.argwhere(states == state)
        if not len(cells):
            continue
        fill = setting.palette[state]
        squares = [Rectangle((col - 0.5 + gap, row - 0.5 + gap), 1 - 2 * gap, 1 - 2 * gap) for row, col in cells]
        hatch, _ = grey_mark(state)
        ax.add_collection(
            PatchCollection(squares, facecolor=fill, hatch=hatch or None, hatchcolor=hatch_color(fill), **seams(gap))
        )
    inset = max(gap, 0.06)
    outlines = [
        Rectangle((col - 0.5 + inset, row - 0.5 + inset), 1 - 2 * inset, 1 - 2 * inset) for row, col in np.argwhere(now)
    ]
    ax.add_collection(
        PatchCollection(outlines, facecolor="none", edgecolor=setting.foreground, linewidth=1.2 * setting.style.line_pt)
    )
