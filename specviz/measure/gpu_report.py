"""`python -m specviz gpu-report --out DIR`: the project's CUDA figures from one command.

First the released models' shapes with random weights (`specviz.measure.shapes`: Lumina-mGPT, Anole,
Janus-Pro, Emu3, LlamaGen-XL), each on its fast path (a static cache, fixed-width passes, CUDA graphs) and
then each on its plain path: AR's time per token beside the floor of reading the bf16 weights once, pass
costs, each method's pass and what it spends outside the target's forward, peak memory, and the latency
each method would reach at its paper's step compression. Then it runs the tests marked for CUDA
(`tests/test_cuda.py`, skipped without a GPU), and for each embedded model it measures three things:
- the host reads of every method family per pass (each one a device sync on a GPU);
- the cost of a model pass over 1 to 65 tokens against a pass over one;
- bench of every method against AR in the same process: NFE, step compression, latency;
with MAR-B, -L and -H's pass costs, which give CSpD's cost ratio c, and the fast path on `tiny`
(`specviz.measure.fast_path`): each method on its plain path and on its fast path, timed in turns, and both
paths in lock-step to show that their distributions agree.

On a CUDA device it runs the first 3 shipped prompts x 1 seed with 10 timed repeats of each pass, for
every method, and the shapes at full size, starting no step after 10.5 minutes (a lent GPU's 15 minutes,
its start and the last step included; `--minutes` sets another limit). Elsewhere it runs the same
sections at a reduced size, so the command itself is tested on the CPU: one prompt, one seed, two
repeats, `tiny` and the continuous pair, a window and a tree method (AR alone on the pair), two release
shapes cut down to two thin layers on both paths, no MAR.
The steps run in the order `sections` gives (most valuable first), the report is rewritten after each,
and `budget_s` starts no step after its time: a lent GPU's few minutes end in a report of what matters
most, with the rest named as not run.
A run's seconds are wall time. Every pass ends in its one read of the record to the host, so on a GPU
that time covers the device's work. Writes report.md and report.json.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from specviz.core.inputs import read_prompts
from specviz.decoding.registry import METHODS
from specviz.measure.bench import bench
from specviz.measure.cost import cost_sentence, pass_costs
from specviz.measure.fast_path import fast_path_markdown, measure_fast_path
from specviz.measure.shapes import measure_shape, release_shapes, shapes_markdown
from specviz.measure.syncs import hidden_reads
from specviz.models.mar.cost import cost_table
from specviz.models.mar.cost import measure as mar_costs
from specviz.models.registry import get_entry, load_model

DISCRETE_MODELS = ("tiny", "tiny-uncertain")
CONTINUOUS_MODEL = "tiny-continuous"
PASS_SIZES = (1, 2, 5, 9, 17, 33, 65)
SHAPE_PATHS = ("fast", "plain")
MAR_ROWS = (1, 4, 8, 16, 32)  # gamma: the CSpD paper's draft numbers
# the settings each method family's host reads are counted with (small trees and windows: the count is per pass)
READ_SETTINGS = {"window": 8, "tree_tokens": 12}


@dataclass(frozen=True)
class Plan:
    """How much a report measures: the full one on CUDA, a reduced one elsewhere."""

    prompts: tuple[str, ...]
    seeds: tuple[int, ...]
    repeats: int
    sizes: tuple[int, ...]
    models: tuple[str, ...] = ("tiny", CONTINUOUS_MODEL, "tiny-uncertain")
    benched: tuple[str, ...] | None = None  # the methods bench runs (None: all); host reads count every method
    shapes: tuple[str, ...] = tuple(release_shapes())  # the releases' shapes with random weights
    shape_paths: tuple[str, ...] = SHAPE_PATHS  # each shape on these paths, every shape's fast path first
    shape_scale: float = 1.0  # below 1: every width divided, two layers (the CPU's check of the code)
    shape_passes: int = 10  # timed passes of each method on each shape
    mar: tuple[str, ...] = ("mar-b", "mar-l", "mar-h")  # MAR releases whose pass costs give CSpD's c
    fast_prompts: int = 2  # how many of `prompts` the fast path is timed on (0: no fast path step)
    fast_methods: tuple[str, ...] | None = None  # the methods the fast path runs (None: those benched)
    minutes: float | None = None  # start no step after this (--minutes overrides); None: no limit


def plan_for(device: torch.device) -> Plan:
    if device.type == "cuda":
        # within a lent GPU's 15 minutes: its start, then steps started up to 10.5 minutes, the last of them
        # (the CUDA tests or a bench of 3 prompts) ending within about 3 more
        return Plan(tuple(read_prompts(None))[:3], (0,), 10, PASS_SIZES, minutes=10.5)
    # on a CPU, a check that the command works: one model of each kind, a window and a tree method (the pair's
    # bench runs AR alone: a CSpD run takes a minute on two cores), two release shapes cut down (a transformers
    # family and LlamaGen's own GPT), no MAR
    reduced_shapes = {"shapes": ("lumina-mgpt-7b", "llamagen-xl"), "shape_scale": 1 / 32, "shape_passes": 2, "mar": ()}
    methods = ("ar", "sjd", "eagle2")
    reduced = {**reduced_shapes, "fast_methods": ("ar", "sjd")}  # the fast path's trees: tests/test_fast_path.py
    return Plan(("red apple",), (0,), 2, (1, 17), ("tiny", CONTINUOUS_MODEL), methods, **reduced)


def sections(plan: Plan) -> list[tuple[str, str]]:
    """(section, step) in the order they run, most valuable first: the release shapes on the fast path (what
    the papers' models cost a pass without the host's launches), then on the plain path, the checks, MAR
    (CSpD's cost ratio), then each embedded model's bench. A report cut short by its time budget keeps
    what matters most."""
    steps = [("shapes", f"{name}, {path} path") for path in plan.shape_paths for name in plan.shapes]
    steps += [("tests", "tests")]
    first, *others = plan.models
    steps += [(first, "host reads"), (first, "pass cost")]
    steps += [("mar", "pass costs")] if plan.mar else []
    steps += [(first, "bench")]
    steps += [(first, "fast path")] if get_entry(first).fast_path and plan.fast_prompts else []
    for name in others:
        steps += [(name, "host reads")] if name != CONTINUOUS_MODEL else []  # the pair reads on the host by design
        steps += [(name, "pass cost"), (name, "bench")]
    return steps


SECTIONS = ("tests", *DISCRETE_MODELS, CONTINUOUS_MODEL, "shapes", "mar")


def machine(device: torch.device) -> dict:
    """What the figures were measured on."""
    facts = {
        "device": str(device),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        memory = round(properties.total_memory / 2**30, 1)
        facts.update(gpu=properties.name, gpu_memory_gb=memory, cuda=torch.version.cuda)
    return facts


def read_settings(method: str) -> dict:
    """The small window or tree the method's host reads are counted with, by the parameters it takes."""
    takes = {name for name, _, _ in METHODS[method].parameters.fields()}
    return {name: value for name, value in READ_SETTINGS.items() if name in takes}


def host_read_rows(model, methods: list[str]) -> list[dict]:
    """Per method: hidden host reads per pass (AR's one is its token, read for the record)."""
    rows = []
    for method in methods:
        passes = 3
        found = hidden_reads(model, method, read_settings(method), passes)
        rows.append({"model": model.name, "method": method, "reads_per_pass": found / passes})
    return rows


def cuda_tests() -> dict:
    """The tests marked for CUDA, run as the suite runs them (each skips, saying why, without CUDA)."""
    tests = Path(__file__).resolve().parents[2] / "tests"
    if not (tests / "test_cuda.py").is_file():
        return {"summary": "not run: no tests folder beside the package (an installed copy)", "returncode": None}
    # a GPU machine's many cores run the checks side by side (each is bound by the host's kernel launches); on
    # a small machine one process, where the tests skip at once
    workers = min(4, (os.cpu_count() or 1) // 4)
    command = [sys.executable, "-m", "pytest", "-q", "-rfEs", "-m", "cuda", "-n", str(workers)]
    command += ["-p", "no:cacheprovider"]
    done = subprocess.run([*command, str(tests / "test_cuda.py")], capture_output=True, text=True, cwd=tests.parent)
    lines = done.stdout.strip().splitlines()
    # every failing test by name (pytest's short summary), then the end of the output
    outcomes = [line for line in lines if line.startswith(("FAILED", "ERROR", "SKIPPED"))]
    return {"summary": lines[-1] if lines else done.stderr.strip()[-300:], "returncode": done.returncode,
            "output": "\n".join([*outcomes, *lines[-40:]])}  # fmt: skip


class Models:
    """Each embedded model loaded once, on first use."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.loaded: dict = {}

    def __getitem__(self, name: str):
        if name not in self.loaded:
            self.loaded[name] = load_model(name, device=self.device)
        return self.loaded[name]

    def fast(self, name: str):
        """The model on its fast path (`specviz.models.fast.fixed_passes`)."""
        key = f"{name} (fast path)"
        if key not in self.loaded:
            self.loaded[key] = load_model(name, device=self.device, fast_path=True)
        return self.loaded[key]


def measure_step(section: str, step: str, plan: Plan, place: torch.device, models: Models, report: dict) -> None:
    """One step of the report into `report`."""
    if section == "tests":
        report["tests"] = cuda_tests()
    elif section == "shapes":
        name, path = step.removesuffix(" path").split(", ")
        shape = release_shapes()[name].scaled(plan.shape_scale)
        fast = path == "fast"
        report["shapes"].append(measure_shape(shape, place, plan.sizes, plan.repeats, plan.shape_passes, fast))
    elif section == "mar":
        costs = {name: mar_costs(name, place, list(MAR_ROWS), repeats=3) for name in plan.mar}
        report["mar"] = {"costs": {name: [asdict(cost) for cost in rows] for name, rows in costs.items()},
                         "markdown": cost_table(costs, place)}  # fmt: skip
    else:
        model = models[section]
        kind = "iterate_continuous" if section == CONTINUOUS_MODEL else "iterate"
        methods = [method for method, spec in METHODS.items() if getattr(spec, kind) is not None]
        benched = [method for method in methods if plan.benched is None or method in plan.benched]
        if step == "host reads":
            report["host_reads"] += host_read_rows(model, methods)
        elif step == "fast path":
            prompts = list(plan.prompts[: plan.fast_prompts])
            chosen = list(plan.fast_methods) if plan.fast_methods is not None else benched
            results = measure_fast_path(
                model, models.fast(section), chosen, prompts, list(plan.seeds), model.default_sampling
            )
            table = fast_path_markdown(results, section, str(place))
            report["fast_path"][section] = {
                "results": [{**asdict(result), "gain": result.gain} for result in results],
                "markdown": "\n".join(table),
            }
        elif step == "pass cost":
            costs = pass_costs(model, plan.prompts[0], plan.sizes, plan.repeats)
            report["pass_cost"][section] = {"costs": [asdict(cost) for cost in costs], "sentence": cost_sentence(costs)}
        else:
            sampling = model.default_sampling
            measured = bench(model, benched, list(plan.prompts), plan.seeds, sampling, compare_generate=False)
            report["bench"][section] = {"table": measured.to_dict(), "markdown": measured.markdown()}


def gpu_report(
    device: str,
    out: Path,
    plan: Plan | None = None,
    budget_s: float | None = None,
    only: list[str] | None = None,
    prompts: int | None = None,
) -> dict:
    """Measure every section on `device` (those in `only`, where given), writing report.json and report.md
    into `out` after each step, so a run cut off keeps what it measured; no step starts after `budget_s`
    seconds (the plan's minutes where not given), and the benches take the plan's first `prompts` prompts,
    where given. A step that fails is recorded with its error and the report goes on."""
    place = torch.device(device)
    plan = plan or plan_for(place)
    if budget_s is None and plan.minutes is not None:
        budget_s = plan.minutes * 60
    if prompts is not None:
        plan = replace(plan, prompts=plan.prompts[:prompts])
    report: dict = {
        "machine": machine(place),
        "plan": asdict(plan),
        "host_reads": [],
        "pass_cost": {},
        "bench": {},
        "fast_path": {},
        "shapes": [],
        "seconds": {},
        "errors": {},
        "not_run": [],
    }
    models = Models(device)
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    for section, step in sections(plan):
        name = section if section == step else f"{section}: {step}"
        if only is not None and section not in only:
            continue
        if budget_s is not None and time.perf_counter() - started > budget_s:
            report["not_run"].append(name)
            continue
        print(f"[{time.perf_counter() - started:6.0f} s] {name}", flush=True)
        clock = time.perf_counter()
        try:
            measure_step(section, step, plan, place, models, report)
        except Exception as error:  # recorded, and the next section still runs (a broken CUDA path is a finding)
            report["errors"][name] = "".join(traceback.format_exception_only(error)).strip()[-2000:]
            print(traceback.format_exc(), flush=True)
        report["seconds"][name] = round(time.perf_counter() - clock, 1)
        write_report(report, out)
    write_report(report, out)
    return report


def write_report(report: dict, out: Path) -> None:
    """report.json and report.md, each written whole to a temporary name and then moved into place."""
    for name, text in (("report.json", json.dumps(report, indent=1)), ("report.md", markdown(report))):
        partial = out / f".{name}.partial"
        partial.write_text(text)
        partial.replace(out / name)


def markdown(report: dict) -> str:
    """The report as a page: machine, host reads, pass costs, bench per model, and what each section took."""
    facts = report["machine"]
    plan = report["plan"]
    lines = [
        "# GPU report" if facts["device"].startswith("cuda") else "# GPU report (reduced, without CUDA)",
        "",
        "Measured on " + ", ".join(f"{key} {value}" for key, value in facts.items()) + ".",
        f"{len(plan['prompts'])} prompt(s) x {len(plan['seeds'])} seed(s); {plan['repeats']} timed repeats per "
        "pass size.",
        "",
        "## Tests marked for CUDA",
        "",
        *_tests_lines(report.get("tests")),
        "",
        "## Host reads per pass",
        "",
        "`aten::item` calls per pass, each a device sync on a GPU, leaving out CPU-only argument checks. Every pass "
        "also reads its record once (and a tree its shape), through `specviz.models.syncing`: not counted here.",
        "",
        "| model | method | reads per pass |",
        "|---|---|---:|",
        *(f"| {row['model']} | {row['method']} | {row['reads_per_pass']:.2f} |" for row in report["host_reads"]),
        "",
        "## What a pass costs",
    ]
    for name, entry in report["pass_cost"].items():
        lines += ["", f"`{name}`: one forward over n tokens after the prompt", "", "| tokens | ms | over one token |"]
        lines += ["|---:|---:|---:|"]
        lines += [f"| {cost['tokens']} | {cost['ms']:.2f} | {cost['ratio']:.2f} |" for cost in entry["costs"]]
        lines += ["", entry["sentence"]]
    lines += ["", "## Every method against AR"]
    for entry in report["bench"].values():
        lines += ["", entry["markdown"]]
    if report.get("fast_path"):
        lines += ["", "## The fast path on the embedded models"]
        lines += [line for entry in report["fast_path"].values() for line in ("", entry["markdown"])]
    if report["shapes"]:
        lines += ["", *shapes_markdown(report["shapes"])]
    if "mar" in report:
        lines += ["", "## MAR: CSpD's cost ratio", "", report["mar"]["markdown"]]
    if report["errors"]:
        lines += ["", "## Sections that failed", ""]
        lines += [f"- {name}: `{error.splitlines()[-1]}`" for name, error in report["errors"].items()]
    if report["not_run"]:
        lines += ["", "## Not run: the time budget ran out", "", ", ".join(report["not_run"])]
    lines += ["", "## Time per section", "", "| section | seconds |", "|---|---:|"]
    lines += [f"| {name} | {value} |" for name, value in report["seconds"].items()]
    return "\n".join(lines) + "\n"


def _tests_lines(tests: dict | None) -> list[str]:
    if tests is None:
        return ["not run"]
    lines = [f"`python -m pytest -m cuda tests/test_cuda.py`: {tests['summary']}"]
    return lines + (["", "```", tests["output"], "```"] if tests.get("returncode") else [])
