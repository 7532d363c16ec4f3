"""`bench --out DIR` sharded over ranks, resumable, and merged by `bench-report`: one process in this
one, two gloo processes under torchrun in a subprocess, a rank killed and the run resumed."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specviz.cli import main
from specviz.core.inputs import InputError
from specviz.measure.bench_report import load, method_rows
from specviz.measure.sharded import Launch, launch_from, rank_device, units

pytestmark = pytest.mark.xdist_group("sharded")  # one worker: the two-process run wants both cores
PROMPTS = ["red apple", "rocket", "sun"]


def _bench(out: Path, *extra: str) -> list[str]:
    return ["bench", "--methods", "ar,sjd", "--seeds", "1", "--window", "16", "--out", str(out), *extra]


def _tokens(root: Path) -> dict[tuple[str, str], list[int]]:
    """Each job's image tokens, by method and job stem."""
    return {
        (path.parent.name, path.stem): json.loads(path.read_text())["tokens"]
        for path in sorted(root.glob("traces/*/*.json"))
    }


@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("prompts") / "prompts.txt"
    path.write_text("\n".join(PROMPTS) + "\n")
    return path


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, prompt_file) -> Path:
    out = tmp_path_factory.mktemp("one") / "run"
    assert main([*_bench(out, "--prompts", str(prompt_file))]) == 0
    return out


def test_the_launchers_variables_place_a_rank():
    assert launch_from({}) == Launch(0, 1, 0, 1)
    torchrun = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    assert launch_from(torchrun) == Launch(3, 4, 1, 2)
    slurm = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NTASKS_PER_NODE": "4"}
    assert launch_from(slurm) == Launch(5, 8, 1, 4)
    assert rank_device("cuda", Launch(5, 8, 1, 4)) == "cuda:1" and rank_device("cpu", Launch(5, 8, 1, 4)) == "cpu"
    for broken in ({"RANK": "2", "WORLD_SIZE": "2"}, {"WORLD_SIZE": "two"}):
        with pytest.raises(InputError):
            launch_from(broken)


def test_every_unit_runs_ar_first_and_each_job_once():
    from specviz.measure.prompt_sets import BenchPrompt

    jobs = units([BenchPrompt("a", "x"), BenchPrompt("b", "y")], [0, 1], ["sjd", "ar", "scd-mc"])
    assert [[job.method for job in unit] for unit in jobs] == [["ar", "sjd", "scd-mc"]] * 4
    assert len({(job.index, job.seed, job.method) for unit in jobs for job in unit}) == 12


def test_one_process_writes_every_job_and_a_restart_redoes_none(one_process, prompt_file, capsys):
    results = sorted(one_process.glob("jobs/*/*.json"))
    assert [path.relative_to(one_process).as_posix() for path in results] == [
        f"jobs/{method}/{index:05d}-s0.json" for method in ("ar", "sjd") for index in range(3)
    ]
    assert len(list(one_process.glob("images/*/*.png"))) == len(list(one_process.glob("traces/*/*.json"))) == 6
    sjd = json.loads((one_process / "jobs/sjd/00001-s0.json").read_text())["metrics"]
    ar = json.loads((one_process / "jobs/ar/00001-s0.json").read_text())["metrics"]
    assert sjd["latency_speedup"] == pytest.approx(ar["seconds"] / sjd["seconds"]) and sjd["nfe"] < ar["nfe"] == 256
    written = {path: path.stat().st_mtime_ns for path in results}
    capsys.readouterr()
    assert main([*_bench(one_process, "--prompts", str(prompt_file))]) == 0
    assert "0 jobs done, 6 already done before (resumed), 0 failed" in capsys.readouterr().out
    assert {path: path.stat().st_mtime_ns for path in results} == written
    assert not list(one_process.rglob("*.partial"))


