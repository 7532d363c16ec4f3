"""A results folder (`bench --out DIR`, read again on resume, and `bench-report DIR`) is untrusted input.

Each case plants one bad thing in a valid folder (written by hand as a bench writes it, so no model runs) and
drives the command line in-process: malformed, empty or mistyped JSON, a list for an object, a folder for a
file, a file for a folder, a pipe and a link to an endless device, nonsense values, links that would carry a
write out of the folder. Each must get one clean line, exit status 2 and no traceback, promptly, and nothing
outside the folder may change.
"""

import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from specviz.cli import main
from specviz.core.inputs import FolderError
from specviz.measure.bench_report import load
from specviz.measure.sharded import Folder, units

PROMPT = "red apple"
METHODS = ["ar", "sjd"]
RESULT = "jobs/ar/00000-s0.json"  # AR's result: a resume reads its seconds
SJD_RESULT = "jobs/sjd/00000-s0.json"
FAILURE = "jobs/sjd/00001-s0.error.json"
PROMPTS_LINE_LIMIT = 1000  # characters of a refusal's one line


def _metrics(method: str) -> dict:
    """A run's numbers on a 2x2 grid, as specviz.measure.bench.job_metrics writes them."""
    drafted = method != "ar"
    metrics = {
        "method": method,
        "lossless": True,
        "nfe": 2 if drafted else 4,
        "tokens": 4,
        "seconds": 0.5 if drafted else 1.0,
        "step_compression": 2.0 if drafted else 1.0,
        "draft_passes": 2 if drafted else 0,
        "accepted": 2 if drafted else 0,
        "changed": 0,
        "carried": 1 if drafted else 0,
        "longest_stall": 0,
        "stalled_passes": 0,
        "forward_ms": 12.5,
        "verify_ms": 1.5 if drafted else 0.0,
        "nll_under_ar": 1.25,
        "outside_ar": 0,
        "run_length": [2.0, 2.0, 1.0, None] if drafted else [1.0, 1.0, 1.0, 1.0],
        "grid": [2, 2],
    }
    if drafted:
        metrics.update(ar_seconds=1.0, latency_speedup=2.0)
    return metrics


def _result(method: str, index: int = 0) -> dict:
    stem = f"{index:05d}-s0"
    return {
        "job": {"index": index, "prompt": PROMPT, "category": "", "seed": 0, "method": method},
        "metrics": _metrics(method),
        "trace": f"traces/{method}/{stem}.json",
        "image": f"images/{method}/{stem}.png",
        "device": "cpu",
    }


def _settings(prompts: Path, count: int = 2) -> dict:
    return {
        "model": "tiny",
        "weights": None,
        "methods": METHODS,
        "params": {"sjd": {"window": 16}},
        "prompts": {"name": str(prompts), "category": None, "limit": None, "count": count},
        "seeds": [0],
        "sampling": {"temperature": 1.0, "top_k": None, "top_p": 1.0, "guidance_scale": 1.0},
    }


def _write(root: Path, relative: str, data: object) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=1))


@pytest.fixture
def prompts(tmp_path) -> Path:
    path = tmp_path / "prompts.txt"
    path.write_text(f"{PROMPT}\n{PROMPT}\n")
    return path


@pytest.fixture
def folder(tmp_path, prompts) -> Path:
    """A valid results folder: two prompts, one seed, AR and SJD; the second prompt's SJD job failed."""
    root = tmp_path / "run"
    _write(root, "run.json", _settings(prompts))
    _write(root, RESULT, _result("ar"))
    _write(root, SJD_RESULT, _result("sjd"))
    _write(root, "jobs/ar/00001-s0.json", _result("ar", 1))
    failure = {"job": _result("sjd", 1)["job"], "error": "RuntimeError: out of memory", "traceback": "Traceback..."}
    _write(root, FAILURE, failure)
    return root


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder beside the results folder, with a file in it, that no command may touch."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "precious.txt").write_text("keep me")
    return path


def _snapshot(path: Path) -> dict:
    return {p.relative_to(path).as_posix(): p.read_bytes() if p.is_file() else None for p in sorted(path.rglob("*"))}


