"""The command line as a user meets it: outputs, summary line, and clear refusals of bad input."""

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

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


HEAVY_LIBRARIES = ("torch", "transformers", "scipy", "matplotlib", "gradio")


def _imported(argv: list[str], cwd: Path | None = None) -> tuple[subprocess.CompletedProcess, set[str]]:
    """`python -m specviz ARGV` as a process, and the top-level names of every module it imported."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "specviz", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )
    modules = {line.split("|")[-1].strip().split(".")[0] for line in result.stderr.splitlines() if "|" in line}
    return result, modules


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["run", "--help"], ["figures", "--help"], ["run", "--prompt", "x", "--out", "o", "--seed", "٣"]],
)
def test_help_and_argument_errors_import_no_heavy_library(argv):
    """--help and argument errors answer before torch, transformers, scipy, matplotlib or gradio load
    (13-43 s on the 2-core machine when they did)."""
    result, modules = _imported(argv)
    assert result.returncode in (0, 2) and "Traceback" not in result.stderr
    assert "specviz" in modules and not modules & set(HEAVY_LIBRARIES), modules & set(HEAVY_LIBRARIES)


def test_the_command_runs_from_any_folder(tmp_path):
    """Installed (requirements.txt installs the project editable), `python -m specviz` and the `specviz`
    script work outside the repository, and the shipped weights are found."""
    result, _ = _imported(["--help"], cwd=tmp_path)
    assert result.returncode == 0 and "usage: python -m specviz" in result.stdout
    script = Path(sys.executable).parent / "specviz"
    result = subprocess.run([str(script), "models"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("tiny") and "tiny-continuous available offline" in result.stdout


def test_figures_help_lists_only_the_figures_it_writes(capsys):
    from specviz.viz.publication import FIGURES

    with pytest.raises(SystemExit):
        main(["figures", "--help"])
    text = "".join(capsys.readouterr().out.split())  # argparse wraps lines, at hyphens too

    def shown(kind) -> bool:
        return "".join(kind.title.split()) in text

    assert all(shown(kind) for kind in FIGURES if kind.draw is not None)
    assert not any(shown(kind) for kind in FIGURES if kind.draw is None)


def _readme_synopsis() -> list[tuple[str, str]]:
    """(subcommand, the rest of its line) for each command of the README's command-line synopsis."""
    section = (Path(__file__).parents[1] / "README.md").read_text().split("\n## Command line\n", 1)[1]
    commands: list[list[str]] = []
    for line in section.split("```", 2)[1].splitlines():
        line = line.split("#", 1)[0]
        if line.startswith("python -m specviz "):
            command, _, rest = line.removeprefix("python -m specviz ").strip().partition(" ")
            commands.append([command, rest])
        elif line.strip() and commands:
            commands[-1][1] += " " + line.strip()
    return [(command, rest) for command, rest in commands]


def test_the_readmes_synopsis_agrees_with_the_parser():
    """Every subcommand and flag the README lists exists, and a literal value in brackets is the default
    (for a method parameter, its default for the methods the line names; of choices, the first)."""
    from specviz.cli import build_parser
    from specviz.core.catalogue import CATALOGUE

    subcommands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    synopsis = _readme_synopsis()
    assert {command for command, _ in synopsis} == set(subcommands)
    checked = 0
    for command, rest in synopsis:
        options = {flag: action for action in subcommands[command]._actions for flag in action.option_strings}
        methods = re.search(r"--method ([\w|-]+)", rest)
        for flag, value, bracketed in [
            *((f, v, True) for f, v in re.findall(r"\[(--[\w-]+)(?: ([^\]\s]+))?\]", rest)),
            *((f, v, False) for f, v in re.findall(r"(?<!\[)(--[\w-]+)(?: ([^\s\[]+))?", rest)),
        ]:
            assert flag in options, f"{command} has no {flag}"
            if not bracketed or not value or re.fullmatch(r"[A-Z][A-Z0-9_.]*", value):
                continue  # a required value, a switch, or a placeholder
            action, shown = options[flag], value.split("|")
            if action.choices:
                assert set(shown) <= set(action.choices), (command, flag, value)
            default = action.default
            if default is None and action.dest in {n for m in CATALOGUE.values() for n, _, _ in m.parameters.fields()}:
                named = methods.group(1).split("|") if methods else [options["--method"].default]
                defaults = {str(getattr(CATALOGUE[name].parameters(), action.dest)) for name in named}
                assert len(defaults) == 1, (command, flag, defaults)
                default = defaults.pop()
            assert str(default) == shown[0], f"README: {command} {flag} {value}; the parser's default: {default}"
            checked += 1
    assert checked >= 15


def test_a_continuous_method_is_checked_with_2000_samples_by_default(monkeypatch, capsys):
    """20,000 (the discrete default) made the energy test's distance matrix 40,000 x 40,000 (12.8 GB)."""
    import specviz.cli as cli
    import specviz.measure.continuous_lossless as continuous_lossless

    asked = []

    def check(method, samples, seed, params):
        asked.append(samples)
        return continuous_lossless.ContinuousReport(method, {}, samples, 0.0, 0.5, 0.5)

    monkeypatch.setattr(continuous_lossless, "check_continuous", check)
    monkeypatch.setattr(cli, "check_continuous", check, raising=False)  # where the command imported it
    assert main(["check-lossless", "--method", "cspd-exact"]) == 0
    assert asked == [2000] and "samples=2000" in capsys.readouterr().out


def test_pass_cost_says_when_its_timings_cannot_be_right(monkeypatch, capsys):
    """Measured under load: a 17-token pass at 0.9x a one-token pass, printed without a word."""
    import specviz.cli as cli
    import specviz.measure.cost as cost

    measured = [cost.PassCost(1, 10.0, 1.0, 9.0, 31.0), cost.PassCost(17, 9.0, 0.9, 8.5, 9.5)]
    monkeypatch.setattr(cost, "pass_costs", lambda *args: measured)
    monkeypatch.setattr(cli, "load_model", lambda *args, **options: None)
    assert main(["pass-cost", "--sizes", "1,17"]) == 0
    out = capsys.readouterr().out
    assert "warning: these timings cannot be right" in out
    assert "a 17-token pass measured cheaper than a 1-token pass" in out and "ranged from 9.00 to 31.00 ms" in out
    assert not cost.doubts([cost.PassCost(1, 10.0, 1.0, 9.5, 10.5), cost.PassCost(17, 16.0, 1.6, 15.0, 17.0)])


@pytest.mark.parametrize("text", ["٢٠٧", "golden retriever (٢٠٧)", "２０７"])
def test_class_indices_take_the_digits_0_to_9_only(text):
    """A regular expression's \\d, like int(), takes every script's digits."""
    from specviz.core.inputs import InputError
    from specviz.models.imagenet import parse_class

    assert parse_class("207", 1000) == parse_class("golden retriever", 1000) == 207
    with pytest.raises(InputError, match="ImageNet class index"):
        parse_class(text, 1000)
