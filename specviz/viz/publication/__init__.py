"""Publication figures of traces: matplotlib, vector PDF and SVG (or PNG), at exact sizes in inches.

The numbers come from the same pure functions as the app's plotly figures (specviz.metrics)
and the colours from the same palette; only the drawing back end differs. Papers are often read
in grey, and several fate colours have nearly the same lightness there, so those fates are also
hatched, and accepted drafts keep the outline of cells committed this iteration (see `grey_mark`).
No model is loaded here: the image panel of the window figure comes from a `decode` callable.
"""

from specviz.core.figure_options import FIGURE_KINDS, FORMATS, STYLES, WIDTH_RANGE_IN
from specviz.viz.narration import ratio_text
from specviz.viz.publication.drawings import (
    acceptance_map,
    comparison,
    comparison_notes,
    comparison_rows,
    depth_map,
    iterations,
    shown_iteration,
    tree_shapes,
    window,
)
from specviz.viz.publication.files import (
    FIGURES,
    SLUG_CHARS,
    FigureFiles,
    FigureOptionError,
    Need,
    check_options,
    file_stems,
    parse_formats,
    slug,
    write_figure,
    write_figures,
)
from specviz.viz.publication.style import GREY_STEP, Setting, grey_mark, state_lightness

__all__ = [
    "FIGURES",
    "FIGURE_KINDS",
    "FORMATS",
    "GREY_STEP",
    "SLUG_CHARS",
    "STYLES",
    "WIDTH_RANGE_IN",
    "FigureFiles",
    "FigureOptionError",
    "Need",
    "Setting",
    "acceptance_map",
    "check_options",
    "comparison",
    "comparison_notes",
    "comparison_rows",
    "depth_map",
    "file_stems",
    "grey_mark",
    "iterations",
    "parse_formats",
    "ratio_text",
    "shown_iteration",
    "slug",
    "state_lightness",
    "tree_shapes",
    "window",
    "write_figure",
    "write_figures",
]
