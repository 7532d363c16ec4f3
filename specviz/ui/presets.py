"""Presets: the papers' findings, set up to run live on the embedded models with one press.

Each preset names a model, a method with its parameters, a prompt, a seed and (where the finding
needs it) a temperature, with one paragraph saying what to look at. The numbers quoted were measured
on the embedded models with the command given, seeds 0-4 unless said; the race then shows one of
those runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Preset:
    key: str
    label: str  # the button
    explanation: str  # markdown: what to watch, and what was measured
    model: str
    method: str
    prompt: str
    seed: int = 0
    params: dict = field(default_factory=dict)
    temperature: float | None = None  # None: the model's own default
    compare: tuple[str, ...] = ()  # the Compare tab's selection, where the finding is a comparison
    contrast: bool = False  # also run it with pre-filling switched, both in Inspect (CSpD's figure 11)
    # race in slow motion: a mechanism over in a second live (a few dozen passes) is shown pass by pass
    slow_motion: bool = False
    # where Inspect opens on the race: "stall", the first pass of the run's longest stall; None, where it
    # opens on any run (`metrics.opening_iteration`)
    opens_on: str | None = None


PRESETS = (
    Preset(
        "sjd-init",
        "SJD: spatial initialisation",
        "**SJD's figure 9, live.** On an image of flat, repeated patterns, a new window slot initialised "
        "with the token above it is often already right, so whole rows are accepted at once: watch the "
        "window jump. `blue square`, SJD with window 16, seeds 0-4: 84.0 passes on average with random "
        "initialisation, 37.2 with `repeat-above` (this run, seed 0: 37 passes; `python -m specviz run "
        '--method sjd --init repeat-above --prompt "blue square" --seed S --out DIR` prints each); 86.6 '
        "against 44.2 on `red apple`. The paper finds the gain on a '2D logo' prompt and little on detailed "
        "images.",
        "tiny",
        "sjd",
        "blue square",
        params={"window": 16, "init": "repeat-above"},
        slow_motion=True,
    ),
    Preset(
        "scd-effect",
        "SCD: fewer drafts redrawn",
        "**The SCD effect.** Under SJD most drafts left in the window change from one pass to the next "
        "(each is redrawn from a fresh sample), so little carries over; SCD-MC couples the draws so a "
        "draft stays put unless the distribution moved. Watch *drafts changed per iteration* in Inspect, "
        "then press Compare: its *drafts changed* column gives the share for each method. It needs a model "
        "that is really uncertain: `tiny-uncertain` (four designs per emoji, textured tokens), `smiling "
        "face with heart-eyes`, window 16, its default temperature 1, "
        "seeds 0-3: SJD 87.5 passes with 71% of carried drafts changed, SCD-MC 76.5 with 51% (this run, "
        "seed 0: 72 passes against SJD's 89). On the nearly certain `tiny` the two are within noise.",
        "tiny-uncertain",
        "scd-mc",
        "smiling face with heart-eyes",
        params={"window": 16, "init": "random"},
        compare=("sjd", "scd-mc"),
    ),
    Preset(
        "stall",
        "A stall",
        "**A stall.** A prompt the model never saw (`a red car`: tiny knows emoji names) leaves it unsure, "
        "and SJD's window can sit for dozens of passes accepting nothing: each pass redraws the first "
        "draft and rejects it again. Seed 1 stalls 83 passes in a row and needs 178 passes in all, against "
        "AR's 256 single-token ones (seeds 0-2: 184, 178, 171 passes). Inspect opens on the long stall's "
        "first pass; step with *Next acceptance* to jump over it.",
        "tiny",
        "sjd",
        "a red car",
        seed=1,
        params={"window": 16, "init": "random"},
        opens_on="stall",
    ),
    Preset(
        "sjd-pac",
        "SJD-PAC: a tree at the rejection",
        "**SJD-PAC.** SJD fixes one token and little else after a rejection; SJD-PAC drafts three candidates "
        "for each of the two positions after it and verifies all nine combinations in the same pass "
        "(Proactive Drafting), and keeps a later draft where it still passes against the stale target "
        "(Adaptive Continuation). In Inspect, *Next rejection* then the tree: the nine short branches at the "
        "root, the long chain below the first. On the uncertain `tiny-uncertain`, `rocket`, seeds 0-3: "
        "SJD-PAC (its authors' 64 tokens per pass: window 53) 58.8 passes on average, SJD 98.0 at the same "
        "window and 106.8 at its own 16. This run, seed 0: 62 passes; press Compare for both side by side on "
        "these settings, where SJD at window 53 takes 86 (103 at window 16). Over the shipped prompts its "
        "step compression is 4.21x against SJD's 2.61x (README).",
        "tiny-uncertain",
        "sjd-pac",
        "rocket",
        compare=("sjd", "sjd-pac"),
        slow_motion=True,
    ),
    Preset(
        "zipar",
        "ZipAR: rows in flight",
        "**ZipAR.** Once a row has 8 tokens the row below starts, and from then on every row in flight draws "
        "one token per pass: watch the outlined front of cells drawn together slide down the picture, two rows "
        "at a time on tiny's 16-wide grid. 136 passes instead of AR's 256 on any prompt ((rows - 1) x 8 + 16). "
        "Nothing is verified, so the image is not AR's: each lower row drew its tokens without the right half "
        "of the row above, which is where this rocket goes wrong. Over the shipped prompts x 2 seeds the "
        "tokens' mean negative log-likelihood under the AR model is 0.66 nats against AR's own 0.04 (README). "
        "A window size of 16 is AR, token for token.",
        "tiny",
        "zipar",
        "rocket",
        params={"window_size": 8},
    ),
    Preset(
        "pjd",
        "PJD: a window in every row",
        "**PJD (CVPR 2026).** ZipAR's rows in flight, each with its own Jacobi window: once a row has 8 cells "
        "decided the row below starts, and every pass verifies the head and up to 7 drafts of every row in "
        "flight at once, under a mask that hides each row's drafts from the rows below. Watch two or three "
        "windows work on the picture at the same time, each draft outlined by its fate; in Inspect the bars "
        "give each row's drafts in turn, top row first, and the sentence says what each row kept. Only the "
        "top row is verified exactly; a row below keeps its accepted drafts against a target that cannot see "
        "the end of the row above yet, so PJD is lossy (measured in docs/methods.md). On `tiny-uncertain`, "
        "`rocket`, seeds 0-3: PJD 90.3 passes on average, SJD 106.8 at its window of 16, ZipAR 136. This "
        "run, seed 0: 91 passes; press Compare for SJD and ZipAR beside it on these settings, where SJD runs at "
        "PJD's window of 8 and takes 119 (103 at window 16) and ZipAR 136.",
        "tiny-uncertain",
        "pjd",
        "rocket",
        compare=("sjd", "zipar", "pjd"),
        slow_motion=True,
    ),
    Preset(
        "peanut-depth",
        "PEANUT: depth map",
        "**PEANUT's depth map.** Draft trees verified in one pass; PEANUT deepens the next tree after a "
        "fully accepted one and makes it shallower after an early rejection. With the trained EAGLE head "
        "as drafter, `red apple` needs 50 passes (tau 5.2 tokens per pass). Inspect's depth map colours "
        "each token by the depth in its tree at which it was accepted: the long ramps are trees that ran "
        "deep, over flat background and the apple's body; the grey cells, tokens drawn after a rejection, "
        "gather along the outline and the stem.",
        "tiny",
        "peanut",
        "red apple",
        params={"drafter": "head"},
        slow_motion=True,
    ),
    Preset(
        "cspd",
        "CSpD: continuous tokens",
        "**Continuous speculative decoding.** Each token is 12 numbers drawn by a diffusion head; the "
        "draft model's tokens are accepted by a ratio of densities (the paper's Eq. 5), the first 5% of "
        "tokens pre-filled by the target. In Inspect: where each token came from, each draft's ratio and "
        "the uniform that decided it, and one draft's denoising path beside the target's from the same "
        "noise. The same run is then made without pre-filling, and *acceptance by generation step* shows "
        "both (the paper's figure 11). With the draft distilled from the target, gamma 4 accepts 0.35 of the "
        "drafts with pre-filling and 0.47 without: on one image pre-filling need not help; over the two prompts "
        "of `python -m specviz bench-cspd` (README) it raises alpha at every gamma, 0.38 to 0.43 at gamma 4, "
        "where it measured CSpD at 1.25x AR's time on one CPU thread (a busy machine shows more).",
        "tiny-continuous",
        "cspd",
        "grinning face",
        params={"gamma": 4, "prefill": 0.05},
        contrast=True,
    ),
)
PRESET_BY_KEY = {preset.key: preset for preset in PRESETS}
