"""The race's growing map: what the method has done to each cell so far, as a small picture.

The same maps Inspect draws for a whole run (accepted run length; a tree run's depth map; a continuous
run's token sources), computed from a partial trace and painted one pixel per cell, cheap enough to
send with every frame of a race.
"""

from __future__ import annotations

import math

import matplotlib
import numpy as np
from PIL import Image, ImageColor

from specviz.metrics import (
    DRAWN_DEPTH,
    acceptance_maps,
    cell_of_position,
    depth_map,
    has_row_windows,
    row_run_lengths,
    window_size,
)
from specviz.trace import Trace
from specviz.viz.continuous import SOURCES, token_sources
from specviz.viz.palette import colors

# the colour scales of Inspect's figures: Cividis for the acceptance map, Viridis for the depth map
COLORMAPS = {False: "cividis", True: "viridis"}
# a continuous run's map key names the sources on the map by these colours, as the app's header swatches
SOURCE_COLOUR_NAMES = {
    "draft": "green",
    "resampled": "vermillion",
    "alone": "grey",
    "target": "sky blue",
    "capped": "yellow",
    "unverified": "reddish purple",
}


def sources_key(sources: set[str]) -> str:
    """The title of a continuous run's map: the colour of each source on it, in the legend's order."""
    shown = [f"{colour}: {SOURCES[key][0]}" for key, colour in SOURCE_COLOUR_NAMES.items() if key in sources]
    return f"where each token came from ({'; '.join(shown)})" if shown else "where each token came from"


def progress_map(trace: Trace, dark: bool = False) -> tuple[str, Image.Image]:
    """A title and a (rows x cols) RGB picture of the run so far: cells not committed yet in the
    pending colour. Window runs: each cell's accepted run length on a fixed scale of 1 to W + 1 (so a
    colour keeps its meaning as the map grows); tree runs: the depth in its tree at which each token was
    accepted (grey: drawn by the model); rows runs (ZipAR): how many rows were in flight when each cell
    was drawn; continuous runs: where each token came from."""
    g = trace.geometry
    palette = colors(dark)
    rgb = np.empty((g.rows * g.cols, 3), np.uint8)
    rgb[:] = ImageColor.getrgb(palette["pending"])
    title = PROGRESS_MAPS.get(trace.kind, _run_length_map)(trace, rgb, palette)
    return title, Image.fromarray(rgb.reshape(g.rows, g.cols, 3))


def _sources_map(trace: Trace, rgb: np.ndarray, palette: dict) -> str:
    """A continuous run: each cell in the colour of where its token came from."""
    sources = token_sources(trace)
    for cell, source in zip(cell_of_position(trace), sources, strict=True):
        if cell >= 0 and source != "pending":
            colour = SOURCES[source][1]
            rgb[cell] = ImageColor.getrgb(colour if colour.startswith("#") else palette[colour])
    return sources_key(set(sources))


def _depth_map(trace: Trace, rgb: np.ndarray, palette: dict) -> str:
    values = depth_map(trace).ravel()
    top = max(float(np.nanmax(values, initial=1.0)), 1.0)
    _paint(rgb, values, top, COLORMAPS[True])
    rgb[~np.isnan(values) & (values == DRAWN_DEPTH)] = ImageColor.getrgb(palette["committed"])
    return f"depth at which each token was accepted (purple 1 to yellow {top:.0f}; grey: drawn by the model)"


def _rows_map(trace: Trace, rgb: np.ndarray, palette: dict) -> str:
    """ZipAR: at most one row in flight per window size of a row's width. PJD: the tokens each cell's row
    committed in its pass, up to the window."""
    g = trace.geometry
    if has_row_windows(trace):
        top = float(trace.parameters.window)
        _paint(rgb, row_run_lengths(trace).ravel(), top, COLORMAPS[False])
        return f"tokens each cell's row committed in its pass (navy 1 to yellow {top:.0f})"
    top = float(min(g.rows, math.ceil(g.cols / trace.parameters.window_size)))
    _paint(rgb, acceptance_maps(trace)["run_length"].ravel(), top, COLORMAPS[False])
    return f"rows in flight when each cell was drawn (navy 1 to yellow {top:.0f})"


def _run_length_map(trace: Trace, rgb: np.ndarray, palette: dict) -> str:
    top = float(window_size(trace) + 1)
    _paint(rgb, acceptance_maps(trace)["run_length"].ravel(), top, COLORMAPS[False])
    return f"accepted run length of each cell (navy 1 to yellow {top:.0f})"


def _paint(rgb: np.ndarray, values: np.ndarray, top: float, colormap: str) -> None:
    """Colour the committed cells (the others are NaN) by their value on a scale of 1 to `top`."""
    done = ~np.isnan(values)
    scaled = np.clip((values[done] - 1) / max(top - 1, 1.0), 0.0, 1.0)
    rgb[done] = (matplotlib.colormaps[colormap](scaled)[:, :3] * 255).round().astype(np.uint8)


# the map a kind of run paints (a run of single tokens or of windows: the accepted run length)
PROGRESS_MAPS = {"continuous": _sources_map, "tree": _depth_map, "rows": _rows_map}
