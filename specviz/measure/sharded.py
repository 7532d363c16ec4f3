"""`bench --out DIR`: a benchmark at the papers' scale, sharded over processes by an existing launcher.

The jobs are (prompt, seed, method). They are grouped into units of one prompt and seed, each unit run
whole by one rank, AR first, so every method's latency is a ratio against AR's run of the same prompt
and seed on the same device, made just before it. A rank takes every `world`-th unit, its device from
the launcher's local rank. `torchrun`, `accelerate launch` and SLURM's `srun` set the variables read here
(`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`; `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`,
`SLURM_NTASKS_PER_NODE`); with more than one rank the ranks join a torch.distributed process group (gloo
on CPUs, NCCL on GPUs, met at `MASTER_ADDR:MASTER_PORT`) to wait for each other at the end, so that rank 0
reports on every rank's work.

Each finished job writes its trace, its image and then its result (the metrics), each to a temporary
name moved into place, under `DIR/jobs/METHOD/`: a result there means the job is done, and a restarted
run skips it. A job that raises is recorded beside it as `STEM.error.json` and the run goes on; a
restart tries it again. `DIR/run.json` holds the run's settings: a second run on the same folder with
other settings is refused rather than mixed in. `python -m specviz bench-report DIR` merges the results.

The folder is read as untrusted input (specviz.measure.bench_report's loaders): before any work, run.json and the
result of every job of this rank already there are read bounded and checked, and every file is reached and
written inside the folder without following a symbolic link (specviz.core.inputs.write_inside).
"""

from __future__ import annotations

import json
import stat
import time
import traceback
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from specviz.core.inputs import (
    FolderError,
    InputError,
    entry_inside,
    list_inside,
    remove_inside,
    shown_path,
    write_inside,
)
from specviz.core.settings import SamplingSettings
from specviz.decoding import run
from specviz.measure.bench import job_metrics
from specviz.measure.bench_report import read_result, read_settings
from specviz.measure.prompt_sets import BenchPrompt
from specviz.models.protocol import ImageModel, decode_in_order

IMAGE_SCALE = 4  # images kept at 4x their grid's size, for a look or a quality scorer
MAX_ERROR_CHARS = 4000  # of a failed job's error and traceback, as its record keeps them
SUBFOLDERS = ("jobs", "traces", "images")  # each holds one folder per method


class FolderInUse(InputError):
    """The output folder holds a run with other settings."""