def _refused(capsys, argv: list[str], expected: str) -> str:
    """The command exits 2 with one line that says `expected`, promptly (a pipe must not block it)."""
    outcome: dict = {}

    def command() -> None:
        try:
            outcome["status"] = main(argv)
        except BaseException as error:  # reported below
            outcome["raised"] = error

    worker = threading.Thread(target=command, daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), f"{argv} still runs after 60 s"
    assert "raised" not in outcome, f"{argv} raised {outcome.get('raised')!r}"
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert outcome["status"] == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    assert len(lines[0]) <= PROMPTS_LINE_LIMIT and expected in lines[0], lines[0]
    return lines[0]


def _bench(root: Path, prompts: Path, *extra: str) -> list[str]:
    return ["bench", "--methods", "ar,sjd", "--seeds", "1", "--window", "16", "--prompts", str(prompts),
            "--out", str(root), *extra]  # fmt: skip


def test_a_valid_folder_reads_and_reports(folder, prompts, capsys):
    settings, results, errors = load(folder)
    assert settings["methods"] == METHODS and len(results) == 3 and len(errors) == 1
    jobs = [job for unit in units(*_units_arguments(prompts)) for job in unit]
    assert [job.method for job in Folder(folder).check(METHODS, jobs)] == ["ar", "sjd", "ar"]
    assert main(["bench-report", str(folder), "--format", "png"]) == 0
    assert "| sjd | yes | 1 | 1 |" in capsys.readouterr().out
    assert (folder / "report" / "report.md").is_file() and (folder / "report" / "step-compression.png").is_file()


def _units_arguments(prompts: Path):
    from specviz.measure.prompt_sets import load_prompt_set

    return load_prompt_set(str(prompts)), [0], METHODS


def _metric(name: str, value: object):
    def plant(root: Path) -> None:
        result = _result("ar")
        result["metrics"][name] = value
        _write(root, RESULT, result)

    return plant


def _raw(relative: str, text: str):
    return lambda root: _write(root, relative, text)


def _folder_at(relative: str):
    def plant(root: Path) -> None:
        (root / relative).unlink()
        (root / relative).mkdir()

    return plant


def _fifo(root: Path) -> None:
    (root / RESULT).unlink()
    os.mkfifo(root / RESULT)


def _endless(root: Path) -> None:
    (root / RESULT).unlink()
    (root / RESULT).symlink_to("/dev/zero")


def _missing_seconds(root: Path) -> None:
    result = _result("ar")
    del result["metrics"]["seconds"]
    _write(root, RESULT, result)


def _metrics_a_list(root: Path) -> None:
    _write(root, RESULT, {**_result("ar"), "metrics": []})


def _jobs_folder_a_file(root: Path) -> None:
    shutil.rmtree(root / "jobs" / "sjd")
    (root / "jobs" / "sjd").write_text("not a folder")


