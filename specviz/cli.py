"""Command line: `python -m specviz {run,race,models,bench,check-lossless,figures,...}`; every subcommand has --help.

The parser is built from light modules only (the method catalogue, the model registry, the figure
options), so --help and argument errors answer at once; each command imports torch, transformers,
scipy or matplotlib when it starts its work, after everything that can be checked without them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from specviz.core.catalogue import BASELINE, CATALOGUE, is_baseline, method_info
from specviz.core.errors import REQUEST_ERRORS, ModelUnavailable
from specviz.core.figure_options import FIGURE_KINDS, FORMATS, STYLES, WIDTH_RANGE_IN
from specviz.core.inputs import (
    brief,
    check_device,
    check_file_inside,
    check_output_file,
    check_output_folder,
    check_prompt,
    check_seed,
    output_folder,
    read_prompts,
    shown_path,
)
from specviz.core.params import all_fields
from specviz.core.settings import SamplingSettings
from specviz.core.threads import choose_threads, configure_threads
from specviz.core.timing import MAX_TIMINGS, TIMINGS
from specviz.models.imagenet import EXAMPLE_CLASSES
from specviz.models.registry import MODELS, get_entry, load_model
from specviz.models.toys import TOY_DESCRIPTIONS

if TYPE_CHECKING:
    from PIL import Image

    from specviz.models.protocol import ImageModel
    from specviz.trace import Trace

IMAGE_SCALE = 8  # saved PNGs are upscaled with nearest neighbour so each token cell stays crisp
RUN_FILES = ("image.png", "trace.json")
DEPTH_MAP_STEM = "depth-map"  # `run` of a tree method also writes depth-map.png
MAX_BENCH_SEEDS = 1000
LOSSLESS_SAMPLES = 20_000  # discrete tokens: a chi-square test on an enumerable toy
DEFAULT_TOY = "short"
# measured on the 2-core machine with one torch thread: 1,600 samples/s (AR on the short toy) down to 140-250
# (every method on the llama toy), so this many take from 2 to about 20 minutes
MAX_LOSSLESS_SAMPLES = 200_000
CONTINUOUS_SAMPLES = 2_000  # continuous tokens: finds a broken resampling (cspd's small gap on the toy needs more)
# each sample is a whole run of the method's loop (320 samples/s for cspd-exact, 430 for cspd, 1,300 for
# ar-draft), and the energy test's permutations grow with the square of the count (38 s at 8,000 a side):
# 20,000 take about 5 minutes
MAX_CONTINUOUS_SAMPLES = 20_000
MAX_SWEEP_SETTINGS = 64  # (gamma, pre-fill) pairs of one bench-cspd: each runs every prompt and seed twice
DEVIATION_POSITIONS = (3, 128, 250)  # a background cell of the first row, the middle, the last row
MAX_NUMBER_CHARS = 100  # longer number arguments are refused before they are parsed
MAX_MESSAGE_CHARS = 400  # argparse quotes a bad value whole; its one line is cut here
ASCII_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*")
ASCII_NUMBER = re.compile(r"\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\s*")


class UsageError(Exception):
    """Bad input the user can fix; printed as one line, exit status 2."""


def integer(text: str) -> int:
    """An argparse type: a whole number in the digits 0-9 (Python's int() reads the digits of every
    script, '٣' as 3, which a command line should refuse rather than guess)."""
    if len(text) > MAX_NUMBER_CHARS or not ASCII_INTEGER.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{brief(text)} is not a whole number in the digits 0-9")
    return int(text)


def number(text: str) -> float:
    """An argparse type: a finite decimal number in the digits 0-9, such as 0.9 or 1e-3."""
    if len(text) > MAX_NUMBER_CHARS or not ASCII_NUMBER.fullmatch(text) or not math.isfinite(float(text)):
        raise argparse.ArgumentTypeError(f"{brief(text)} is not a finite number in the digits 0-9")
    return float(text)


def _numbers(text: str, kind: Callable[[str], int | float], flag: str) -> list:
    """A comma-separated list of numbers, each read as the argparse type `kind` reads one."""
    try:
        values = [kind(part) for part in text.split(",") if part.strip()]
    except argparse.ArgumentTypeError as error:
        raise UsageError(f"{flag} takes comma-separated numbers: {error}") from None
    if not values:
        raise UsageError(f"{flag} names no value")
    return values


def _sampling_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("sampling (defaults: the model's own)")
    group.add_argument("--temperature", type=number, help="0 means greedy")
    group.add_argument("--top-k", type=integer, help="keep the k most likely tokens (a positive integer)")
    group.add_argument("--top-p", type=number, help="nucleus sampling mass in (0, 1]")
    group.add_argument("--guidance", type=number, help="classifier-free guidance scale (1 = off)")


def _model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="tiny", help=f"one of: {', '.join(MODELS)} (default tiny)")
    parser.add_argument("--weights", help="local folder or hub id of the weights (default: the model's own)")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda")
    parser.add_argument(
        "--draft", help="draft model of a continuous pair: mar-b (default for mar-l, mar-h), mar-l (for mar-h) or none"
    )
    parser.add_argument(
        "--fast-path",
        action="store_true",
        help="every model with discrete tokens: a static KV cache and passes padded to fixed widths, replayed as "
        "CUDA graphs on a GPU (the same distributions; no faster on a CPU)",
    )


def _method_fields() -> dict:
    """Every method parameter (name -> (type, spec)), from the methods' parameter classes."""
    return all_fields([method.parameters for method in CATALOGUE.values()])


