"""Words for what a pass did, and where the instructive passes are: pure functions of a Trace.

`iteration_sentence` says in one plain sentence what iteration j did (what was accepted, why the
first rejection was rejected, what was drawn instead, what the window carries on); `jump` finds the
next (or previous) pass of a kind worth stepping to: a rejection, a long accepted run, the start of a
stall. `GLOSSARY` explains the words the views use. `latency_verdict` is the one claim every view
makes of a latency against AR, and `promise` what a run's images are to AR's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specviz.core.catalogue import CATALOGUE
from specviz.metrics import STALL_PASSES, Speedup, iteration_at, stalls, summary, timed_speedup
from specviz.trace import ContinuousRecord, RowsRecord, TokenRecord, Trace, TreeRecord, WindowRecord

JUMPS = ("rejection", "long", "stall")  # what `jump` can look for

GLOSSARY = """
- **NFE** (number of function evaluations): model passes. AR needs one per token; a speculative
  method verifies several drafts per pass, so an image takes fewer.
- **Step compression**: AR's passes over the method's. **Latency speedup**: AR's time over the
  method's; it is step compression divided by what a long pass costs against a short one (about 1 on
  a GPU, several on a CPU), which is why a method can save passes and still be slower here.
- **Draft**: a guessed token, verified by the model. **p_old**: the draft's probability where it was
  drawn; **p_new**: its probability under the model now, given everything before it.
- **Acceptance ratio** min(1, p_new / p_old): a draft is accepted when a uniform draw u in [0, 1) falls
  at or below it; the first rejection is replaced by a token drawn from the residual
  max(0, p_new - p_old), renormalised, so every committed token is an exact sample of the model.
- **Kept / redrawn**: drafts after a rejection stay in the window; SJD draws each one anew (redrawn),
  SCD couples the draws so a draft is kept unless its distribution moved (**coupling**), SJD++ keeps
  (**reuses**) a draft whose confidence min(1, p_new / p_old) passes its threshold.
- **Stall**: passes that accept nothing, each fixing one token as AR would, at a whole pass's cost.
- **Tau**: tokens a draft-tree pass commits (its accepted path plus the token drawn after it).
- **Alpha** (continuous tokens): the share of tested drafts accepted; a density ratio replaces the
  probability ratio.
