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

from specviz.metrics import DRAWN_DEPTH, acceptance_maps, cell_of_position, depth_map, has_trees, window_size
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
    if trace.continuous:
        sources = token_sources(trace)
        for cell, source in zip(cell_of_position(trace), sources, strict=True):
            if cell >= 0 and source != "pending":
                colour = SOURCES[source][1]
                rgb[cell] = ImageColor.getrgb(colour if colour.startswith("#") else palette[colour])
        return sources_key(set(sources)), Image.fromarray(rgb.reshape(g.rows, g.cols, 3))
    if has_trees(trace):
        values = depth_map(trace).ravel()
        top = max(float(np.nanmax(values, initial=1.0)), 1.0)
        title = f"depth at which each token was accepted (purple 1 to yellow {top:.0f}; grey: drawn by the model)"
    elif trace.kind == "rows":  # ZipAR: at most one row in flight per window size of a row's width
        values = acceptance_maps(trace)["run_length"].ravel()
        top = float(min(g.rows, math.ceil(g.cols / trace.parameters.window_size)))
        title = f"rows in flight when each cell was drawn (navy 1 to yellow {top:.0f})"
    else:
        values = acceptance_maps(trace)["run_length"].ravel()
        top = float(window_size(trace) + 1)
        title = f"accepted run length of each cell (navy 1 to yellow {top:.0f})"
    done = ~np.isnan(values)
    scaled = np.clip((values[done] - 1) / max(top - 1, 1.0), 0.0, 1.0)
    colormap = matplotlib.colormaps[COLORMAPS[has_trees(trace)]]
    rgb[done] = (colormap(scaled)[:, :3] * 255).round().astype(np.uint8)
    if has_trees(trace):
        rgb[done & (values == DRAWN_DEPTH)] = ImageColor.getrgb(palette["committed"])
    return title, Image.fromarray(rgb.reshape(g.rows, g.cols, 3))
