"""How a tab hands runs to Inspect (a race, an upload): it sets the session's runs, a new serial number on
Inspect's hidden `loaded` number, which refreshes its views, and the iteration slider's range and opening."""

from __future__ import annotations

import itertools

import gradio as gr

from specviz import metrics
from specviz.trace import Trace

# serial numbers of the runs handed to Inspect: a new one on its hidden `loaded` number refreshes its views
LOADS = itertools.count(1)


def opened_at(trace: Trace, on: str | None = None) -> dict:
    """The iteration slider for a new run: its range, at the iteration Inspect opens on
    (`metrics.opening_iteration`; `on`: a preset's focus)."""
    return gr.update(maximum=max(1, len(trace.iterations) - 1), value=metrics.opening_iteration(trace, on))
