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

FATES = ("accepted", "rejected", "kept", "redrawn", "reset", "new", "discarded")
STATES = ("committed", "pending", *FATES)  # every colour a grid cell can take, in legend order
# only a non-default option (reset) or a continuous pair (discarded) produces these: in a legend only when shown
OPTIONAL_STATES = ("reset", "discarded")


TREE_STATES = ("committed", "pending", "accepted", "rejected")  # what a tree pass leaves on the grid


def legend_states(shown: set[str], trees: bool = False) -> list[str]:
    """The states a legend lists: all but the optional ones that are not on screen; for a draft-tree
    run only those a tree pass can leave (its path accepted, the token after it resampled or committed)."""
    if trees:
        return list(TREE_STATES)
    return [state for state in STATES if state not in OPTIONAL_STATES or state in shown]


LABELS = {
    "committed": "committed earlier",
    "pending": "not generated yet",
    "accepted": "accepted",
    "rejected": "rejected, resampled",
    "kept": "kept (same token carried on)",
    "redrawn": "redrawn (token changed)",
    "reset": "reset (initialised afresh)",
    "new": "new (verified for the first time)",
    "discarded": "discarded (drafted after the rejection)",
}
NOW_LABEL = "committed this iteration"

BACKGROUND = {False: "#FFFFFF", True: "#111111"}
FOREGROUND = {False: "#222222", True: "#EEEEEE"}


def lightness(color: str) -> float:
    """CIE L* (0 black to 100 white) of a #RRGGBB colour: how light it prints in grey scale."""
    channels = [int(color[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    luminance = 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    return 116 * luminance ** (1 / 3) - 16 if luminance > 216 / 24389 else luminance * 24389 / 27


def colors(dark: bool = False) -> dict[str, str]:
    """Colour of every cell state, plus the outline of freshly committed cells, for one theme."""
    return {
        "committed": "#7F7F7F" if dark else "#9A9A9A",
        "pending": "#2E2E2E" if dark else "#EBEBEB",
        "accepted": OKABE_ITO["bluish_green"],
        # vermillion and orange, side by side, were hard to tell apart on a projector (and close under
        # red-green colour blindness): redrawn takes reddish purple, and the rare, optional reset yellow
        "rejected": OKABE_ITO["vermillion"],
        "kept": OKABE_ITO["blue"],
        "redrawn": OKABE_ITO["reddish_purple"],
        "reset": OKABE_ITO["yellow"],
        "new": OKABE_ITO["sky_blue"],
        "discarded": "#5A5A5A" if dark else "#C4C4C4",
        "outline": FOREGROUND[dark],
        "front": OKABE_ITO["orange"],  # the cells one pass drew in several rows at once (ZipAR's front)
    }


def swatches(states: tuple[str, ...] | None = None, dark: bool = False) -> str:
    """HTML naming each state (by default every fate a default run shows) beside a small square of its
    colour, so text that names the colours shows them."""
    palette = colors(dark)
    states = states or tuple(fate for fate in FATES if fate not in OPTIONAL_STATES)
    return " ".join(
        f'<span style="white-space:nowrap"><span style="display:inline-block;width:0.9em;height:0.9em;'
        f'background:{palette[state]};vertical-align:-0.1em;border-radius:2px"></span> {LABELS[state]}</span>'
        for state in states
    )


def theme(dark: bool = False, large: bool = False) -> dict:
    """Plotly layout settings for the light or dark UI theme, with larger text for projectors."""
    return {
        "template": "plotly_dark" if dark else "plotly_white",
        "font": {"size": 22 if large else 14, "color": FOREGROUND[dark]},
        "paper_bgcolor": BACKGROUND[dark],
        "plot_bgcolor": BACKGROUND[dark],
    }
