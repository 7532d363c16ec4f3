"""Re-make the measured pages of docs/measurements/ by running the commands that measure them.

    python scripts/make_docs.py                      # every section, with nothing else running
    python scripts/make_docs.py --only bench,trees   # some of them
    python scripts/make_docs.py --list               # the sections and their commands

Each section runs `python -m specviz ...` (or the test suite) as its own process and writes
docs/measurements/<name>.md: the commands verbatim, their output as printed, the date, the commit and
the machine. No number in those pages is typed by hand, so they cannot drift from what the code gives;
a page says when it was made, so a section not re-run keeps its date. The sections time things: run
the script on a quiet machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "docs" / "measurements"
SPECVIZ = [sys.executable, "-m", "specviz"]
WINDOW_METHODS = "jacobi,sjd,scd-mc,scd-gs,lantern,gsd"
CSPD_PROMPTS = ("red apple", "grinning face")


@dataclass
class Section:
    name: str
    title: str
    about: str  # what the page measures and how to read it; no numbers, those come from the runs
    commands: list[list[str]] = field(default_factory=list)  # each printed with its output
    table: Callable[[list[dict]], str] | None = None  # a compact table from the commands' --json files


def bench(*arguments: str) -> list[str]:
    return [*SPECVIZ, "bench", *arguments]


def window_table(reports: list[dict]) -> str:
    """Step compression / latency speedup, one row per window, one column per method."""
    methods = [r["method"] for r in reports[0]["results"] if r["method"] != "ar"]
    lines = ["| W | " + " | ".join(methods) + " |", "|---|" + "---:|" * len(methods)]
    for window, report in zip(WINDOWS, reports, strict=True):
        by_method = {r["method"]: r for r in report["results"]}
        cells = [_compression_and_latency(by_method[m]) for m in methods]
        lines.append(f"| {window} | " + " | ".join(cells) + " |")
    return "step compression / latency speedup against AR in the same run\n\n" + "\n".join(lines)


def _compression_and_latency(result: dict) -> str:
    from specviz.viz.narration import ratio_text

    return f"{result['step_compression']:.2f}x / {ratio_text(result['latency_speedup'])}"


WINDOWS = (8, 16, 32, 64)
MODELS = ("tiny", "tiny-uncertain")  # the embedded discrete models: nearly certain, and uncertain

SECTIONS = [
    Section(
        "bench",
        "Every window method against AR on the embedded models",
        "The shipped prompts x 2 seeds at window 16 and each model's default sampling, on `tiny` (one design per "
        "emoji, learnt by heart: nearly certain) and on `tiny-uncertain` (four designs and textured tokens). Step "
        "compression counts tokens per model pass; latency speedup is AR's mean seconds over the method's, both "
        "measured in the same run, methods interleaved per prompt and seed. The table after each checks the AR "
        "loop against transformers' own `generate()` on the same model: a slow baseline would inflate every "
        "speedup.",
        [bench("--model", model, "--methods", f"ar,{WINDOW_METHODS}", "--seeds", "2") for model in MODELS],
    ),
    Section(
        "windows",
        "Step compression and latency by window",
        "`tiny-uncertain`, the shipped prompts x 1 seed per window. On a CPU a pass over W + 1 tokens and two "
        "guidance rows costs several one-token passes, so fewer passes pay only up to a moderate window; on a GPU "
        "a window pass costs about as much as a one-token pass (see `python -m specviz pass-cost`).",
        [
            bench(
                "--model",
                "tiny-uncertain",
                "--methods",
                WINDOW_METHODS,
                "--seeds",
                "1",
                "--window",
                str(w),
                "--skip-generate",
            )
            for w in WINDOWS
        ],
        window_table,
    ),
    Section(
        "scd",
        "The SCD effect: SJD, SCD-MC and SCD-GS at window 32",
        "The SCD paper's claim is that redrawing every carried draft afresh (SJD) changes tokens that were "
        "fine, and that coupling the redraws (maximal coupling, Gumbel sharing) keeps them: read the changed "
        "share and NFE columns. The effect needs uncertainty: on `tiny` the drafts' distributions are nearly "
        "one-hot, so independent redraws already agree; `tiny-uncertain` is uncertain as real models are.",
        [
            bench(
                "--model", model, "--methods", "sjd,scd-mc,scd-gs", "--seeds", "2", "--window", "32", "--skip-generate"
            )
            for model in MODELS
        ],
    ),
    Section(
        "initialisation",
        "Stalls by initialisation and reset",
        "`tiny`, whose near-certain conditionals make stalls: runs of passes that accept no draft. SJD's section "
        "4.2 initialises new window slots at random or from a neighbour; `--reset-in-stall K` (specviz's "
        "lossless option, not the papers') re-initialises the window after K passes in a row that accepted "
        "nothing.",
        [
            bench("--methods", "sjd,scd-mc", "--seeds", "1", "--skip-generate", *options)
            for options in (
                (),
                ("--init", "repeat-left"),
                ("--init", "repeat-left", "--reset-in-stall", "8"),
                ("--init", "sample-left"),
            )
        ],
    ),
    Section(
        "refine",
        "The refined draft",
        "`tiny`. After a rejection, the official SJD code drafts the first new slot from the model's row after "
        "the window (`--refine`, the default) instead of initialising it like the other new slots "
        "(`--no-refine`).",
        [
            bench("--methods", "sjd", "--seeds", "2", "--window", window, "--skip-generate", refine)
            for window in ("8", "16")
            for refine in ("--refine", "--no-refine")
        ],
    ),
    Section(
        "pass-cost",
        "What a pass costs",
        "One model pass of 1 to 65 tokens after the prefill, timed after a warm-up, on each embedded discrete "
        "model: the cost a window or tree pass pays for verifying many tokens at once. A method's step "
        "compression turns into a latency speedup only as far as its passes cost little more than AR's "
        "one-token pass; on a GPU they cost about the same, on these CPU cores they do not.",
        [[*SPECVIZ, "pass-cost", "--model", model, "--sizes", "1,2,5,9,17,33,65"] for model in MODELS],
    ),
    Section(
        "trees",
        "Draft trees: EAGLE-2 and PEANUT against SJD",
        "The shipped prompts x 1 seed, on `tiny` and on `tiny-uncertain`, each with the training-free drafter and "
        "with its trained EAGLE head at the model's default temperature 1, then with the heads at temperature 0 "
        "(greedy: a draft is accepted when it is the target's argmax). tau counts the tokens a tree pass commits "
        "(the accepted path and the token drawn after it), as the papers' tables do.",
        [
            *(
                bench(
                    "--model",
                    model,
                    "--methods",
                    "sjd,scd-mc,eagle2,peanut",
                    "--seeds",
                    "1",
                    "--skip-generate",
                    "--drafter",
                    drafter,
                )
                for model in ("tiny", "tiny-uncertain")
                for drafter in ("training-free", "head")
            ),
            *(
                bench(
                    "--model",
                    model,
                    "--methods",
                    "sjd,eagle2,peanut",
                    "--seeds",
                    "1",
                    "--skip-generate",
                    "--drafter",
                    "head",
                    "--temperature",
                    "0",
                )
                for model in ("tiny", "tiny-uncertain")
            ),
        ],
    ),
    Section(
        "sjd-pac",
        "SJD-PAC against SJD, and its two parts",
        "The shipped prompts x 2 seeds on `tiny-uncertain` (uncertain, as real models are) and on `tiny`: AR, SJD at "
        "its default window of 16 and at SJD-PAC's 53 positions, SJD-PAC with the authors' defaults, and the "
        "paper's ablation: the plain chain (one candidate, no tree positions) without and with Adaptive "
        "Continuation, and Proactive Drafting without Adaptive Continuation. Step compression is the comparison; "
        "on these CPU cores a 64-token pass costs several one-token passes, so latency is not (see pass-cost).",
        [
            *(
                cmd
                for model in ("tiny-uncertain", "tiny")
                for cmd in (
                    bench("--model", model, "--methods", "ar,sjd,sjd-pac", "--seeds", "2", "--skip-generate"),
                    bench("--model", model, "--methods", "sjd", "--window", "53", "--seeds", "2", "--skip-generate"),
                    bench(
                        "--model",
                        model,
                        "--methods",
                        "sjd-pac",
                        "--candidates",
                        "1",
                        "--tree-positions",
                        "0",
                        "--no-continuation",
                        "--seeds",
                        "2",
                        "--skip-generate",
                    ),
                    bench(
                        "--model",
                        model,
                        "--methods",
                        "sjd-pac",
                        "--candidates",
                        "1",
                        "--tree-positions",
                        "0",
                        "--seeds",
                        "2",
                        "--skip-generate",
                    ),
                    bench(
                        "--model", model, "--methods", "sjd-pac", "--no-continuation", "--seeds", "2", "--skip-generate"
                    ),
                )
            )
        ],
    ),
    Section(
        "lantern-pp",
        "LANTERN++: a static tree with relaxed acceptance",
        "LANTERN++ (EAGLE-1's static tree `mc_sim_7b_63`, LANTERN's test at delta 0.1, k 1000) beside EAGLE-2 and "
        "PEANUT + LANTERN on the shipped prompts x 1 seed: on `tiny` with its trained EAGLE head, as the paper "
        "drafts, and on `tiny-uncertain` with the training-free drafter. Then the deviation the relaxation costs, "
        "measured on the exactness toy against its exact AR distribution (at delta 0 the static tree is exact).",
        [
            bench(
                "--model",
                "tiny",
                "--methods",
                "ar,eagle2,peanut-lantern,lantern++",
                "--drafter",
                "head",
                "--seeds",
                "1",
                "--skip-generate",
            ),
            bench(
                "--model",
                "tiny-uncertain",
                "--methods",
                "ar,sjd,eagle2,peanut-lantern,lantern++",
                "--seeds",
                "1",
                "--skip-generate",
            ),
            [*SPECVIZ, "check-lossless", "--method", "lantern++", "--samples", "3000"],
            [*SPECVIZ, "check-lossless", "--method", "lantern++", "--samples", "3000", "--delta", "0"],
        ],
    ),
    Section(
        "zipar",
        "ZipAR: rows in flight",
        "ZipAR against AR (at s = 8 also SJD, lossless, for its likelihood) by window size s on the shipped "
        "prompts x 2 seeds: on `tiny` (16 x 16 grid; s of 16 is raster AR token for token, tested) and "
        "`tiny-uncertain`. Its passes depend only on the grid and s: "
        "(rows - 1) s + cols. `NLL under AR`, the mean negative log-likelihood of the images' tokens under the AR "
        "model, shows the deviation on the real model: AR's own row estimates its entropy, and a method that draws "
        "other images moves away from it (a cross-entropy, not a divergence: either way). Then the deviation on the "
        "exactness toys against their exact AR distribution, at s = 1 (the toys' rows hold 2 and 3 cells), and "
        "the exact case (s of the row).",
        [
            bench(
                "--model", "tiny", "--methods", "ar,sjd,zipar", "--window-size", "8", "--seeds", "2", "--skip-generate"
            ),
            *(
                bench(
                    "--model", "tiny", "--methods", "ar,zipar", "--window-size", size, "--seeds", "2", "--skip-generate"
                )
                for size in ("4", "2", "1")
            ),
            *(
                bench(
                    "--model",
                    "tiny-uncertain",
                    "--methods",
                    "ar,zipar",
                    "--window-size",
                    size,
                    "--seeds",
                    "2",
                    "--skip-generate",
                )
                for size in ("8", "4")
            ),
            [*SPECVIZ, "check-lossless", "--method", "zipar"],
            [*SPECVIZ, "check-lossless", "--method", "zipar", "--toy", "long"],
            [*SPECVIZ, "check-lossless", "--method", "zipar", "--toy", "llama", "--samples", "5000"],
            [*SPECVIZ, "check-lossless", "--method", "zipar", "--window-size", "2"],
        ],
    ),
    Section(
        "cspd",
        "CSpD on the embedded continuous pair",
        "cspd (the paper's Algorithm 1) and cspd-exact (speculative sampling on whole denoising paths) by draft "
        "length gamma and pre-filled share, on two prompts; `predicted` is the speculative decoding formula "
        "from the measured acceptance alpha and the measured cost ratio c of a draft pass to a target pass. "
        "The deviation lines repeat one speculative step at a fixed prefix and test its tokens against the "
        "target's own draws (energy distance, permutation test).",
        [
            [
                *SPECVIZ,
                "bench-cspd",
                "--prompts",
                "PROMPTS",
                "--gammas",
                "4,8,16",
                "--prefills",
                "0,0.05",
                "--deviation",
                "2000",
            ]
        ],
    ),
    Section(
        "times",
        "Times on this machine",
        "Median and range over repeats: `--help` and an argument error as whole processes, an AR run by the "
        "clock `run` prints (the generation, without start-up). The same AR run with one and with two torch threads "
        "(`SPECVIZ_THREADS`) shows what the thread choice is for: with a core busy elsewhere, two threads "
        "spin-wait for each other.",
    ),
    Section(
        "suite",
        "The test suite",
        "The README's test command, timed once as a whole process.",
        [[sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]],
    ),
]


def machine() -> str:
    import torch

    model = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        platform.processor() or "unknown CPU",
    ) if Path("/proc/cpuinfo").exists() else platform.processor()  # fmt: skip
    gpu = f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ", no GPU"
    return f"{model}, {os.cpu_count()} cores{gpu}, Python {platform.python_version()}, torch {torch.__version__}"


def commit() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                           text=True, cwd=ROOT)  # fmt: skip
    return head.stdout.strip() + (" with uncommitted changes" if dirty.stdout.strip() else "")


def shown(command: list[str]) -> str:
    """The command as a reader would type it."""
    words = [word for word in command if word != "-p" and word != "no:cacheprovider"]
    if words[0] == sys.executable:
        words[0] = "python"
    return shlex.join(words)


def run(command: list[str], extra_env: dict[str, str] | None = None) -> tuple[str, float]:
    """The command's output and seconds; check-lossless may exit 1, its report that a lossy method differs."""
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env={**os.environ, **(extra_env or {})})
    seconds = time.perf_counter() - started
    if done.returncode not in ((0, 1) if "check-lossless" in command else (0,)):
        raise SystemExit(f"{shown(command)} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done.stdout, seconds


def timings(command: list[str], repeats: int, extra_env: dict[str, str] | None = None) -> str:
    seconds = [run(command, extra_env)[1] for _ in range(repeats)]
    return f"{statistics.median(seconds):.2f} s (range {min(seconds):.2f}-{max(seconds):.2f} s, {repeats} runs)"


def generation_seconds(command: list[str], repeats: int, extra_env: dict[str, str]) -> str:
    """The run's own clock as `run` prints it (`seconds=`): the generation, not the process's start-up."""
    seconds = [float(re.search(r"seconds=([\d.]+)", run(command, extra_env)[0]).group(1)) for _ in range(repeats)]
    return f"{statistics.median(seconds):.2f} s (range {min(seconds):.2f}-{max(seconds):.2f} s, {repeats} runs)"


def times_page(scratch: Path) -> str:
    rows = [
        ("`--help`", shown([*SPECVIZ, "--help"]), timings([*SPECVIZ, "--help"], 5)),
        ("an argument error (`run` without a prompt)", shown([*SPECVIZ, "run"]), _error_timing()),
    ]
    for model in MODELS:
        ar = [*SPECVIZ, "run", "--model", model, "--method", "ar", "--prompt", "red apple", "--out", str(scratch)]
        for threads in ("1", "2"):
            what = f"AR, one image of `{model}`, {threads} torch thread{'s' * (threads != '1')}"
            command = f"SPECVIZ_THREADS={threads} " + shown(ar).replace(str(scratch), "DIR")
            rows.append((what, command, generation_seconds(ar, 3, {"SPECVIZ_THREADS": threads})))
    lines = ["| what | time | command |", "|---|---:|---|"]
    lines += [f"| {what} | {time_text} | `{command}` |" for what, command, time_text in rows]
    return "\n".join(lines)


def _error_timing() -> str:
    seconds = []
    for _ in range(5):
        started = time.perf_counter()
        subprocess.run([*SPECVIZ, "run"], capture_output=True, cwd=ROOT)
        seconds.append(time.perf_counter() - started)
    return f"{statistics.median(seconds):.2f} s (range {min(seconds):.2f}-{max(seconds):.2f} s, 5 runs)"


def make(section: Section, scratch: Path) -> str:
    parts = [
        f"# {section.title}",
        "",
        section.about,
        "",
        f"Made by `python scripts/make_docs.py --only {section.name}` on {datetime.date.today().isoformat()} at "
        f"commit {commit()}: {machine()}. Seconds on a shared machine drift from day to day; compare numbers "
        "within one page, never across pages.",
    ]
    if section.name == "times":
        return "\n".join([*parts, "", times_page(scratch), ""])
    prompts = scratch / "cspd-prompts.txt"
    prompts.write_text("\n".join(CSPD_PROMPTS) + "\n")
    reports = []
    for index, template in enumerate(section.commands):
        command = [word.replace("PROMPTS", str(prompts)) for word in template]
        json_path = scratch / f"{section.name}-{index}.json"
        if section.table is not None:
            command += ["--json", str(json_path)]
        output, seconds = run(command)
        if section.table is not None:
            reports.append(json.loads(json_path.read_text()))
        else:
            text = shown(command).replace(str(prompts), "PROMPTS")
            if prompts.name in text:
                text += f"  # PROMPTS: {', '.join(CSPD_PROMPTS)}, one per line"
            shown_output = output.strip().splitlines()[-1] if section.name == "suite" else output.strip()
            parts += ["", "```bash", text, "```", f"({seconds / 60:.1f} min)", "", shown_output]
    if section.table is not None:
        parts += ["", "```bash", *(shown(c) for c in section.commands), "```", "", section.table(reports)]
    return "\n".join(parts) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated sections (default: all)")
    parser.add_argument("--list", action="store_true", help="list the sections and their commands")
    args = parser.parse_args()
    names = [s.name for s in SECTIONS]
    chosen = names if not args.only else [name.strip() for name in args.only.split(",")]
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        parser.error(f"no section {', '.join(unknown)}; the sections: {', '.join(names)}")
    if args.list:
        for section in SECTIONS:
            print(f"{section.name}: {section.title}")
            for command in section.commands:
                print(f"    {shown(command)}")
        return 0
    PAGES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        for section in SECTIONS:
            if section.name in chosen:
                started = time.perf_counter()
                (PAGES / f"{section.name}.md").write_text(make(section, Path(scratch)))
                print(f"{section.name}: {(time.perf_counter() - started) / 60:.1f} min", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