@dataclass(frozen=True)
class Launch:
    """Where this process sits in a launch: its rank among `world` ranks and its index on its node."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_world: int = 1

    @property
    def name(self) -> str:
        return f"rank {self.rank}/{self.world}"


def launch_from(environ: Mapping[str, str]) -> Launch:
    """The launcher's variables: torchrun's and accelerate's (RANK ...), else SLURM's, else one process."""

    def number(*names: str, default: int) -> int:
        for name in names:
            value = environ.get(name, "").strip()
            if value:
                if not value.isascii() or not value.isdigit():
                    raise InputError(f"{name} must be a whole number, got {value[:40]!r}")
                return int(value)
        return default

    world = number("WORLD_SIZE", "SLURM_NTASKS", default=1)
    rank = number("RANK", "SLURM_PROCID", default=0)
    local_world = number("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE", default=world)
    local_rank = number("LOCAL_RANK", "SLURM_LOCALID", default=rank % max(local_world, 1))
    if not 0 <= rank < world or not 0 <= local_rank < max(local_world, 1):
        raise InputError(f"rank {rank} of {world} (local {local_rank} of {local_world}) is not a valid launch")
    return Launch(rank, world, local_rank, local_world)


def check_rendezvous(launch: Launch, environ: Mapping[str, str]) -> None:
    """More than one rank meets at MASTER_ADDR:MASTER_PORT (torch's env:// rendezvous), checked before any work."""
    if launch.world == 1:
        return
    address, port = environ.get("MASTER_ADDR", "").strip(), environ.get("MASTER_PORT", "").strip()
    launched = f"a launch of {launch.world} processes (WORLD_SIZE or SLURM_NTASKS)"
    if not address or not port:
        missing = [name for name, value in (("MASTER_ADDR", address), ("MASTER_PORT", port)) if not value]
        raise InputError(
            f"{launched} meets at MASTER_ADDR:MASTER_PORT, and {' and '.join(missing)} "
            f"{'are' if len(missing) > 1 else 'is'} not set: start it with torchrun or accelerate launch, or export "
            "both under srun"
        )
    if not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise InputError(f"MASTER_PORT must be a port number from 1 to 65535, got {port[:40]!r}")


def rank_device(device: str, launch: Launch) -> str:
    """One device per rank: `cuda` becomes the local rank's GPU; anything else is kept."""
    return f"cuda:{launch.local_rank}" if device == "cuda" and launch.local_world > 1 else device


@dataclass(frozen=True)
class Job:
    index: int  # the prompt's place in its set, after --category and --limit
    prompt: str
    category: str
    seed: int
    method: str

    @property
    def stem(self) -> str:
        return f"{self.index:05d}-s{self.seed}"


def units(prompts: list[BenchPrompt], seeds: list[int], methods: list[str]) -> list[list[Job]]:
    """The jobs in units of one prompt and seed, AR first in each."""
    ordered = ["ar", *[method for method in methods if method != "ar"]]
    return [
        [Job(index, prompt.text, prompt.category, seed, method) for method in ordered]
        for index, prompt in enumerate(prompts)
        for seed in seeds
    ]


class Folder:
    """The run's folder: settings, results, errors, traces and images, each file written whole, inside the
    folder (never through a link); every file read from it is checked first (specviz.measure.bench_report)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._results: dict[str, dict] = {}  # the results read or written so far, by name

    @staticmethod
    def _name(kind: str, job: Job, suffix: str) -> str:
        return f"{kind}/{job.method}/{job.stem}{suffix}"

    def result(self, job: Job) -> Path:
        return self.root / self._name("jobs", job, ".json")

    def error(self, job: Job) -> Path:
        return self.root / self._name("jobs", job, ".error.json")

    def trace(self, job: Job) -> Path:
        return self.root / self._name("traces", job, ".json")

    def image(self, job: Job) -> Path:
        return self.root / self._name("images", job, ".png")

    def finished(self, job: Job) -> dict | None:
        """The job's result where it is done (checked: a bad file there is refused, not run over), else None."""
        name = self._name("jobs", job, ".json")
        if name not in self._results:
            if entry_inside(self.root, name) is None:
                return None
            result = read_result(self.root, name)
            if result["job"] != asdict(job):
                raise FolderError(
                    f"result {self.result(job)} holds another job than this run's: its prompt or category differs "
                    "(was the prompt file changed?); give another --out"
                )
            self._results[name] = result
        return self._results[name]

    def done(self, job: Job) -> bool:
        return self.finished(job) is not None

    def check(self, methods: list[str], jobs: list[Job]) -> list[Job]:
        """Before any work: the folders a job writes into are real folders (or missing), run.json and the results of
        `jobs` already there are readable and valid; the jobs done."""
        for kind in SUBFOLDERS:
            for method in methods:
                for name, info in list_inside(self.root, f"{kind}/{method}"):  # refuses a link or a file there
                    if stat.S_ISDIR(info.st_mode):  # where a job's file would be written
                        where = shown_path(self.root / kind / method / name)
                        raise FolderError(f"{where} is a folder; {kind}/{method} holds files")
        if entry_inside(self.root, "run.json") is not None:
            read_settings(self.root)
        return [job for job in jobs if self.done(job)]

    def claim_settings(self, settings: dict) -> None:
        """Write run.json, or check that the one there holds these settings (a restart, another rank)."""
        self.root.mkdir(parents=True, exist_ok=True)
        text = json.dumps(settings, indent=1, sort_keys=True)
        if not write_inside(self.root, "run.json", text.encode(), exclusive=True):  # exactly one process creates it
            held = read_settings(self.root)
            if held != json.loads(text):
                differ = sorted(key for key in settings.keys() | held.keys() if held.get(key) != settings.get(key))
                raise FolderInUse(
                    f"{self.root} holds a run with other settings ({', '.join(differ)} differ); give another --out, "
                    "or the same settings to resume it"
                )

    def write(self, path: Path, data: bytes) -> None:
        write_inside(self.root, path.relative_to(self.root), data)

    def keep_result(self, job: Job, result: dict) -> None:
        """Write a finished job's result, the last of its files."""
        name = self._name("jobs", job, ".json")
        write_inside(self.root, name, json.dumps(result, indent=1).encode())
        self._results[name] = result
        remove_inside(self.root, self._name("jobs", job, ".error.json"))


@dataclass
class RankSummary:
    rank: int
    world: int
    device: str
    done: int = 0
    resumed: int = 0
    failed: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        return (
            f"rank {self.rank}/{self.world} on {self.device}: {self.done} jobs done, {self.resumed} already done "
            f"before (resumed), {self.failed} failed, in {self.seconds:.0f} s"
        )


def run_job(model: ImageModel, job: Job, sampling: SamplingSettings, params: dict | None, folder: Folder,
            ar_seconds: float | None) -> None:  # fmt: skip
    """One job: its trace, image and result written under the folder, the result last."""
    trace = run(model, job.method, job.prompt, job.seed, sampling, params)
    image = decode_in_order(model, trace.decodable, trace.geometry.order)
    image = image.resize((image.width * IMAGE_SCALE, image.height * IMAGE_SCALE), resample=0)
    folder.write(folder.trace(job), trace.to_json().encode())
    from io import BytesIO

    png = BytesIO()
    image.save(png, format="PNG")
    folder.write(folder.image(job), png.getvalue())
    metrics = job_metrics(model, trace, sampling)
    if ar_seconds is not None:
        metrics["ar_seconds"] = ar_seconds
        metrics["latency_speedup"] = ar_seconds / trace.seconds
    result = {
        "job": asdict(job),
        "metrics": metrics,
        "trace": folder.trace(job).relative_to(folder.root).as_posix(),
        "image": folder.image(job).relative_to(folder.root).as_posix(),
        "device": str(model.device),
    }
    folder.keep_result(job, result)


def run_share(
    model: ImageModel,
    all_units: list[list[Job]],
    launch: Launch,
    sampling: SamplingSettings,
    params: dict[str, dict],
    folder: Folder,
    progress: bool = True,
) -> RankSummary:
    """This rank's units, AR first in each; what is done is skipped, what fails is recorded."""
    from tqdm import tqdm

    mine = all_units[launch.rank :: launch.world]
    summary = RankSummary(launch.rank, launch.world, str(model.device))
    started = time.perf_counter()
    todo = [job for unit in mine for job in unit if not folder.done(job)]  # each result checked (Folder.check)
    summary.resumed = sum(len(unit) for unit in mine) - len(todo)
    if todo:  # warm-up, untimed: lazy imports, the allocator, the prompt encoder
        for method in dict.fromkeys(job.method for job in todo):
            try:
                run(model, method, todo[0].prompt, todo[0].seed, sampling, params.get(method))
            except Exception:  # it fails again in its own jobs, which record why and go on
                continue
    bar = tqdm(total=len(todo), desc=launch.name, position=launch.rank, disable=not progress, leave=True)
    with bar:
        for unit in mine:
            ar_seconds = _ar_seconds(folder, unit[0])
            for job in unit:
                if folder.done(job):
                    continue
                try:
                    run_job(model, job, sampling, params.get(job.method), folder, ar_seconds)
                    summary.done += 1
                except FolderError:  # the folder itself is unsafe to write into: no job can be kept
                    raise
                except Exception as error:  # recorded; the run goes on with the next job
                    summary.failed += 1
                    failure = {"job": asdict(job), "error": f"{type(error).__name__}: {error}"[:MAX_ERROR_CHARS],
                               "traceback": traceback.format_exc()[-MAX_ERROR_CHARS:]}  # fmt: skip
                    folder.write(folder.error(job), json.dumps(failure, indent=1).encode())
                if job.method == "ar":
                    ar_seconds = _ar_seconds(folder, job)
                bar.update(1)
    summary.seconds = time.perf_counter() - started
    return summary


def _ar_seconds(folder: Folder, ar_job: Job) -> float | None:
    """The seconds of AR's run of this unit, where it is done (its result checked: a finite duration, at least 0)."""
    result = folder.finished(ar_job)
    return None if result is None else result["metrics"]["seconds"]


def join_group(launch: Launch, device: str) -> bool:
    """Join the launch's process group (more than one rank): gloo on CPUs, NCCL on GPUs."""
    import torch.distributed as dist

    if launch.world == 1 or dist.is_initialized():
        return launch.world > 1
    backend = "nccl" if device.startswith("cuda") else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(torch.device(device))
    try:
        dist.init_process_group(backend=backend, rank=launch.rank, world_size=launch.world)
    except (RuntimeError, ValueError) as error:  # the rendezvous failed: an address no rank listens on, a timeout
        message = " ".join(str(error).split())[:300]
        raise InputError(f"{launch.name} cannot join the launch's process group ({backend}): {message}") from None
    return True


def gather_summaries(summary: RankSummary, grouped: bool) -> list[RankSummary]:
    """Every rank's summary on every rank, once all are done (one rank: its own)."""
    if not grouped:
        return [summary]
    import torch.distributed as dist

    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, asdict(summary))
    dist.destroy_process_group()
    return [RankSummary(**entry) for entry in gathered]