def _own_parameters(method: str) -> set[str]:
    return {name for name, _, _ in method_info(method).parameters.fields()}


def _method_help(name: str) -> str:
    """A parameter's help and defaults, from the methods that take it: 'what it means (default 16 for jacobi,
    sjd)', then each other meaning a method declares for it, with its own defaults ('...; SJD-PAC: what it
    means there (default 53 for sjd-pac)')."""
    meanings: dict[str, dict[str, list[str]]] = {}  # help -> default -> the methods declaring both
    for method in CATALOGUE.values():
        for own, _, spec in method.parameters.fields():
            if own == name:
                value = str(getattr(method.parameters(), name)).lower()
                meanings.setdefault(spec.help, {}).setdefault(value, []).append(method.name)
    texts = []
    for meaning, defaults in meanings.items():
        default = "; ".join(f"{value} for {', '.join(owners)}" for value, owners in defaults.items())
        texts.append(f"{meaning} (default {default})")
    return "; ".join(texts)


def _method_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per method parameter, its help and defaults from the parameter classes."""
    group = parser.add_argument_group("method parameters (each method takes only its own)")
    for name, (kind, spec) in _method_fields().items():
        flag = "--" + name.replace("_", "-")
        text = _method_help(name)
        if kind is bool:
            group.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=text)
        elif spec.choices:
            group.add_argument(flag, choices=spec.choices, help=text)
        else:
            group.add_argument(flag, type=integer if kind is int else number, help=f"{text}; {spec.low} to {spec.high}")


def _method_params(args: argparse.Namespace, method: str | None = None) -> dict:
    """Method parameters given on the command line; with `method`, only those that method takes."""
    given = {name: getattr(args, name) for name in _method_fields() if getattr(args, name) is not None}
    if method is not None:
        given = {k: v for k, v in given.items() if k in _own_parameters(method)}
    return given


def _sampling(args: argparse.Namespace, default: SamplingSettings) -> SamplingSettings:
    settings = default.to_dict()
    for key, value in (
        ("temperature", args.temperature),
        ("top_k", args.top_k),
        ("top_p", args.top_p),
        ("guidance_scale", args.guidance),
    ):
        if value is not None:
            settings[key] = value
    return SamplingSettings(**settings)


def _check_method_parameters(args: argparse.Namespace, methods: list[str]) -> None:
    """Each method's own parameters valid, and every parameter given taken by one of `methods` (a
    parameter none of them takes would otherwise be dropped without a word)."""
    given = _method_params(args)
    for name in methods:
        method_info(name).resolve(_method_params(args, name))
    if len(methods) == 1:
        method_info(methods[0]).resolve(given)  # names the parameters it takes
    unused = [name for name in given if not any(name in _own_parameters(method) for method in methods)]
    if unused:
        flags = ", ".join("--" + name.replace("_", "-") for name in unused)
        raise UsageError(f"none of the methods {', '.join(methods)} takes {flags}")


def _check_run_inputs(args: argparse.Namespace, methods: list[str]) -> None:
    """Everything that can be checked before a model loads: methods and their parameters, the device
    and the sampling values given (the model's own defaults are valid)."""
    _check_method_parameters(args, methods)
    _sampling(args, SamplingSettings())
    check_device(args.device)


def _load(args: argparse.Namespace) -> ImageModel:
    """The model the arguments name, once torch's threads are set."""
    configure_threads()
    return load_model(args.model, args.weights, args.device, args.draft, fast_path=args.fast_path)


def _run_files(method: str) -> tuple[str, ...]:
    """What `run` writes: the image and the trace, and for a tree method the depth map."""
    known = CATALOGUE.get(method)
    return RUN_FILES + ((f"{DEPTH_MAP_STEM}.png",) if known is not None and known.drafts_trees else ())


def command_run(args: argparse.Namespace) -> int:
    out = check_output_folder(args.out, _run_files(args.method))
    if args.class_label is not None and not get_entry(args.model).class_conditional:
        raise UsageError(f"--class is for class-conditional models (llamagen-c2i, mar-*); {args.model} takes --prompt")
    prompt, seed = check_prompt(args.prompt if args.class_label is None else args.class_label), check_seed(args.seed)
    _check_run_inputs(args, [args.method])  # the device last: checking it imports torch

    from specviz.decoding import run
    from specviz.metrics import draft_acceptance, has_trees, per_tree
    from specviz.models.protocol import decode_in_order
    from specviz.viz.narration import promise
    from specviz.viz.publication import write_figure

    model = _load(args)
    sampling = _sampling(args, model.default_sampling)
    trace = run(model, args.method, prompt, seed, sampling, _method_params(args))
    image = decode_in_order(model, trace.decodable, trace.geometry.order)
    try:
        with output_folder(out):
            image.resize((image.width * IMAGE_SCALE, image.height * IMAGE_SCALE), resample=0).save(out / "image.png")
            trace.save(out / "trace.json")
            if has_trees(trace):
                write_figure("depth-map", trace, out, DEPTH_MAP_STEM)
    except OSError as error:  # the folder was checked before the run; something changed it since
        raise UsageError(f"cannot write to {shown_path(out)}: {error.strerror or error}") from None
    lossy = "" if trace.lossless else f" ({promise(trace.method, False)})"
    tau = f" tau={per_tree(trace)['tau'].mean():.2f}" if has_trees(trace) else ""
    if trace.continuous:
        rate = draft_acceptance(trace.iterations)
        alpha = "" if rate is None else f" alpha={rate:.2f}"
        tau += f" draft_nfe={trace.draft_nfe}{alpha}"
    print(
        f"model={trace.model} method={trace.method}{lossy} nfe={trace.nfe} tokens={len(trace.tokens)}{tau} "
        f"seconds={trace.seconds:.2f} out={out}"
    )
    return 0


def command_race(args: argparse.Namespace) -> int:
    """A method against AR as the app races them, then both timed again undisturbed; a table."""
    if is_baseline(args.method):
        raise UsageError("race a method against AR, for example --method sjd (ar is the other side)")
    _check_run_inputs(args, [args.method])
    if not 0 <= args.repeats <= MAX_TIMINGS:
        raise UsageError(f"--repeats must be from 0 to {MAX_TIMINGS}")
    params = _method_params(args)  # checked against the method by _check_run_inputs
    prompt, seed = check_prompt(args.prompt), check_seed(args.seed)

    from specviz.measure.race import Race, retimed
    from specviz.metrics import clock_seconds, summary, timed_speedup, verdict_clock
    from specviz.viz.narration import latency_verdict, ratio_text

    model = _load(args)
    race = Race(model, args.method, prompt, seed, _sampling(args, model.default_sampling), params)
    while race.step() is not None:
        pass
    trace, ar = race.traces()
    rounds = list(retimed(model, [trace, ar], args.repeats))
    timed = bool(rounds) and not rounds[-1].abandoned  # an abandoned timing keeps the race's own clocks
    if timed:
        trace, ar = rounds[-1].traces
    how = (
        f"median of {args.repeats} undisturbed runs of each, in turns"
        if timed
        else ("the race's own clocks" if args.repeats == 0 else "the race's own clocks (a repeat changed its tokens)")
    )
    clock = verdict_clock(trace, ar)  # the seconds its verdict compares: compute time where both kept it
    on = "compute time (CPU seconds of each run's own work)" if clock == "compute" else "the wall clock"
    where = f"{model.name} ({model.device}), prompt {prompt!r}, seed {seed}"
    print(f"{args.method} against AR on {where}; seconds: {how}, on {on}")
    print("\n| run | NFE | tokens | step compression | seconds | spread |\n|---|---:|---:|---:|---:|---|")
    for t in (trace, ar):
        timings = t.compute_timings if clock == "compute" else t.timings
        spread = f"{min(timings):.3f}-{max(timings):.3f}" if timings else "-"
        compression = ratio_text(summary(t)["step_compression"])
        print(f"| {t.method} | {t.nfe} | {len(t.tokens)} | {compression} | {clock_seconds(t, clock):.3f} | {spread} |")
    facts = summary(trace, ar)
    print(f"\nlatency: {latency_verdict(facts['latency_speedup'], timed_speedup(trace, ar))}")
    return 0


def command_bench_mar(args: argparse.Namespace) -> int:
    from specviz.models.mar.network import RELEASES

    names = list(dict.fromkeys(name.strip() for name in args.models.split(",") if name.strip()))
    unknown = [brief(name) for name in names if name not in RELEASES]
    if unknown or not names:
        raise UsageError(f"--models takes MAR sizes from {', '.join(RELEASES)}, not {', '.join(unknown) or 'nothing'}")
    rows = sorted(set(_numbers(args.gammas, integer, "--gammas")) | {1})
    if not all(1 <= count <= 64 for count in rows):
        raise UsageError("--gammas must be from 1 to 64")
    if not 1 <= args.repeats <= 100:
        raise UsageError("--repeats must be from 1 to 100")
    device = check_device(args.device)

    from specviz.models.mar.cost import cost_table, measure

    configure_threads()
    print(cost_table({name: measure(name, device, rows, args.repeats) for name in names}, device))
    return 0


def command_pass_cost(args: argparse.Namespace) -> int:
    sizes = tuple(_numbers(args.sizes, integer, "--sizes"))
    if not all(1 <= size <= 256 for size in sizes):
        raise UsageError("--sizes must be from 1 to 256")
    if not 1 <= args.repeats <= 100:
        raise UsageError("--repeats must be from 1 to 100")
    check_device(args.device)
    prompt = check_prompt(args.prompt)

    from specviz.measure.cost import cost_sentence, doubts, pass_costs

    model = _load(args)
    costs = pass_costs(model, prompt, sizes, args.repeats)
    print(f"{args.model} on {args.device}: one forward over n tokens after the prompt (ms, median of {args.repeats})")
    print("\n| tokens | ms | over one token |\n|---:|---:|---:|")
    for cost in costs:
        print(f"| {cost.tokens} | {cost.ms:.2f} | {cost.ratio:.2f} |")
    print(f"\n{cost_sentence(costs)}")
    found = doubts(costs)
    if found:
        print(
            f"\nwarning: these timings cannot be right: {'; '.join(found)}. Another process probably took the "
            "cores during the measurement; run it again on a quiet machine, or with more --repeats."
        )
    return 0


def _bench_to_folder(args: argparse.Namespace, methods: list[str], chosen: list, launch) -> int:
    """`bench --out DIR`: this rank's share of the jobs, each written as it ends (specviz.measure.sharded)."""
    from specviz.measure.sharded import (
        Folder,
        check_rendezvous,
        gather_summaries,
        join_group,
        rank_device,
        run_share,
        units,
    )

    out = check_output_folder(args.out, ("run.json",))
    check_rendezvous(launch, os.environ)
    device = rank_device(args.device, launch)
    check_device(device)
    params = {name: _method_params(args, name) for name in methods}
    folder = Folder(out)
    ordered = [BASELINE, *[m for m in methods if not is_baseline(m)]]
    all_units = units(chosen, list(range(args.seeds)), methods)
    folder.check(ordered, [job for unit in all_units[launch.rank :: launch.world] for job in unit])  # before any work
    configure_threads(processes=launch.local_world)
    model = load_model(args.model, args.weights, device, args.draft, fast_path=args.fast_path)
    sampling = _sampling(args, model.default_sampling)
    settings = {
        "model": args.model,
        "weights": args.weights,
        "methods": ordered,
        "params": {name: value for name, value in params.items() if value},
        "prompts": {"name": args.prompts or "examples", "category": args.category, "limit": args.limit,
                    "count": len(chosen)},
        "seeds": list(range(args.seeds)),
        "sampling": sampling.to_dict(),
    }  # fmt: skip
    folder.claim_settings(settings)
    grouped = join_group(launch, device)
    summary = run_share(model, all_units, launch, sampling, params, folder)
    summaries = gather_summaries(summary, grouped)
    print(summary.line(), flush=True)
    if launch.rank == 0:
        from specviz.measure.bench_report import load, markdown

        print(f"\nall {launch.world} ranks done: " + "; ".join(f"{s.done} new, {s.failed} failed" for s in summaries))
        print(markdown(*load(out)))
        print(f"figures and per-category tables: python -m specviz bench-report {shown_path(out)}")
    return 0


def command_bench_report(args: argparse.Namespace) -> int:
    """The folder is untrusted input: every file is read bounded and checked, and the report is written inside it,
    never through a link (specviz.measure.bench_report, specviz.core.inputs)."""
    from specviz.viz.publication import FigureOptionError, parse_formats

    try:
        formats = parse_formats(args.format)
    except FigureOptionError as error:
        raise UsageError(f"--format: {error}") from None
    root = Path(args.folder)
    if not root.is_dir():
        raise UsageError(f"{shown_path(root)} is not a folder")
    check_output_folder(root)
    from specviz.measure.bench_report import bench_report, report_files

    for name in report_files(formats):  # before any work: no link where a folder belongs, no folder at a file's name
        check_file_inside(root, name)
    clip = None if args.clip is None else Path(args.clip)
    if clip is not None and not clip.is_dir():
        raise UsageError(f"--clip takes a folder holding a CLIP model; {shown_path(clip)} is not a folder")
    if clip is not None:
        from specviz.measure.quality import check_clip_folder

        check_clip_folder(clip)
    page, written, text = bench_report(root, formats, clip)
    print(text)
    print(f"wrote {shown_path(page)}, report.json and {len(written)} figure files in {shown_path(page.parent)}")
    return 0


def command_gpu_report(args: argparse.Namespace) -> int:
    device = args.device or ("cuda" if _cuda_available() else "cpu")
    check_device(device)
    out = check_output_folder(args.out, ("report.md", "report.json"))
    if args.minutes is not None and not 0 < args.minutes <= 600:
        raise UsageError("--minutes must be above 0 and at most 600")
    from specviz.measure.gpu_report import SECTIONS, gpu_report

    only = None if args.only is None else [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(only or ()) - set(SECTIONS))
    if only is not None and (unknown or not only):
        raise UsageError(f"--only takes sections from {', '.join(SECTIONS)}, not {', '.join(unknown) or 'nothing'}")
    if args.prompts is not None and args.prompts < 1:
        raise UsageError("--prompts must be at least 1")
    configure_threads()
    budget = None if args.minutes is None else args.minutes * 60
    with output_folder(out):
        report = gpu_report(device, out, budget_s=budget, only=only, prompts=args.prompts)
    print((out / "report.md").read_text())
    print(f"wrote {shown_path(out / 'report.md')} and report.json in {sum(report['seconds'].values()):.0f} s")
    return 0


def command_prompt_vectors(args: argparse.Namespace) -> int:
    out = check_output_file(args.out)
    from specviz.measure.prompt_sets import load_prompt_set
    from specviz.models.tiny.text import write_prompt_vectors

    prompts = [check_prompt(prompt.text) for prompt in load_prompt_set(args.prompts, args.limit)]
    prompts += [check_prompt(prompt) for prompt in args.prompt or ()]
    with output_folder(out.parent):  # missing folders created, as for every --out; removed if the writing fails
        write_prompt_vectors(prompts, out)
    print(f"wrote the vectors of {len(set(prompts))} prompts to {shown_path(out)}; read them with "
          f"SPECVIZ_PROMPT_VECTORS={shown_path(out)} where the text encoder is not installed")  # fmt: skip
    return 0


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def command_models(args: argparse.Namespace) -> int:
    width = max(len(name) for name in MODELS)
    for entry in MODELS.values():
        reason = entry.offline()
        status = "available offline" if reason is None else f"not available offline: {reason}"
        print(f"{entry.name:{width}s} {status}\n{'':{width}s} {entry.description}")
    return 0


def _methods(text: str) -> list[str]:
    methods = list(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))  # each once
    if not methods:
        raise UsageError("--methods names no method; for example --methods sjd,scd-mc")
    return methods


