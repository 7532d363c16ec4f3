"""The command line as a user meets it: outputs, summary line, and clear refusals of bad input."""

import json
import subprocess
import sys

import pytest
from PIL import Image

from specviz.cli import main
from specviz.trace import Trace


def test_run_writes_image_and_trace(tmp_path, capsys):
    assert main(["run", "--prompt", "red apple", "--seed", "4", "--out", str(tmp_path / "out")]) == 0
    line = capsys.readouterr().out.strip()
    assert "nfe=256 tokens=256 seconds=" in line and "method=ar" in line
    assert Image.open(tmp_path / "out" / "image.png").size == (384, 384)
    trace = Trace.load(tmp_path / "out" / "trace.json")
    assert trace.seed == 4 and trace.prompt == "red apple"


def test_greedy_is_accepted(tmp_path, capsys):
    assert main(["run", "--prompt", "sun", "--temperature", "0", "--out", str(tmp_path)]) == 0
    assert Trace.load(tmp_path / "trace.json").sampling.temperature == 0


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--prompt", ""], "the prompt is empty"),
        (["--prompt", "   "], "the prompt is empty"),
        (["--prompt", "x" * 5000], "the limit is 2000"),
        (["--prompt", "sun", "--model", "dalle"], "unknown model 'dalle'; registered: tiny"),
        (["--prompt", "sun", "--method", "magic"], "unknown method 'magic'; available: ar"),
        (["--prompt", "sun", "--top-k", "0"], "top-k must be a positive integer"),
        (["--prompt", "sun", "--top-k", "-5"], "top-k must be a positive integer"),
        (["--prompt", "sun", "--temperature", "-1"], "temperature must be between 0"),
        (["--prompt", "sun", "--top-p", "2"], "top-p must be in"),
    ],
)
def test_bad_input_is_refused_clearly(tmp_path, capsys, arguments, message):
    assert main(["run", *arguments, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "trace.json").exists()


def test_output_folder_that_cannot_be_written(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["run", "--prompt", "sun", "--out", str(blocker / "sub")]) == 2
    assert "cannot write to" in capsys.readouterr().err


def test_missing_weights_are_reported(tmp_path, capsys):
    assert main(["run", "--prompt", "sun", "--weights", str(tmp_path), "--out", str(tmp_path)]) == 3
    assert "missing in" in capsys.readouterr().err


def test_models_lists_tiny_as_offline(capsys):
    assert main(["models"]) == 0
    first_line = capsys.readouterr().out.split("\n")[0]
    assert first_line.startswith("tiny") and first_line.endswith(" available offline")


@pytest.mark.parametrize("command", [[], ["run"], ["models"], ["bench"], ["bench-cspd"]])
def test_help_on_every_subcommand(command):
    result = subprocess.run(
        [sys.executable, "-m", "specviz", *command, "--help"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and "usage: python -m specviz" in result.stdout


def test_bench_prints_a_table_and_json(tmp_path, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("# one prompt\nred apple\n")
    out = tmp_path / "bench.json"
    assert main(["bench", "--methods", "ar", "--prompts", str(prompts), "--seeds", "1", "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "| ar | yes | 256.0 | 256 | 1.00x |" in table and "generate()" in table
    report = json.loads(out.read_text())
    assert report["prompts"] == ["red apple"] and report["reference"]["ratio"] > 0


def test_bench_refuses_an_empty_prompt_file(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n# nothing\n")
    assert main(["bench", "--prompts", str(empty)]) == 2
    assert "no prompts in" in capsys.readouterr().err
