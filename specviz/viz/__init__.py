"""Pure functions from a Trace to numbers, plotly figures and animation frames (see DESIGN.md)."""

from specviz.viz.analysis import (
    GridState,
    acceptance_maps,
    cell_of_position,
    committed_before,
    fates,
    grid_state,
    per_iteration,
    stalls,
    summary,
    tokens_through,
)
from specviz.viz.figures import (
    acceptance_map_figure,
    accepted_length_figure,
    changed_figure,
    comparison_figure,
    race_figure,
    window_figure,
)
from specviz.viz.frames import ExportError, animation, export_scale, frame, save_gif, save_mp4, write_animation
from specviz.viz.palette import FATES, OKABE_ITO, STATES, colors, theme

__all__ = [
    "FATES",
    "OKABE_ITO",
    "STATES",
    "ExportError",
    "GridState",
    "acceptance_map_figure",
    "acceptance_maps",
    "accepted_length_figure",
    "animation",
    "cell_of_position",
    "changed_figure",
    "colors",
    "committed_before",
    "comparison_figure",
    "export_scale",
    "fates",
    "frame",
    "grid_state",
    "per_iteration",
    "race_figure",
    "save_gif",
    "save_mp4",
    "stalls",
    "summary",
    "theme",
    "tokens_through",
    "window_figure",
    "write_animation",
]