def command_bench(args: argparse.Namespace) -> int:
    methods = _methods(args.methods)
    json_path = check_output_file(args.json) if args.json else None
    _check_run_inputs(args, methods)
    if not 1 <= args.seeds <= MAX_BENCH_SEEDS:
        raise UsageError(f"--seeds must be from 1 to {MAX_BENCH_SEEDS}")
    from specviz.measure.prompt_sets import load_prompt_set

    chosen = load_prompt_set(args.prompts, args.limit, args.category)
    prompts = [check_prompt(prompt.text) for prompt in chosen]
    from specviz.measure.sharded import launch_from

    launch = launch_from(os.environ)
    if args.out is not None:
        return _bench_to_folder(args, methods, chosen, launch)
    if launch.world > 1:
        raise UsageError(f"a launch of {launch.world} processes shares its jobs through a folder: give --out DIR")

    from specviz.measure.bench import bench

    model = _load(args)
    params = {name: _method_params(args, name) for name in methods}
    sampling = _sampling(args, model.default_sampling)
    report = bench(
        model, methods, prompts, range(args.seeds), sampling, params, compare_generate=not args.skip_generate
    )
    print(report.markdown())
    if json_path is not None:
        _write_json(json_path, report.to_dict())
    return 0


def _write_json(path: Path, data: dict) -> None:
    """The results as `--json` asks (its path checked before the run); the folder made where it is missing."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2) + "\n")
    except OSError as error:  # checked before the run; something changed it since
        raise UsageError(f"cannot write {shown_path(path)}: {error.strerror or error}") from None


def command_bench_cspd(args: argparse.Namespace) -> int:
    json_path = check_output_file(args.json) if args.json else None
    gammas = list(dict.fromkeys(_numbers(args.gammas, integer, "--gammas")))
    prefills = list(dict.fromkeys(_numbers(args.prefills, number, "--prefills")))
    if len(gammas) * len(prefills) > MAX_SWEEP_SETTINGS:
        raise UsageError(
            f"--gammas and --prefills make {len(gammas) * len(prefills)} settings; at most {MAX_SWEEP_SETTINGS}"
        )
    for gamma in gammas:  # the parameter class states the ranges
        for prefill in prefills:
            method_info("cspd").resolve({"gamma": gamma, "prefill": prefill})
    if not 1 <= args.seeds <= MAX_BENCH_SEEDS:
        raise UsageError(f"--seeds must be from 1 to {MAX_BENCH_SEEDS}")
    if args.deviation and not 100 <= args.deviation <= MAX_CONTINUOUS_SAMPLES:
        raise UsageError(f"--deviation must be 0 (off) or from 100 to {MAX_CONTINUOUS_SAMPLES} samples")
    if get_entry(args.model).continuous is False:
        raise UsageError(f"bench-cspd needs a continuous-token pair; {args.model} has discrete tokens")
    _sampling(args, SamplingSettings())
    check_device(args.device)
    classes = args.prompts is None and get_entry(args.model).class_conditional  # text prompts would not parse
    prompts = list(EXAMPLE_CLASSES) if classes else [check_prompt(prompt) for prompt in read_prompts(args.prompts)]

    from specviz.measure.bench_continuous import sweep
    from specviz.measure.continuous_lossless import token_check

    model = _load(args)
    sampling = _sampling(args, model.default_sampling)
    report = sweep(model, prompts, list(range(args.seeds)), sampling, gammas, prefills)
    print(report.markdown())
    if args.deviation:
        print("\nDeviation from the target: one speculative step repeated at a fixed prefix of the pair")
        for method in ("cspd", "cspd-exact"):
            for position in DEVIATION_POSITIONS:
                print(token_check(model, method, prompts[0], position, args.deviation).summary())
    if json_path is not None:
        _write_json(json_path, report.to_dict())
    return 0


def command_check_lossless(args: argparse.Namespace) -> int:
    method = method_info(args.method)
    check_seed(args.seed)
    _check_method_parameters(args, [args.method])
    if not method.discrete:  # a method for continuous tokens: the two-sample test
        return _check_continuous(args)
    samples = LOSSLESS_SAMPLES if args.samples is None else args.samples
    if not (1 if args.greedy else 100) <= samples <= MAX_LOSSLESS_SAMPLES:
        raise UsageError(
            f"--samples must be from 100 ({LOSSLESS_SAMPLES} or more for a meaningful test) to {MAX_LOSSLESS_SAMPLES} "
            "(about 20 minutes on the slowest toy)"
        )

    from specviz.measure.lossless import check_lossless

    configure_threads()
    report = check_lossless(args.method, samples, args.seed, _method_params(args), toy=args.toy, greedy=args.greedy)
    label = "lossless" if method.is_lossless(args.greedy) else "lossy (the deviation below is what it costs)"
    print(f"{args.method}: claimed {label}")
    print(report.summary())
    return 0 if report.matches else 1


def _check_continuous(args: argparse.Namespace) -> int:
    if args.greedy:
        raise UsageError("--greedy has no meaning for continuous tokens: their heads always sample noise")
    if args.toy != DEFAULT_TOY:
        raise UsageError("--toy chooses a discrete-token toy; continuous methods are checked on their own toy pair")
    samples = CONTINUOUS_SAMPLES if args.samples is None else args.samples
    if not 100 <= samples <= MAX_CONTINUOUS_SAMPLES:
        raise UsageError(
            f"--samples must be from 100 ({CONTINUOUS_SAMPLES} or more for a meaningful test) to "
            f"{MAX_CONTINUOUS_SAMPLES} for continuous tokens (about 5 minutes)"
        )

    from specviz.measure.continuous_lossless import check_continuous

    configure_threads()
    report = check_continuous(args.method, samples, args.seed, _method_params(args))
    claimed = method_info(args.method).lossless
    label = "lossless" if claimed else "not exact (the deviation below is what it costs)"
    print(f"{args.method}: claimed {label}")
    print(report.summary())
    return 0 if report.matches or not claimed else 1


def _load_trace(path: str) -> Trace:
    """A trace file, its path in any message about it."""
    from specviz.trace import Trace, TraceError

    try:
        return Trace.load(path)
    except TraceError as error:
        message = str(error)
        raise UsageError(message if path in message else f"{shown_path(path)}: {message}") from None


def _undecodable(trace: Trace, model: ImageModel) -> str | None:
    """Why `model` cannot decode the trace's tokens, or None where it can: the checks of the app's replay
    (specviz.ui.loading.decoder_for), which shows no image for such a trace. The model's grid, vocabulary
    and layout must be the trace's, and its kind of order: a raster model's trace that claims a generation
    order is decoded only where its method decides positions in its own order, and then in that order."""
    from specviz.decoding.registry import METHODS

    entry = get_entry(trace.model)
    method = METHODS.get(trace.method)
    reorders = method is not None and method.out_of_raster and not entry.random_order
    g = trace.geometry
    m = model.geometry
    if reorders:
        m = method.decided_geometry(m, method.resolve(trace.params), g.order)
    if (g.rows, g.cols) != (m.rows, m.cols):
        return f"its grid is {g.rows}x{g.cols} and model {trace.model}'s {m.rows}x{m.cols}"
    if g.vocab_size != m.vocab_size:
        return f"its vocabulary has {g.vocab_size} tokens and model {trace.model}'s {m.vocab_size}"
    if tuple(g.layout) != tuple(m.layout):
        return f"its layout of {len(g.layout)} positions is not model {trace.model}'s ({len(m.layout)} positions)"
    if (g.order is not None) != (entry.random_order or reorders) or (reorders and tuple(g.order) != m.order):
        return f"its generation order is not one model {trace.model} decides in with {trace.method}"
    return None


def _image_decoder(traces: list[tuple[str, Trace]]) -> Callable[[Trace, list[int]], Image.Image]:
    """Decodes a trace's tokens with the trace's own model; the models load now, and each trace is checked
    against its model (as the app checks one before it shows images), before any drawing."""
    from specviz.models.protocol import decode_in_order

    configure_threads()
    names = dict.fromkeys(trace.model for _, trace in traces)  # a pair's draft is not needed to draw
    models = {name: load_model(name, None, "cpu", "none" if get_entry(name).drafts else None) for name in names}
    for path, trace in traces:
        reason = _undecodable(trace, models[trace.model])
        if reason is not None:
            raise UsageError(
                f"{shown_path(path)}: --image cannot decode this trace: {reason}; leave out --image to draw "
                "its figures without the image"
            )
    return lambda trace, tokens: decode_in_order(models[trace.model], tokens, trace.geometry.order)


def command_check_model(args: argparse.Namespace) -> int:
    """Our AR against the family's own reference on these weights; exit 1 on any mismatch."""
    get_entry(args.model)  # a registered name, before it names the default file
    grid = check_output_file(args.grid or f"check-model-{args.model}.png")
    prompt = check_prompt(args.prompt)
    seed = check_seed(args.seed)
    check_device(args.device)
    from specviz.measure.check_model import check_model, report_lines, write_grid

    model = _load(args)
    try:
        check = check_model(model, prompt, seed)
    except ValueError as error:  # a model with no reference to check against
        raise UsageError(str(error)) from None
    print("\n".join(report_lines(model, check)))
    try:
        write_grid(check.images, grid)
    except OSError as error:
        raise UsageError(f"cannot write {shown_path(grid)}: {error.strerror or error}") from None
    print(f"images: {grid}")
    return 0 if check.passed else 1