# a planted bad file, and what its one line says; each is refused by a resume (which reads AR's result) and by
# bench-report (which reads every file)
BAD_RESULTS = {
    "malformed JSON": (_raw(RESULT, '{"job": {"index": 0,'), "not valid JSON"),
    "empty file": (_raw(RESULT, ""), "not valid JSON"),
    "a list, not an object": (_raw(RESULT, "[]"), "holds a JSON list, not an object"),
    "a number, not an object": (_raw(RESULT, "5"), "holds a JSON int, not an object"),
    "metrics a list": (_metrics_a_list, "metrics: Input should be a valid dictionary"),
    "a key missing": (_missing_seconds, "metrics.seconds: Field required"),
    "an unknown key": (_metric("evil", 1), "metrics.evil: Extra inputs are not permitted"),
    "a folder where the result belongs": (_folder_at(RESULT), "00000-s0.json is a folder"),
    "jobs/sjd a file": (_jobs_folder_a_file, "jobs/sjd is a file, where a folder belongs"),
    "a named pipe": (_fifo, "is a named pipe, not a regular file"),
    "a link to /dev/zero": (_endless, "is a symbolic link"),
    "AR seconds -5": (_metric("seconds", -5), "metrics.seconds: Input should be greater than or equal to 0, got -5"),
    "step compression 'nanx'": (_metric("step_compression", "nanx"), "Input should be a valid number, got 'nanx'"),
    "NFE -5": (_metric("nfe", -5), "metrics.nfe: Input should be greater than or equal to 1, got -5"),
    "NaN": (_raw(RESULT, json.dumps(_result("ar")).replace('"seconds": 1.0', '"seconds": NaN')), "NaN is not a finite"),
    "Infinity": (_raw(RESULT, json.dumps(_result("ar")).replace("1.25", "1e999")), "'1e999' is not a finite number"),
    "a count as text": (_metric("nfe", "4"), "metrics.nfe: Input should be a valid integer, got '4'"),
    "a count as true": (_metric("outside_ar", True), "metrics.outside_ar: Input should be a valid integer"),
    "a grid its map does not fill": (_metric("grid", [3, 3]), "run_length has 4 cells; the grid 3x3 has 9"),
    "an image outside the folder": (
        _raw(RESULT, json.dumps({**_result("ar"), "image": "../../outside/precious.txt"})),
        "is not the job's own, images/ar/00000-s0.png",
    ),
    "a key twice": (_raw(RESULT, json.dumps(_result("ar"))[:-1] + ', "device": "cuda"}'), "a key appears twice"),
    "nested too deep": (_raw(RESULT, "[" * 20_000 + "]" * 20_000), "more than 10000 lists and objects"),
    "huge": (_raw(RESULT, " " * (9 * 1024 * 1024)), "is larger than 8388608 bytes"),
    "another job's result": (_raw(RESULT, json.dumps(_result("ar", 1))), "whose file is jobs/ar/00001-s0.json"),
}


@pytest.mark.parametrize("case", list(BAD_RESULTS))
def test_a_bad_result_is_refused_by_the_report_and_by_a_resume(case, folder, prompts, outside, capsys):
    plant, expected = BAD_RESULTS[case]
    plant(folder)
    before = _snapshot(outside)
    line = _refused(capsys, ["bench-report", str(folder), "--format", "png"], expected)
    assert str(folder) in line or "jobs" in line
    assert not (folder / "report").exists()  # refused before anything was written
    _refused(capsys, _bench(folder, prompts), expected)  # before any model loads: the refusal is prompt
    assert _snapshot(outside) == before


BAD_SETTINGS = {
    "malformed": ('{"model": ', "settings file"),
    "empty": ("", "not valid JSON"),
    "a list": ("[1, 2]", "holds a JSON list, not an object"),
    "a key missing": ("drop:methods", "methods: Field required"),
    "seeds as text": ("seeds:'0'", "seeds: Input should be a valid list"),
    "a negative count": ("count:-5", "prompts.count: Input should be greater than or equal to 1, got -5"),
    "top-p NaN": ("top_p:NaN", "NaN is not a finite number"),
}


@pytest.mark.parametrize("case", list(BAD_SETTINGS))
def test_a_bad_run_json_is_refused(case, folder, prompts, capsys):
    change, expected = BAD_SETTINGS[case]
    settings = _settings(prompts)
    if change.startswith("drop:"):
        del settings[change[5:]]
        text = json.dumps(settings)
    elif change == "seeds:'0'":
        text = json.dumps({**settings, "seeds": "0"})
    elif change == "count:-5":
        text = json.dumps({**settings, "prompts": {**settings["prompts"], "count": -5}})
    elif change == "top_p:NaN":
        text = json.dumps(settings).replace('"top_p": 1.0', '"top_p": NaN')
    else:
        text = change
    _write(folder, "run.json", text)
    _refused(capsys, ["bench-report", str(folder), "--format", "png"], expected)
    _refused(capsys, _bench(folder, prompts), expected)


