"""What a session's long runs are doing, kept as typed values in `gr.State`, so that Stop can say what
it stopped and how far it got without reading the page's text back. Race and Compare write their own
activity as they go; Stop reads both and clears them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import gradio as gr


@dataclass(frozen=True)
class RaceActivity:
    """Where a race stands: both runs racing, or both finished and being timed again undisturbed."""

    phase: Literal["racing", "retiming"]
    rounds_done: int = 0  # retiming: the undisturbed rounds finished so far


RACING = RaceActivity("racing")


STARTING = "*Starting the race...*"
FIRST_LOAD = "its first use here: reading a released model's weights can take minutes"


def starting(race: RaceActivity | None, comparing: bool | None, loading: str | None = None) -> str:
    """The race summary the moment Run or a preset is pressed, before the race holds the compute queue: a
    race still being timed, or a comparison, holds it first, and the page would otherwise show nothing new
    until it ends (a lecturer once waited 13 s on an unchanged page); `loading`: a model not loaded yet, whose
    first load comes first."""
    if loading is not None:
        return f"*Starting the race: {loading} loads first ({FIRST_LOAD})...*"
    if race is not None and race.phase == "retiming":
        return "*Starting the race: the previous race's timing stops first...*"
    if race is not None:
        return "*Starting the race: the previous race stops first...*"
    if comparing:
        return "*Starting the race once Compare's runs end (Stop ends them now)...*"
    return STARTING


def stopped(race: RaceActivity | None, comparing: bool | None, summary: str | None) -> dict:
    """What Stop leaves in the race summary and in Compare's note, where one was running, and both activities
    cleared, by name (`summary`, `compare_note`, `race_activity`, `comparing`). A text never set arrives as
    None. The race's counters are not quoted: a pass already under way when Stop was pressed still reaches
    them (a walk under load found the summary one pass behind the counters beside it)."""
    race_note = compare_note = gr.update()
    if (summary or "").startswith(STARTING.rstrip(".*")):  # pressed, and its race not begun (or the old one ending)
        race_note = "**Stopped** before the race began. Inspect still shows the previous run, if any."
    elif race is not None and race.phase == "retiming":  # both runs had finished; only their clocks were pending
        result = (summary or "").partition("\n\n")[2]  # the summary below its "timing again" line
        race_note = (
            f"**Stopped** while timing the runs again ({race.rounds_done} rounds done): the seconds below come "
            f"from those rounds only, or from the race itself where none had finished. Inspect still shows the "
            f"previous run, if any.\n\n{result}"
        )
    elif race is not None:
        race_note = (
            "**Stopped** before the end: the counters under the pictures say how far each side got. Inspect "
            "still shows the previous run, if any."
        )
    if comparing:
        compare_note = "**Stopped**: the table shows the runs that had finished, with their first, untimed clocks."
    return {"summary": race_note, "compare_note": compare_note, "race_activity": None, "comparing": False}