def command_figures(args: argparse.Namespace) -> int:
    from specviz.viz.publication import FigureOptionError, check_options, parse_formats, write_figures

    try:
        formats = parse_formats(args.format)
        traces = [(path, _load_trace(path)) for path in args.traces]
        check_options(traces, args.style, args.width_in, args.iteration)
    except FigureOptionError as error:
        raise UsageError(str(error)) from None
    out = check_output_folder(args.out)
    decode = _image_decoder(traces) if args.image else None
    try:
        with output_folder(out):
            made = write_figures(traces, out, formats, args.style, args.width_in, args.iteration, decode)
    except FigureOptionError as error:
        raise UsageError(str(error)) from None
    except OSError as error:
        raise UsageError(f"cannot write to {shown_path(out)}: {error.strerror or error}") from None
    for path in made.files:
        print(path)
    for note in made.notes:
        print(f"note: {note}", file=sys.stderr)
    return 0


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument gets one line (the message and where to look), not the whole usage."""

    def error(self, message: str):
        if len(message) > MAX_MESSAGE_CHARS:  # argparse quotes a bad value whole
            message = f"{message[:MAX_MESSAGE_CHARS]}... ({len(message)} characters)"
        self.exit(2, f"error: {self.prog.removeprefix('python -m ')}: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    invoked = "specviz" if Path(sys.argv[0]).name == "specviz" else "python -m specviz"  # the installed script or -m
    parser = OneLineParser(
        prog=invoked, description="Speculative and Jacobi decoding for AR image generation, made visible."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_command in (
        _run_parser,
        _race_parser,
        _bench_mar_parser,
        _pass_cost_parser,
        _gpu_report_parser,
        _bench_report_parser,
        _prompt_vectors_parser,
        _models_parser,
        _bench_parser,
        _bench_cspd_parser,
        _check_lossless_parser,
        _check_model_parser,
        _figures_parser,
    ):
        add_command(commands)
    return parser


def _seed_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=integer, default=0)


def _run_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "run", help="generate one image and save image.png and trace.json (tree methods: also depth-map.png)"
    )
    _model_arguments(parser)
    parser.add_argument("--method", default=BASELINE, help=f"one of: {', '.join(CATALOGUE)} (default {BASELINE})")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--prompt", help="what to draw, e.g. 'red apple'")
    what.add_argument(
        "--class", dest="class_label", help="ImageNet class of a class-conditional model: index or name, e.g. 207"
    )
    _seed_argument(parser)
    parser.add_argument("--out", required=True, help="output folder (created if missing)")
    _method_arguments(parser)
    _sampling_arguments(parser)
    parser.set_defaults(handler=command_run)


def _race_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "race",
        help="race a method against AR as the app does, then time both again undisturbed: NFE, step compression "
        "and the latency speedup with its spread",
    )
    _model_arguments(parser)
    parser.add_argument("--method", default="sjd", help="the method to race against AR (default sjd)")
    parser.add_argument("--prompt", default="red apple", help="what to draw (a class for a class model)")
    _seed_argument(parser)
    parser.add_argument(
        "--repeats",
        type=integer,
        default=TIMINGS,
        help=f"undisturbed repeats of each run (default {TIMINGS}; 0: none)",
    )
    _method_arguments(parser)
    _sampling_arguments(parser)
    parser.set_defaults(handler=command_race)


def _bench_mar_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "bench-mar",
        help="time MAR's backbone pass over gamma rows and its diffusion head at the release's shapes (random "
        "weights, nothing to download), and the cost ratio c of each draft/target pair",
    )
    parser.add_argument("--models", default="mar-b,mar-l,mar-h", help="MAR sizes, comma-separated")
    parser.add_argument("--gammas", default="1,4,8", help="rows of a verification pass (1 is always timed)")
    parser.add_argument("--repeats", type=integer, default=3, help="timed repeats after one warm-up")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda")
    parser.set_defaults(handler=command_bench_mar)


def _pass_cost_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "pass-cost",
        help="time one model pass over n tokens against a pass over one on this device (latency speedup is "
        "step compression divided by this ratio)",
    )
    _model_arguments(parser)
    parser.add_argument("--prompt", default="red apple", help="the prompt prefilled first (a class for MAR)")
    parser.add_argument("--sizes", default="1,2,4,8,17,33", help="tokens per pass, comma-separated")
    parser.add_argument("--repeats", type=integer, default=5, help="timed repeats after one warm-up")
    parser.set_defaults(handler=command_pass_cost)


def _gpu_report_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "gpu-report",
        help="every CUDA figure in one command: host reads per pass, pass costs and every method against AR on the "
        "embedded models (reduced without CUDA); writes report.md and report.json",
    )
    parser.add_argument("--out", required=True, help="folder for report.md and report.json")
    parser.add_argument("--device", default=None, help="torch device (default: cuda where there is one)")
    parser.add_argument(
        "--minutes", type=number, help="start no section after this many minutes (those left are listed as not run)"
    )
    parser.add_argument("--only", help="comma-separated sections to run (default: all, in the report's order)")
    parser.add_argument(
        "--prompts", type=integer, help="bench only the first N of the plan's prompts (a short lease's whole report)"
    )
    parser.set_defaults(handler=command_gpu_report)


def _bench_report_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "bench-report", help="merge the results of bench --out DIR into tables and figures (DIR/report)"
    )
    parser.add_argument("folder", help="the folder bench --out wrote")
    parser.add_argument("--format", default="pdf,svg,png", help="figure formats, comma-separated (pdf,svg,png)")
    parser.add_argument(
        "--clip", help="a local folder holding a CLIP model (transformers' CLIPModel and CLIPProcessor): CLIP scores"
    )
    parser.set_defaults(handler=command_bench_report)


def _prompt_vectors_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "prompt-vectors",
        help="write the embedded models' prompt vectors to a file, for a machine without the text encoder "
        "(run there with SPECVIZ_PROMPT_VECTORS=FILE)",
    )
    parser.add_argument("--out", required=True, help="the .safetensors file to write")
    parser.add_argument(
        "--prompts", help="a shipped set (parti, coco, ...) or a text file (default: the shipped examples)"
    )
    parser.add_argument("--limit", type=integer, help="only the first N prompts of the set")
    parser.add_argument("--prompt", action="append", help="one more prompt (repeatable)")
    parser.set_defaults(handler=command_prompt_vectors)


def _models_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("models", help="list registered models and which run offline")
    parser.set_defaults(handler=command_models)


def _bench_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "bench", help="time methods against AR, and our AR loop against transformers' generate()"
    )
    _model_arguments(parser)
    parser.add_argument("--methods", default=BASELINE, help=f"comma-separated methods (default {BASELINE})")
    parser.add_argument(
        "--prompts",
        help="parti (PartiPrompts, 1,632), coco (COCO-2017 val captions, 5,000), geneval (553), dpg (DPG-Bench, "
        "1,065), imagenet (1,000 classes), or a text file with one prompt per line (default: the shipped examples)",
    )
    parser.add_argument("--limit", type=integer, help="only the first N prompts (after --category)")
    parser.add_argument(
        "--category", help="only the prompts of this category (Parti's category, GenEval's tag, DPG-Bench's source)"
    )
    parser.add_argument("--seeds", type=integer, default=2, help="seeds 0..K-1 per prompt (default 2)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument(
        "--out",
        help="keep every job's result, trace and image in this folder as it ends: resumable, and shared by the ranks "
        "of torchrun, accelerate launch or srun (then merge with bench-report)",
    )
    parser.add_argument(
        "--skip-generate", action="store_true", help="skip timing our AR loop against transformers' generate()"
    )
    _method_arguments(parser)
    _sampling_arguments(parser)
    parser.set_defaults(handler=command_bench)


def _bench_cspd_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "bench-cspd",
        help="CSpD sweep on a continuous pair: alpha, passes and latency of cspd and cspd-exact by gamma and pre-fill",
    )
    _model_arguments(parser)
    parser.set_defaults(model="tiny-continuous")
    parser.add_argument("--gammas", default="4,8,16,32", help="draft lengths (default 4,8,16,32)")
    parser.add_argument("--prefills", default="0,0.05,0.15", help="pre-filled shares (default 0,0.05,0.15)")
    parser.add_argument("--prompts", help="text file, one prompt per line (default: the shipped set)")
    parser.add_argument("--seeds", type=integer, default=1, help="seeds 0..K-1 per prompt (default 1)")
    parser.add_argument(
        "--deviation", type=integer, default=0, metavar="SAMPLES",
        help="also test one speculative step of cspd and cspd-exact against the target's own draws at three "
        f"positions of the first prompt, with this many samples each (100 to {MAX_CONTINUOUS_SAMPLES}; 2000: "
        "about a minute per position)",
    )  # fmt: skip
    parser.add_argument("--json", help="also write the results to this JSON file")
    _sampling_arguments(parser)
    parser.set_defaults(handler=command_bench_cspd)


def _check_lossless_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "check-lossless",
        help="compare a method's samples with exact AR probabilities on an enumerable toy model",
        description="Samples many images from a toy model whose AR distribution is known exactly and "
        "runs a chi-square test; exits 1 when the method's distribution does not match. Methods for continuous "
        "tokens (cspd, cspd-exact, ar-draft) are tested against the target's own AR samples on a continuous toy "
        "pair with an energy-distance permutation test; a method claimed exact exits 1 when it differs.",
    )
    parser.add_argument("--method", required=True, help=f"one of: {', '.join(CATALOGUE)}")
    parser.add_argument(
        "--samples",
        type=integer,
        help=f"sampled images (default {LOSSLESS_SAMPLES}, at most {MAX_LOSSLESS_SAMPLES}; {CONTINUOUS_SAMPLES} for "
        f"continuous tokens, at most {MAX_CONTINUOUS_SAMPLES})",
    )
    _seed_argument(parser)
    parser.add_argument(
        "--toy",
        choices=list(TOY_DESCRIPTIONS),
        default=DEFAULT_TOY,
        help="; ".join(f"{name}: {text}" for name, text in TOY_DESCRIPTIONS.items()) + f" (default {DEFAULT_TOY})",
    )
    parser.add_argument(
        "--greedy", action="store_true", help="temperature 0: one outcome, which every sample must equal"
    )
    _method_arguments(parser)
    parser.set_defaults(handler=command_check_lossless)


def _figures_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "figures",
        help="publication figures (PDF, SVG, PNG) from one or more trace.json files",
        description="Writes one file per figure and format: "
        + "; ".join(kind.title for kind in FIGURE_KINDS)
        + ". Figures that need records a trace lacks are skipped with a note. No model is loaded unless --image.",
    )
    parser.add_argument("traces", nargs="+", metavar="TRACE", help="trace.json files, e.g. a method and AR")
    parser.add_argument("--out", required=True, help="output folder (created if missing)")
    _figure_look_arguments(parser)
    parser.add_argument(
        "--iteration", type=integer, help="iteration the window figure shows (default: the one showing most fates)"
    )
    parser.add_argument(
        "--image",
        action="store_true",
        help="add the image after that iteration, decoded by the trace's model (refused for a trace whose grid, "
        "vocabulary or layout is not its model's)",
    )
    parser.set_defaults(handler=command_figures)


def _check_model_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "check-model",
        help="run this first on new weights: our AR, greedy and sampled, against the family's own reference "
        "(uncached full passes; transformers' generate() where the family has one); exit 1 on any mismatch",
    )
    _model_arguments(parser)
    parser.add_argument("--prompt", default="a red apple", help="what to draw (a class for a class model)")
    _seed_argument(parser)
    parser.add_argument("--grid", help="where to write the images (default check-model-MODEL.png)")
    parser.set_defaults(handler=command_check_model)


def _figure_look_arguments(parser: argparse.ArgumentParser) -> None:
    """The figures' file formats, style and width."""
    parser.add_argument("--format", default="pdf", help=f"comma-separated, from {', '.join(FORMATS)} (default pdf)")
    parser.add_argument(
        "--style",
        default="paper",
        help=f"one of {', '.join(STYLES)}: paper has no titles and 8 pt text; slides and dark are for a projector "
        "(default paper)",
    )
    low, high = WIDTH_RANGE_IN
    parser.add_argument(
        "--width-in",
        type=number,
        help=f"figure width in inches, {low} to {high} (default "
        + ", ".join(f"{style.width_in} for {name}" for name, style in STYLES.items())
        + ")",
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        choose_threads()  # a bad SPECVIZ_THREADS is refused before any work; commands apply it when torch starts
        return args.handler(args)
    except (UsageError, *REQUEST_ERRORS) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except ModelUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        return 130
    except (MemoryError, RuntimeError) as error:  # torch.OutOfMemoryError is a RuntimeError, on the CPU too
        if not isinstance(error, MemoryError) and type(error).__name__ != "OutOfMemoryError":
            raise
        print(
            "error: out of memory: choose smaller settings (a smaller tree, window or model), or set "
            "SPECVIZ_RUN_MEMORY_MB to what this machine can spare so that such settings are refused before the run",
            file=sys.stderr,
        )
        return 2
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