def test_run_json_as_a_folder_a_pipe_or_a_link_is_refused(folder, prompts, capsys):
    (folder / "run.json").unlink()
    (folder / "run.json").mkdir()
    _refused(capsys, ["bench-report", str(folder)], "is a folder, not a regular file")
    (folder / "run.json").rmdir()
    os.mkfifo(folder / "run.json")
    _refused(capsys, ["bench-report", str(folder)], "is a named pipe, not a regular file")
    _refused(capsys, _bench(folder, prompts), "something other than a file is already there")
    (folder / "run.json").unlink()
    (folder / "run.json").symlink_to("/dev/zero")
    _refused(capsys, ["bench-report", str(folder)], "is a symbolic link")


def test_bad_failure_records_and_misplaced_files_are_refused_by_the_report(folder, prompts, capsys):
    _write(folder, FAILURE, "[]")
    _refused(capsys, ["bench-report", str(folder)], "failure record")
    _write(folder, FAILURE, {"job": _result("sjd", 1)["job"], "error": 5, "traceback": ""})
    _refused(capsys, ["bench-report", str(folder)], "error: Input should be a valid string, got 5")
    _write(folder, FAILURE, {"job": _result("sjd", 1)["job"], "error": "x", "traceback": ""})
    _write(folder, "jobs/sjd/00007-s0.json", _result("sjd", 7))  # a job of a prompt the run does not have
    _refused(capsys, ["bench-report", str(folder)], "holds a job this run does not have (prompt 7 of 2")
    (folder / "jobs/sjd/00007-s0.json").unlink()
    result = _result("sjd")
    result["job"]["method"] = result["metrics"]["method"] = "lantern"
    result["trace"], result["image"] = "traces/lantern/00000-s0.json", "images/lantern/00000-s0.png"
    _write(folder, "jobs/lantern/00000-s0.json", result)
    _refused(capsys, ["bench-report", str(folder)], "holds a job this run does not have (method 'lantern'")
    shutil.rmtree(folder / "jobs" / "lantern")
    other = _result("sjd")
    other["metrics"] = {**other["metrics"], "grid": [1, 4]}
    _write(folder, SJD_RESULT, other)
    _refused(capsys, ["bench-report", str(folder)], "has a 1x4 grid where")


def test_a_folder_where_a_jobs_file_belongs_is_refused_before_any_work(folder, prompts, capsys):
    for relative in ("traces/sjd/00001-s0.json", "images/ar/00001-s0.png", "jobs/sjd/00001-s0.error.json"):
        if (folder / relative).exists():
            (folder / relative).unlink()
        (folder / relative).mkdir(parents=True)
        _refused(capsys, _bench(folder, prompts), f"{relative.rsplit('/', 1)[0]} holds files")
        (folder / relative).rmdir()


def test_a_resume_refuses_a_result_of_another_prompt(folder, prompts, capsys):
    prompts.write_text("blue car\nblue car\n")  # the same count, other prompts: the results are not theirs
    _refused(capsys, _bench(folder, prompts), "holds another job than this run's: its prompt or category differs")


def test_links_to_folders_outside_are_refused_before_any_work(folder, prompts, outside, capsys):
    """A link where a folder belongs (images/sjd, traces/ar, jobs/sjd, report) is refused, whatever it points to;
    nothing outside is written or even probed."""
    before = _snapshot(outside)
    for relative in ("images/sjd", "traces/ar"):
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).symlink_to(outside, target_is_directory=True)
        _refused(capsys, _bench(folder, prompts), f"{relative} is a symbolic link")
        (folder / relative).unlink()
    shutil.copytree(folder / "jobs" / "sjd", outside / "sjd")
    before = _snapshot(outside)
    shutil.rmtree(folder / "jobs" / "sjd")
    (folder / "jobs" / "sjd").symlink_to(outside / "sjd", target_is_directory=True)
    _refused(capsys, _bench(folder, prompts), "jobs/sjd is a symbolic link")
    _refused(capsys, ["bench-report", str(folder)], "jobs/sjd is a symbolic link")
    (folder / "jobs" / "sjd").unlink()
    shutil.copytree(outside / "sjd", folder / "jobs" / "sjd")
    (folder / "report").symlink_to(outside, target_is_directory=True)
    _refused(capsys, ["bench-report", str(folder), "--format", "png"], "report is a symbolic link")
    assert _snapshot(outside) == before