def test_a_failing_job_is_recorded_and_redone_on_restart(tmp_path, prompt_file, monkeypatch, capsys):
    import specviz.measure.sharded as sharded

    real_run = sharded.run

    def failing(model, method, prompt, *args, **kwargs):
        if method == "sjd" and prompt == "red apple":
            raise RuntimeError("CUDA out of memory (a stand-in)")
        return real_run(model, method, prompt, *args, **kwargs)

    monkeypatch.setattr(sharded, "run", failing)
    out = tmp_path / "run"
    assert main([*_bench(out, "--prompts", str(prompt_file), "--limit", "1")]) == 0  # AR, then SJD fails
    printed = capsys.readouterr().out
    assert "1 jobs done, 0 already done before (resumed), 1 failed" in printed
    error = json.loads((out / "jobs/sjd/00000-s0.error.json").read_text())
    assert error["error"] == "RuntimeError: CUDA out of memory (a stand-in)" and "Traceback" in error["traceback"]
    assert "- sjd on prompt 0, seed 0: `RuntimeError: CUDA out of memory (a stand-in)`" in printed
    monkeypatch.setattr(sharded, "run", real_run)
    assert main([*_bench(out, "--prompts", str(prompt_file), "--limit", "1")]) == 0
    assert "1 jobs done, 1 already done before (resumed), 0 failed" in capsys.readouterr().out
    assert not (out / "jobs/sjd/00000-s0.error.json").exists() and (out / "jobs/sjd/00000-s0.json").exists()


def test_a_folder_holding_other_settings_is_refused(one_process, prompt_file, capsys):
    assert main([*_bench(one_process, "--prompts", str(prompt_file), "--temperature", "0.5")]) == 2
    assert "holds a run with other settings (sampling differ)" in capsys.readouterr().err


def test_a_launch_of_several_processes_needs_a_folder(monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    assert main(["bench", "--methods", "ar", "--limit", "1"]) == 2
    assert "give --out DIR" in capsys.readouterr().err


def _torchrun(out: Path, prompt_file: Path) -> subprocess.Popen:
    """Two ranks over the first two prompts: one unit (AR, then SJD) each."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "specviz", *_bench(out, "--prompts", str(prompt_file), "--limit", "2")]  # fmt: skip
    environment = {**os.environ, "SPECVIZ_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=environment, start_new_session=True)  # fmt: skip


def test_two_gloo_ranks_killed_and_resumed_give_the_one_process_results(one_process, prompt_file, tmp_path):
    """torchrun starts two ranks (gloo); once a job is done the whole launch is killed, as a lost node would
    be; the restart keeps what was done, does the rest, and every job's tokens are the one process's."""
    out = tmp_path / "two"
    launch = _torchrun(out, prompt_file)
    deadline = time.monotonic() + 240
    while not list(out.glob("jobs/*/*.json")) and launch.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(launch.pid, signal.SIGKILL)  # torchrun; its ranks run in sessions of their own, killed by name
    subprocess.run(["pkill", "-KILL", "-f", str(out)], check=False)
    launch.wait()
    time.sleep(0.5)
    kept = {path: path.stat().st_mtime_ns for path in out.glob("jobs/*/*.json")}
    assert 1 <= len(kept) < 4, "the launch ended before it could be killed mid-run"
    again = _torchrun(out, prompt_file)
    printed, _ = again.communicate(timeout=300)
    assert again.returncode == 0, printed[-3000:]
    assert "rank 0/2 on cpu" in printed and "rank 1/2 on cpu" in printed and "all 2 ranks done" in printed
    resumed = sum(int(count) for count in re.findall(r"(\d+) already done before", printed))
    assert resumed == len(kept)  # the jobs done before the kill were not run again
    assert {path: path.stat().st_mtime_ns for path in kept} == kept
    one = _tokens(one_process)
    assert _tokens(out) == {key: tokens for key, tokens in one.items() if not key[1].startswith("00002")}
    by_rank = {json.loads(path.read_text())["job"]["index"] for path in out.glob("jobs/sjd/*.json")}
    assert by_rank == {0, 1}
    # the merge reads the two ranks' folder as it reads one process's
    two_ranks = {row["method"]: row["nfe"] for row in method_rows(*load(out)[1:], ["ar", "sjd"])}
    one_ranked = json.loads((one_process / "jobs/sjd/00000-s0.json").read_text())["metrics"]["nfe"]
    one_ranked += json.loads((one_process / "jobs/sjd/00001-s0.json").read_text())["metrics"]["nfe"]
    assert two_ranks == {"ar": 256, "sjd": one_ranked / 2}


def test_the_merge_writes_tables_and_figures(one_process, tmp_path, capsys):
    settings, results, errors = load(one_process)
    rows = {row["method"]: row for row in method_rows(results, errors, settings["methods"])}
    assert rows["ar"]["nfe"] == 256 and rows["sjd"]["runs"] == 3 and rows["sjd"]["failed"] == 0
    assert rows["sjd"]["step_compression"][1] > 1.5 and rows["sjd"]["latency_speedup"] is not None
    assert main(["bench-report", str(one_process), "--format", "png,svg"]) == 0
    page = capsys.readouterr().out
    assert "# Benchmark: tiny," in page and "| sjd | yes | 3 | 0 |" in page and "## Quality" in page
    figures = sorted(path.name for path in (one_process / "report").iterdir() if path.suffix in (".png", ".svg"))
    assert figures == sorted(
        f"{stem}.{fmt}"
        for stem in ("step-compression", "latency-vs-nfe", "acceptance-by-position")
        for fmt in ("png", "svg")
    )
    assert main(["bench-report", str(tmp_path)]) == 2
    assert "holds no run.json" in capsys.readouterr().err


def _tiny_clip(folder: Path) -> Path:
    """A CLIP model of transformers' classes with random weights and a byte-level vocabulary, saved as a user's
    local copy of a real one would be."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPTokenizer

    byte_chars = [chr(code) for code in range(33, 127)] + [chr(code) for code in range(161, 173)]
    byte_chars += [chr(code) for code in range(174, 256)] + [chr(256 + n) for n in range(68)]
    tokens = ["<|startoftext|>", "<|endoftext|>", *byte_chars, *(char + "</w>" for char in byte_chars)]
    tokenizer = CLIPTokenizer(vocab={token: index for index, token in enumerate(tokens)}, merges=[])
    images = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    torch.manual_seed(0)
    text = {"vocab_size": len(tokens), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 2, "max_position_embeddings": 77, "bos_token_id": 0, "eos_token_id": 1,
            "pad_token_id": 1}  # fmt: skip
    vision = {"image_size": 32, "patch_size": 8, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 2}  # fmt: skip
    CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=16)).save_pretrained(folder)
    CLIPProcessor(image_processor=images, tokenizer=tokenizer).save_pretrained(folder)
    return folder


