"""`bench --out DIR`: a benchmark at the papers' scale, sharded over processes by an existing launcher.

The jobs are (prompt, seed, method). They are grouped into units of one prompt and seed, each unit run
whole by one rank, AR first, so every method's latency is a ratio against AR's run of the same prompt
and seed on the same device, made just before it. A rank takes every `world`-th unit, its device from
the launcher's local rank. `torchrun`, `accelerate launch` and SLURM's `srun` set the variables read here
(`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`; `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`,
`SLURM_NTASKS_PER_NODE`); with more than one rank the ranks join a torch.distributed process group (gloo
on CPUs, NCCL on GPUs) to wait for each other at the end, so that rank 0 reports on every rank's work.

Each finished job writes its trace, its image and then its result (the metrics), each to a temporary
name moved into place, under `DIR/jobs/METHOD/`: a result there means the job is done, and a restarted
run skips it. A job that raises is recorded beside it as `STEM.error.json` and the run goes on; a
restart tries it again. `DIR/run.json` holds the run's settings: a second run on the same folder with
other settings is refused rather than mixed in. `python -m specviz bench-report DIR` merges the results.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from specviz.bench import job_metrics
from specviz.decoding import run
from specviz.inputs import InputError
from specviz.models.protocol import ImageModel, decode_in_order
from specviz.models.settings import SamplingSettings
from specviz.prompt_sets import BenchPrompt

IMAGE_SCALE = 4  # images kept at 4x their grid's size, for a look or a quality scorer


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
    """The run's folder: settings, results, errors, traces and images, each file written whole."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def result(self, job: Job) -> Path:
        return self.root / "jobs" / job.method / f"{job.stem}.json"

    def error(self, job: Job) -> Path:
        return self.root / "jobs" / job.method / f"{job.stem}.error.json"

    def trace(self, job: Job) -> Path:
        return self.root / "traces" / job.method / f"{job.stem}.json"

    def image(self, job: Job) -> Path:
        return self.root / "images" / job.method / f"{job.stem}.png"

    def done(self, job: Job) -> bool:
        return self.result(job).is_file()

    def claim_settings(self, settings: dict) -> None:
        """Write run.json, or check that the one there holds these settings (a restart, another rank)."""
        path = self.root / "run.json"
        self.root.mkdir(parents=True, exist_ok=True)
        text = json.dumps(settings, indent=1, sort_keys=True)
        partial = self.root / f".run.json.{os.getpid()}"
        partial.write_text(text)
        try:
            os.link(partial, path)  # atomic: exactly one process creates it
        except FileExistsError:
            held = json.loads(path.read_text())
            if held != json.loads(text):
                differ = sorted(key for key in settings.keys() | held.keys() if held.get(key) != settings.get(key))
                raise FolderInUse(
                    f"{self.root} holds a run with other settings ({', '.join(differ)} differ); give another --out, "
                    "or the same settings to resume it"
                ) from None
        finally:
            partial.unlink(missing_ok=True)

    def write(self, path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
        partial.write_bytes(data)
        partial.replace(path)


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
        "trace": str(folder.trace(job).relative_to(folder.root)),
        "image": str(folder.image(job).relative_to(folder.root)),
        "device": str(model.device),
    }
    folder.write(folder.result(job), json.dumps(result, indent=1).encode())
    folder.error(job).unlink(missing_ok=True)


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
    todo = [job for unit in mine for job in unit if not folder.done(job)]
    summary.resumed = sum(len(unit) for unit in mine) - len(todo)
    if todo:  # warm-up, untimed: lazy imports, the allocator, the prompt encoder
        for method in dict.fromkeys(job.method for job in todo):
            run(model, method, todo[0].prompt, todo[0].seed, sampling, params.get(method))
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
                except Exception as error:  # recorded; the run goes on with the next job
                    summary.failed += 1
                    failure = {"job": asdict(job), "error": f"{type(error).__name__}: {error}",
                               "traceback": traceback.format_exc()[-4000:]}  # fmt: skip
                    folder.write(folder.error(job), json.dumps(failure, indent=1).encode())
                if job.method == "ar":
                    ar_seconds = _ar_seconds(folder, job)
                bar.update(1)
    summary.seconds = time.perf_counter() - started
    return summary


def _ar_seconds(folder: Folder, ar_job: Job) -> float | None:
    """The seconds of AR's run of this unit, where it is done."""
    path = folder.result(ar_job)
    return json.loads(path.read_text())["metrics"]["seconds"] if path.is_file() else None


def join_group(launch: Launch, device: str) -> bool:
    """Join the launch's process group (more than one rank): gloo on CPUs, NCCL on GPUs."""
    import torch.distributed as dist

    if launch.world == 1 or dist.is_initialized():
        return launch.world > 1
    backend = "nccl" if device.startswith("cuda") else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(torch.device(device))
    dist.init_process_group(backend=backend, rank=launch.rank, world_size=launch.world)
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