def test_links_at_the_reports_files_are_replaced_not_written_through(folder, outside, capsys):
    """A link planted at report/report.md or at a figure's name is replaced by the file: the file it points to
    stays as it was."""
    before = _snapshot(outside)
    (folder / "report").mkdir()
    for name in ("report.md", "report.json", "step-compression.png"):
        (folder / "report" / name).symlink_to(outside / "precious.txt")
    (folder / "report" / "latency-vs-nfe.png").symlink_to(outside / "new.png")  # a link to nothing yet
    assert main(["bench-report", str(folder), "--format", "png"]) == 0
    capsys.readouterr()
    assert _snapshot(outside) == before
    for name in ("report.md", "report.json", "step-compression.png", "latency-vs-nfe.png"):
        assert not (folder / "report" / name).is_symlink() and (folder / "report" / name).stat().st_size > 0
    assert not list(folder.rglob("*.partial"))


def test_a_folder_where_a_report_file_belongs_is_refused(folder, capsys):
    (folder / "report" / "report.md").mkdir(parents=True)
    _refused(capsys, ["bench-report", str(folder)], "report.md: a folder is in the way")
    (folder / "report" / "report.md").rmdir()
    (folder / "report").rmdir()
    (folder / "report").write_text("a file")
    _refused(capsys, ["bench-report", str(folder)], "report is a file, where a folder belongs")


def test_bench_report_options_are_refused_cleanly(folder, tmp_path, capsys):
    _refused(capsys, ["bench-report", str(folder), "--format", "bmp"], "--format: unknown format bmp")
    _refused(capsys, ["bench-report", str(folder), "--clip", str(tmp_path / "none")], "--clip takes a folder")
    clip = tmp_path / "clip"
    clip.mkdir()
    _refused(capsys, ["bench-report", str(folder), "--clip", str(clip)], "holds no CLIP model (config.json)")
    for text, expected in (("{", "not valid JSON"), ("[]", "is not a JSON object")):
        (clip / "config.json").write_text(text)
        _refused(capsys, ["bench-report", str(folder), "--clip", str(clip)], expected)
    (clip / "config.json").unlink()
    os.mkfifo(clip / "config.json")
    _refused(capsys, ["bench-report", str(folder), "--clip", str(clip)], "is not a regular file")
    assert not (folder / "report").exists()


def test_a_clip_folder_without_a_model_is_refused_in_one_line(folder, tmp_path, capsys):
    clip = tmp_path / "clip"
    clip.mkdir()
    (clip / "config.json").write_text("{}")  # a config, but no weights: transformers' own error, in one line
    _refused(capsys, ["bench-report", str(folder), "--clip", str(clip)], "cannot load a CLIP model from")


def test_images_are_read_as_the_folder_is(folder, tmp_path):
    """The CLIP scorer reads each job's image inside the folder, never through a link, bounded."""
    from specviz.measure.quality import read_image

    (folder / "images" / "ar").mkdir(parents=True)
    (folder / "images" / "ar" / "00000-s0.png").symlink_to("/dev/zero")
    with pytest.raises(FolderError, match="is a symbolic link"):
        read_image(folder, "images/ar/00000-s0.png")
    (folder / "images" / "ar" / "00000-s0.png").unlink()
    (folder / "images" / "ar" / "00000-s0.png").write_bytes(b"not a png")
    with pytest.raises(FolderError, match="is not a readable image"):
        read_image(folder, "images/ar/00000-s0.png")
    with pytest.raises(FolderError, match="not a path inside the folder"):
        read_image(folder, "../outside/precious.txt")


def test_bench_output_paths_are_checked_before_any_work(tmp_path, prompts, monkeypatch, capsys):
    dangling = tmp_path / "results.json"
    dangling.symlink_to(tmp_path / "missing" / "results.json")
    _refused(capsys, ["bench", "--prompts", str(prompts), "--json", str(dangling)], "symbolic link to a missing file")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    out = tmp_path / "two"
    _refused(capsys, _bench(out, prompts), "MASTER_ADDR and MASTER_PORT are not set")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "port")
    _refused(capsys, _bench(out, prompts), "MASTER_PORT must be a port number")
    assert not out.exists()