def test_the_report_gives_each_methods_clip_score_with_a_local_clip_model(one_process, tmp_path, capsys):
    """bench-report --clip scores every image against its own prompt: each cosine as the model's own logits
    give it (batched, padded, in any order), and per method the mean of 100 x max(cosine, 0)."""
    import torch
    from PIL import Image

    from specviz.measure.quality import cosines, load_clip

    weights = _tiny_clip(tmp_path / "clip")
    assert main(["bench-report", str(one_process), "--format", "png", "--clip", str(weights)]) == 0
    page = capsys.readouterr().out
    scores = json.loads((one_process / "report" / "report.json").read_text())["clip_score"]
    assert set(scores) == {"ar", "sjd"} and "CLIP score (100 x the cosine" in page
    model, processor = load_clip(weights)
    _, results, _ = load(one_process)
    found = cosines(one_process, results, model, processor, batch=4)
    direct = []
    for result in results:
        image = Image.open(one_process / result["image"]).convert("RGB")
        inputs = processor(text=[result["job"]["prompt"]], images=[image], return_tensors="pt")
        with torch.inference_mode():
            direct.append(model(**inputs).logits_per_image.item() / model.logit_scale.exp().item())
    assert found == pytest.approx(direct, abs=1e-4) and len({round(value, 3) for value in direct}) > 3
    for method, score in scores.items():
        mine = [100 * max(c, 0.0) for c, r in zip(direct, results, strict=True) if r["job"]["method"] == method]
        assert score == pytest.approx(sum(mine) / len(mine), abs=1e-3)
    assert main(["bench-report", str(one_process), "--clip", str(tmp_path / "none")]) == 2
    assert "--clip takes a folder holding a CLIP model" in capsys.readouterr().err