"""


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _number(value: float | None) -> str:
    return "?" if value is None else f"{value:.2g}"


def _a(count: int) -> str:
    """'a 12', 'an 8', 'an 18': the article as the number is read aloud."""
    spoken_with_vowel = str(count).startswith("8") or count in (11, 18) or 11_000 <= count < 12_000
    return f"{'an' if spoken_with_vowel else 'a'} {count}"


def _drafts(count: int, noun: str = "draft") -> str:
    return f"{count} {noun}{'s' if count != 1 else ''}"


def _token_sentence(it: TokenRecord) -> str:
    return "no drafts to verify; the model drew one token, as AR does."


def _window_sentence(it: WindowRecord) -> str:
    accepted, k = it.accepted, it.rejected_at
    head = f"{_drafts(accepted)} accepted" if accepted else "no draft accepted"
    if k is None:
        told = f"all {_drafts(len(it.drafts))} accepted; the token after them was drawn from the model"
    elif it.group is not None:  # lantern, gsd: acceptance of a neighbourhood of similar tokens
        told = (
            f"{head}; the {_ordinal(k + 1)} (offset {k}) was rejected: the probability mass of its group of "
            f"similar tokens gave a ratio of {_number(it.ratio[k])}, below the uniform draw "
            f"{_number(it.uniform[k])}, and a token was drawn from what is left"
        )
    else:
        told = (
            f"{head}; the {_ordinal(k + 1)} (offset {k}) was rejected because p_new = {_number(it.p_new[k])} against "
            f"p_old = {_number(it.p_old[k])} gives a ratio of {_number(it.ratio[k])}, below the uniform draw "
            f"{_number(it.uniform[k])}, so a new token was drawn from the residual"
        )
    shown = it.outcome()
    carried = [(name, shown.count(name)) for name in ("kept", "redrawn", "new") if shown.count(name)]
    window = ", ".join(f"{count} {name}" for name, count in carried)
    rest = f". Left in the window for the next pass: {window}{_reuse_clause(it)}" if window else ""
    return f"{told}{rest}."


def _reuse_clause(it: WindowRecord) -> str:
    """How many of the drafts after the rejection a reuse rule (SJD++) kept as drafted; '' for another rule."""
    after = it.fate[it.accepted + 1 :]
    if it.reused is None or it.rejected_at is None or not after or "reset" in after:
        return ""
    reused = sum(it.reused)
    others = len(after) - reused
    redrawn = f", the other {others} drawn anew from p_new" if others else ""
    why = "confidence above the reuse threshold"
    return f"; {reused} of the {_drafts(len(after))} after the rejection reused as drafted ({why}){redrawn}"


def _tree_sentence(it: TreeRecord) -> str:
    nodes, deepest = len(it.tree.tokens), it.reach()
    path = f"a path of {_drafts(it.accepted, 'node')} was accepted" if it.accepted else "no node was accepted"
    refused = "rejected" in it.outcome()
    why = f", every candidate at depth {it.accepted + 1} was refused," if refused else ""
    fixed = len(it.committed)
    after = (
        f" and the model drew one more token after it ({_drafts(fixed, 'token')} fixed)"
        if fixed > it.accepted
        else f"; the image ends with it, so no token was drawn after it ({_drafts(fixed, 'token')} fixed)"
    )
    return f"One pass verified a tree of {nodes} nodes, {deepest} deep: {path}{why}{after}."


def _continuous_sentence(it: ContinuousRecord) -> str:
    if not it.fate:
        return "The target drew this token alone (pre-filled, or AR): no draft to verify."
    gamma, accepted = len(it.fate), it.accepted
    head = f"{_drafts(accepted)} of {gamma} accepted" if accepted else f"none of {gamma} drafts accepted"
    if accepted == gamma:
        return f"{head}: all; the target drew the next token itself."
    drawn = (
        f"resampling gave up after {it.tries} tries (each a target draw refused for the part of the target's "
        "distribution the draft left uncovered) and kept the target's last draw, a small departure from exactness "
        "at this token"
        if it.source[-1] == "capped"
        else f"its position was resampled ({it.tries} proposal{'s' if it.tries != 1 else ''} tried)"
    )
    discarded = gamma - accepted - 1
    after = {0: "", 1: "; the 1 after it was discarded"}.get(discarded, f"; the {discarded} after it were discarded")
    return (
        f"{head}; the {_ordinal(accepted + 1)} (offset {accepted}) was rejected (density ratio "
        f"{_number(it.ratio[accepted])}, uniform {_number(it.uniform[accepted])}): {drawn}{after}."
    )


def _row_windows_sentence(it: RowsRecord) -> str:
    """A pass of rows in flight that each verified a Jacobi window (PJD), row by row."""
    parts = []
    for window in it.windows:
        drafts = len(window.drafts)
        said = (
            f"row {window.row}: {window.accepted} of {drafts} drafts accepted"
            if drafts
            else f"row {window.row}: no draft yet"
        )
        if "rejected" in window.fate:
            at = window.fate.index("rejected")
            said += f", the {_ordinal(at + 1)} rejected (ratio {_number(window.ratio[at])})"
        extra = window.committed - window.accepted
        if extra:
            said += f", then {extra} token drawn by the model"
        if "kept" in window.fate:
            said += f", {window.fate.count('kept')} kept for the next pass"
        parts.append(said)
    if len(it.windows) == 1:
        return f"One pass verified the one row in flight, as SJD would ({parts[0]})."
    top = it.windows[0].row
    return (
        f"One pass verified {len(it.windows)} rows' windows at once ({'; '.join(parts)}). Only row {top}, the top "
        "row in flight, resamples at a rejection as SJD does; the rows below keep their accepted drafts and did "
        "not see the unfinished rows above them, nor their drafts: that is where PJD departs from AR."
    )


def _rows_sentence(it: RowsRecord) -> str:
    if it.windows:
        return _row_windows_sentence(it)
    rows = [str(row) for row in it.rows]
    where = f"rows {', '.join(rows[:-1])} and {rows[-1]}" if len(rows) > 1 else f"row {rows[0]}"
    drew = (
        f"One pass drew {len(it.committed)} tokens at once, one in each of {where}"
        if len(rows) > 1
        else (f"One pass drew one token, in {where}")
    )
    stand_in = (
        f"; of the {it.fed} tokens it fed, {it.stand_ins} stood in for the unfinished end of the row above a "
        "row starting now (that row's latest token, at the end's position)"
        if it.stand_ins
        else ""
    )
    missing = (
        f". Row {rows[0]}'s token saw every token before it, as in AR; the rows below did not see the end of "
        "the row above them, not drawn yet: that is where ZipAR departs from AR"
        if len(rows) > 1
        else ""
    )
    return f"{drew}{stand_in}{missing}."


def iteration_sentence(trace: Trace, j: int) -> str:
    """One plain sentence on what iteration j did."""
    iteration_at(trace, j)
    it = trace.iterations[j]
    within = [(start, length) for start, length in stalls(trace, STALL_PASSES) if start <= j < start + length]
    stall = "".join(f" Pass {j - start + 1} of {_a(length)}-pass stall." for start, length in within)
    return f"Iteration {j} (from token {it.start}): " + SENTENCES[it.kind](it) + stall


# what each kind of pass says of itself
SENTENCES = {
    "token": _token_sentence,
    "window": _window_sentence,
    "tree": _tree_sentence,
    "continuous": _continuous_sentence,
    "rows": _rows_sentence,
}


def jump(trace: Trace, j: int, kind: str, forward: bool = True) -> int:
    """The next (previous) iteration after (before) j of `kind`: a `rejection`, a `long` accepted run (at
    least half the longest of the run, and 2), or the first pass of a `stall` (STALL_PASSES passes or
    more accepting nothing); j itself where there is none."""
    if kind not in JUMPS:
        raise ValueError(f"jump looks for one of {', '.join(JUMPS)}, not {kind!r}")
    its = trace.iterations
    if kind == "stall":
        found = [start for start, _ in stalls(trace, STALL_PASSES)]
    elif kind == "rejection":
        found = [k for k, it in enumerate(its) if it.verifies_drafts and it.rejects()]
    else:
        longest = max((it.accepted for it in its if it.verifies_drafts), default=0)
        threshold = max(2, math.ceil(longest / 2))
        found = [k for k, it in enumerate(its) if it.verifies_drafts and it.accepted >= threshold]
    later = [k for k in found if k > j] if forward else [k for k in reversed(found) if k < j]
    return later[0] if later else int(j)


def ratio_text(value: float) -> str:
    """A ratio against AR as people say it: '2.91x', or '1.25x slower' below 1 (a ratio below 1 is a
    loss, and '0.80x' reads as a gain to most people); 'n/a' where there is no ratio."""
    if not math.isfinite(value) or value <= 0:
        return "n/a"
    return f"{value:.2f}x" if value >= 1 else f"{1 / value:.2f}x slower"


def latency_text(speedup: float) -> str:
    """AR's seconds over the method's in words: '1.72x latency speedup over AR', or '1.19x slower than AR'."""
    return f"{ratio_text(speedup)} latency speedup over AR" if speedup >= 1 else f"{ratio_text(speedup)} than AR"


@dataclass(frozen=True)
class LatencyVerdict:
    """The latency against AR as a claim its timings support, decided once (`latency_verdict`) so that the
    race, Compare, the exported figures and animations and the cost panel cannot say it differently: `claim`
    for a sentence, `label` for a bar or a cell under a latency heading, the repeats' `spread` behind both.
    `value` is the ratio it speaks of (the repeats' median where the runs were timed again). In a string, the
    sentence."""

    value: float
    spread: Speedup | None
    claim: str  # 'about the same latency as AR', '1.72x latency speedup over AR', '1.19x slower than AR'
    label: str  # 'about the same', '1.72x', '1.19x slower'

    @property
    def interval(self) -> str:
        """The repeats' range in words (`spread_text`); empty for a run timed once, by its own clock."""
        return "" if self.spread is None else spread_text(self.spread)

    @property
    def sentence(self) -> str:
        """'about the same latency as AR (from 1.49x slower to 1.38x faster over 3 timings)'."""
        return f"{self.claim} ({self.interval})" if self.interval else self.claim

    @property
    def cell(self) -> str:
        """'about the same (from 1.49x slower to 1.38x faster over 3 timings)': under a latency heading."""
        return f"{self.label} ({self.interval})" if self.interval else self.label

    def __str__(self) -> str:
        return self.sentence


def latency_verdict(speedup: float, spread: Speedup | None = None) -> LatencyVerdict:
    """The latency against AR as a claim the timings support: 'about the same latency as AR' where the
    repeats disagree on the side (their spread crosses 1: on a shared machine that is noise), else
    `latency_text` of their median, or of `speedup` (the run's own clocks) where they were not timed again;
    every view says it through the verdict's words, with its interval."""
    value = speedup if spread is None else spread.median
    if spread is not None and spread.low < 1 < spread.high:
        return LatencyVerdict(value, spread, "about the same latency as AR", "about the same")
    return LatencyVerdict(value, spread, latency_text(value), ratio_text(value))


def run_verdict(trace: Trace, ar: Trace) -> LatencyVerdict:
    """A run's latency verdict against the AR run of the same prompt and seed, from their repeats where both
    were timed again, else from their own clocks."""
    return latency_verdict(summary(trace, ar)["latency_speedup"], timed_speedup(trace, ar))


COMPUTE_CLOCK = (
    "compute time: the CPU seconds of each run's own work, which other programs on the machine cannot inflate"
)


def timed_how(trace: Trace, ar: Trace) -> str | None:
    """How the verdict's repeats were timed, and the wall clock's verdict where it tells another story (a
    busy machine): None where the runs were not timed again."""
    spread = timed_speedup(trace, ar)
    if spread is None:
        return None
    how = (
        f"latency from the median of {spread.repeats} runs of each with nothing drawing, AR and {trace.method} in turns"
    )
    if spread.clock != "compute":
        return f"{how}, on the wall clock"
    how = f"{how}, on their {COMPUTE_CLOCK}"
    wall = timed_speedup(trace, ar, clock="wall")
    said, on_wall = latency_verdict(spread.median, spread), latency_verdict(wall.median, wall)
    if said.label != on_wall.label or abs(wall.median / spread.median - 1) > 0.1:
        how += f"; on the wall clock, which also counted the machine's other work: {on_wall.sentence}"
    return how


def promise(method: str, lossless: bool) -> str:
    """What a run's images are to AR's, in the catalogue's words (README's promise column): 'lossless';
    'close to exact, measured' where the method's entry names a deviation its exactness check measures but
    cannot show (CSpD: a gap too small for a test's time); else 'lossy'. A method the catalogue lacks (an
    uploaded trace of a package not installed here) is 'lossy' unless its trace says lossless."""
    if lossless:
        return "lossless"
    entry = CATALOGUE.get(method)
    deviation = entry.deviation if entry is not None else None
    return "close to exact, measured" if deviation is not None and not deviation.shown else "lossy"


def spread_text(speedup: Speedup) -> str:
    """The range of a speedup over its repeats, in the words `ratio_text` uses: '1.65-1.80x over 3
    timings', '1.21-1.32x slower over 3 timings', or 'from 1.05x slower to 1.10x faster over 3 timings'
    where the repeats disagree on the side."""
    low, high = speedup.low, speedup.high
    if speedup.repeats == 1:
        return "one timing"
    if low >= 1:
        span = f"{low:.2f}-{high:.2f}x"
    elif high < 1:
        span = f"{1 / high:.2f}-{1 / low:.2f}x slower"
    else:
        span = f"from {ratio_text(low)} to {high:.2f}x faster"
    return f"{span} over {speedup.repeats} timings"
