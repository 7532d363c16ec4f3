"""Pure functions from a Trace to plotly figures, animation frames and words (docs/architecture.md); the
numbers they draw come from `specviz.metrics`.

Names are imported from their modules on first use (PEP 562), so the headless commands that only need
words (bench, the GPU report) import neither plotly nor matplotlib: a GPU machine without them runs those.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "continuous": (
        "acceptance_by_step",
        "acceptance_by_step_figure",
        "ratio_bars_figure",
        "token_source_figure",
        "token_sources",
        "trajectory_figure",
    ),
    "figures": (
        "acceptance_map_figure",
        "accepted_length_figure",
        "changed_figure",
        "comparison_figure",
        "message_figure",
        "pass_caption",
        "pass_cost_figure",
        "race_figure",
        "window_figure",
    ),
    "frames": (
        "ExportError",
        "Panel",
        "animation",
        "export_scale",
        "frame",
        "iteration_after",
        "pass_overlay",
        "save_gif",
        "save_mp4",
        "slide_frame",
        "slide_title",
        "write_animation",
    ),
    "narration": (
        "GLOSSARY",
        "JUMPS",
        "LatencyVerdict",
        "iteration_sentence",
        "jump",
        "latency_text",
        "latency_verdict",
        "promise",
        "timed_how",
        "COMPUTE_CLOCK",
        "ratio_text",
        "run_verdict",
        "spread_text",
    ),
    "palette": ("FATES", "OKABE_ITO", "STATES", "colors", "swatches", "theme"),
    "progress": ("progress_map",),
    "trees": ("depth_map_figure", "tau_figure", "tree_figure", "tree_shape_figure"),
}
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module 'specviz.viz' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"specviz.viz.{_MODULE_OF[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
