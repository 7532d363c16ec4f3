"""`python -m specviz gpu-report --out DIR`: the project's CUDA figures from one command.

It runs the tests marked for CUDA (`tests/test_cuda.py`, skipped without a GPU), then for each
embedded model it measures three things:
- the host reads of every method family per pass (each one a device sync on a GPU);
- the cost of a model pass over 1 to 65 tokens against a pass over one;
- bench of every method against AR in the same process: NFE, step compression, latency.
Then the released models' shapes with random weights (`specviz.shapes`: Lumina-mGPT, Anole, Janus-Pro,
Emu3, LlamaGen-XL): AR's time per token, pass costs, each method's pass and what it spends outside the
target's forward, peak memory, and the latency each method would reach at its paper's step compression;
and MAR-B, -L and -H's pass costs, which give CSpD's cost ratio c.

On a CUDA device it runs the shipped prompts x 2 seeds with 10 timed repeats of each pass, for every
method, and the shapes at full size. Elsewhere it runs the same sections at a reduced size, so the command
itself is tested on the CPU: one prompt, one seed, two repeats, `tiny` and the continuous pair, one method
of each family, two release shapes cut down to two thin layers, no MAR.
A run's seconds are wall time. Every pass ends in its one read of the record to the host, so on a GPU
that time covers the device's work. Writes report.md and report.json.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from specviz.bench import bench
from specviz.decoding.cost import cost_sentence, pass_costs
from specviz.decoding.registry import METHODS
from specviz.decoding.syncs import hidden_reads
from specviz.inputs import read_prompts
from specviz.models.mar.cost import cost_table
from specviz.models.mar.cost import measure as mar_costs
from specviz.models.registry import load_model
from specviz.shapes import measure_shape, release_shapes, shapes_markdown

DISCRETE_MODELS = ("tiny", "tiny-uncertain")
CONTINUOUS_MODEL = "tiny-continuous"
PASS_SIZES = (1, 2, 5, 9, 17, 33, 65)
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
    models: tuple[str, ...] = (*DISCRETE_MODELS, CONTINUOUS_MODEL)
    benched: tuple[str, ...] | None = None  # the methods bench runs (None: all); host reads count every method
    shapes: tuple[str, ...] = tuple(release_shapes())  # the releases' shapes with random weights
    shape_scale: float = 1.0  # below 1: every width divided, two layers (the CPU's check of the code)
    shape_passes: int = 10  # timed passes of each method on each shape
    mar: tuple[str, ...] = ("mar-b", "mar-l", "mar-h")  # MAR releases whose pass costs give CSpD's c


def plan_for(device: torch.device) -> Plan:
    if device.type == "cuda":
        return Plan(tuple(read_prompts(None)), (0, 1), 10, PASS_SIZES)
    # on a CPU, a check that the command works: one model of each kind, one method of each family, two
    # release shapes cut down (a transformers family and LlamaGen's own GPT), no MAR
    reduced_shapes = {"shapes": ("lumina-mgpt-7b", "llamagen-xl"), "shape_scale": 1 / 32, "shape_passes": 2, "mar": ()}
    methods = ("ar", "sjd", "eagle2", "cspd")
    return Plan(("red apple",), (0,), 2, (1, 17), ("tiny", CONTINUOUS_MODEL), methods, **reduced_shapes)


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
    tests = Path(__file__).resolve().parents[1] / "tests"
    if not (tests / "test_cuda.py").is_file():
        return {"summary": "not run: no tests folder beside the package (an installed copy)", "returncode": None}
    command = [sys.executable, "-m", "pytest", "-q", "-rs", "-m", "cuda", "-n", "0", "-p", "no:cacheprovider"]
    done = subprocess.run([*command, str(tests / "test_cuda.py")], capture_output=True, text=True, cwd=tests.parent)
    lines = done.stdout.strip().splitlines()
    return {"summary": lines[-1] if lines else done.stderr.strip()[-300:], "returncode": done.returncode,
            "output": "\n".join(lines[-40:])}  # fmt: skip


def measure_model(name: str, device: str, plan: Plan, report: dict) -> None:
    """One embedded model's sections into `report`, each section's seconds into report["seconds"]."""
    model = load_model(name, device=device)
    kind = "iterate_continuous" if name == CONTINUOUS_MODEL else "iterate"
    methods = [method for method, spec in METHODS.items() if getattr(spec, kind) is not None]
    clock = time.perf_counter()
    if name != CONTINUOUS_MODEL:  # the pair's loop reads on the host by design (docs/methods.md)
        report["host_reads"] += host_read_rows(model, methods)
        report["seconds"][f"{name}: host reads"], clock = round(time.perf_counter() - clock, 1), time.perf_counter()
    costs = pass_costs(model, plan.prompts[0], plan.sizes, plan.repeats)
    report["pass_cost"][name] = {"costs": [asdict(cost) for cost in costs], "sentence": cost_sentence(costs)}
    report["seconds"][f"{name}: pass cost"], clock = round(time.perf_counter() - clock, 1), time.perf_counter()
    sampling = model.default_sampling
    benched = [method for method in methods if plan.benched is None or method in plan.benched]
    measured = bench(model, benched, list(plan.prompts), plan.seeds, sampling, compare_generate=False)
    report["bench"][name] = {"table": measured.to_dict(), "markdown": measured.markdown()}
    report["seconds"][f"{name}: bench"] = round(time.perf_counter() - clock, 1)


def gpu_report(device: str, out: Path, plan: Plan | None = None) -> dict:
    """Measure every section on `device`, write report.json and report.md into `out`, return the report."""
    place = torch.device(device)
    plan = plan or plan_for(place)
    report: dict = {
        "machine": machine(place),
        "plan": asdict(plan),
        "host_reads": [],
        "pass_cost": {},
        "bench": {},
        "shapes": [],
        "seconds": {},
    }
    started = time.perf_counter()
    report["tests"] = cuda_tests()
    report["seconds"]["CUDA tests"] = round(time.perf_counter() - started, 1)
    for name in plan.models:
        measure_model(name, device, plan, report)
    for name in plan.shapes:
        clock = time.perf_counter()
        shape = release_shapes()[name].scaled(plan.shape_scale)
        report["shapes"].append(measure_shape(shape, place, plan.sizes, plan.repeats, plan.shape_passes))
        report["seconds"][f"{name} shape"] = round(time.perf_counter() - clock, 1)
    if plan.mar:
        clock = time.perf_counter()
        costs = {name: mar_costs(name, place, list(MAR_ROWS), repeats=3) for name in plan.mar}
        report["mar"] = {"costs": {name: [asdict(cost) for cost in rows] for name, rows in costs.items()},
                         "markdown": cost_table(costs, place)}  # fmt: skip
        report["seconds"]["MAR pass costs"] = round(time.perf_counter() - clock, 1)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / "report.md").write_text(markdown(report))
    return report


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
        f"`python -m pytest -m cuda tests/test_cuda.py`: {report['tests']['summary']}",
        *(["", "```", report["tests"]["output"], "```"] if report["tests"].get("returncode") else []),
        "",
        "## Host reads per pass",
        "",
        "`aten::item` calls per pass, each a device sync on a GPU, leaving out CPU-only argument checks. Every pass "
        "also reads its record once (and a tree its shape), through `specviz.syncing`: not counted here.",
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
    if report["shapes"]:
        lines += ["", *shapes_markdown(report["shapes"])]
    if "mar" in report:
        lines += ["", "## MAR: CSpD's cost ratio", "", report["mar"]["markdown"]]
    lines += ["", "## Time per section", "", "| section | seconds |", "|---|---:|"]
    lines += [f"| {name} | {value} |" for name, value in report["seconds"].items()]
    return "\n".join(lines) + "\n"
