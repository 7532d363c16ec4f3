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

from specviz.figure_options import Style
from specviz.trace import Trace
from specviz.viz.palette import FOREGROUND, STATES, colors, lightness

HATCHES = {
    "rejected": "xxxx", "kept": "----", "redrawn": "////", "reset": "\\\\\\\\", "new": "....", "discarded": "||||"
}  # fmt: skip
OUTLINED = frozenset({"accepted"})  # accepted cells are always committed this iteration, so always outlined
GREY_STEP = 10.0  # CIE L* apart: two plain colours this far apart stay distinct when printed in grey
Decoder = Callable[[Trace, list[int]], Image.Image]


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
