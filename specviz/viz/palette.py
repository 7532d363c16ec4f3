"""Colours and plot themes shared by every figure and animation frame.

The fate colours come from the Okabe–Ito palette, which stays distinguishable under the common
forms of colour blindness; neutral greys mark cells outside the window.
"""

from __future__ import annotations

OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky_blue": "#56B4E9",
    "bluish_green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish_purple": "#CC79A7",
}

FATES = ("accepted", "rejected", "redrawn", "new")
STATES = ("committed", "pending", *FATES)  # every colour a grid cell can take, in legend order

LABELS = {
    "committed": "committed earlier",
    "pending": "not generated yet",
    "accepted": "accepted",
    "rejected": "rejected, resampled",
    "redrawn": "redrawn",
    "new": "new (just initialised)",
}
NOW_LABEL = "committed this iteration"

BACKGROUND = {False: "#FFFFFF", True: "#111111"}
FOREGROUND = {False: "#222222", True: "#EEEEEE"}


def colors(dark: bool = False) -> dict[str, str]:
    """Colour of every cell state, plus the outline of freshly committed cells, for one theme."""
    return {
        "committed": "#7F7F7F" if dark else "#9A9A9A",
        "pending": "#2E2E2E" if dark else "#EBEBEB",
        "accepted": OKABE_ITO["bluish_green"],
        "rejected": OKABE_ITO["vermillion"],
        "redrawn": OKABE_ITO["orange"],
        "new": OKABE_ITO["sky_blue"],
        "outline": FOREGROUND[dark],
    }


def theme(dark: bool = False, large: bool = False) -> dict:
    """Plotly layout settings for the light or dark UI theme, with larger text for projectors."""
    return {
        "template": "plotly_dark" if dark else "plotly_white",
        "font": {"size": 22 if large else 14, "color": FOREGROUND[dark]},
        "paper_bgcolor": BACKGROUND[dark],
        "plot_bgcolor": BACKGROUND[dark],
    }
