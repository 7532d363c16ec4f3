"""Bad input, generated: every case gets one clean line, a non-zero exit, no traceback, no file written.

The command line is driven in-process (`specviz.cli.main`), with one bad value per case on top of a
valid command, so nothing gets as far as generating an image; a few cases run as real processes. The
trace loader gets hundreds of mutations of a real trace and must answer each with a TraceError (or
accept it when the mutation happens to be valid), never another exception.
"""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import save_file

from specviz import cli
from specviz.trace import Trace, TraceError

EXAMPLE = Path(__file__).parents[1] / "specviz" / "data" / "examples" / "red-apple-sjd.json"
ASSETS = Path(__file__).parents[1] / "assets" / "tiny"


def _weights_folders(root: Path) -> dict[str, Path]:
    """Every way a `tiny` weights folder can be wrong that the issue found, each in its own folder."""
    config = json.loads((ASSETS / "config.json").read_text())
    good = {name: (ASSETS / name).read_bytes() for name in ("config.json", "model.safetensors", "codebook.safetensors")}
    huge = {**config, "model": {**config["model"], "hidden_size": 4096, "num_heads": 64, "num_layers": 64}}
    variants = {
        "garbage-config": {"config.json": b"\x00\xffnot json"},
        "empty-config": {"config.json": b""},
        "list-config": {"config.json": b"[1, 2]"},
        "huge-config": {"config.json": json.dumps(huge).encode()},
        "negative-config": {"config.json": json.dumps({**config, "model": {**config["model"], "rows": -3}}).encode()},
        "unknown-key": {"config.json": json.dumps({**config, "model": {**config["model"], "evil": 1}}).encode()},
        "bad-sampling": {"config.json": json.dumps({**config, "sampling": {"temperature": "hot"}}).encode()},
        "empty-weights": {"model.safetensors": b""},
        "garbage-weights": {"model.safetensors": b"\x07" * 100},
        "pickle-weights": {"model.safetensors": b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94."},
        "missing-codebook": {"codebook.safetensors": None},
    }
    folders = {}
    for name, changes in variants.items():
        folder = root / name
        folder.mkdir(parents=True)
        for file, data in {**good, **changes}.items():
            if data is not None:
                (folder / file).write_bytes(data)
        folders[name] = folder
    wrong_key = root / "wrong-key-codebook"
    wrong_key.mkdir()
    for file in ("config.json", "model.safetensors"):
        (wrong_key / file).write_bytes(good[file])
    import torch

    save_file({"centres": torch.zeros(1024, 27)}, str(wrong_key / "codebook.safetensors"))
    folders["wrong-key-codebook"] = wrong_key
    return folders


def _cases(tmp: Path) -> list[tuple[str, list[str]]]:
    """(what is wrong, argv) pairs: one bad value each on top of a valid command."""
    out = str(tmp / "out")
    (tmp / "image-dir" / "image.png").mkdir(parents=True)
    (tmp / "a-file").write_text("x")
    (tmp / "empty-prompts.txt").write_text("# nothing\n\n")
    (tmp / "binary-prompts.txt").write_bytes(b"\xff\xfe\x00bad")
    run = ["run", "--prompt", "red apple", "--out", out]
    bad_values = {
        "--prompt": ["", "   ", "\t\n", "red \udcff apple", "x" * 3000],
        "--seed": ["-1", str(2**64), "abc", "1.5", str(2**63)],
        "--temperature": ["-1", "nan", "inf", "101", "x"],
        "--top-k": ["0", "-5", "1.5"],
        "--top-p": ["0", "1.5", "nan", "-0.1"],
        "--guidance": ["-1", "51", "nan", "inf"],
        "--window": ["0", "129", "2.5", "-3"],
        "--init": ["diagonal", ""],
        "--device": ["bogus", "cuda", "cuda:99", "meta", "mps", "", "cpu:x"],
        "--out": ["", str(tmp / "a-file" / "sub"), str(tmp / "a-file"), "/proc/specviz", str(tmp / "image-dir")],
        "--model": ["dalle", "", "TINY"],
        "--method": ["nope", "", "sjd,ar"],
        "--reset-in-stall": ["-1", "5"],  # 5 with the default random initialisation is refused
        "--delta": ["2"],
        "--neighbours": ["0"],
    }
    cases = []
    for flag, values in bad_values.items():
        for value in values:
            argv = list(run)
            if flag in argv:
                argv[argv.index(flag) + 1] = value
            else:
                argv += [flag, value]
            if flag in ("--delta", "--neighbours"):
                argv += ["--method", "lantern"]
            cases.append((f"run {flag} {value!r}", argv))
    cases += [
        ("run: a parameter the method lacks", [*run, "--method", "ar", "--window", "4"]),
        ("run: gsd rank with sjd", [*run, "--method", "sjd", "--ranks-above", "3"]),
    ]
    for name, folder in _weights_folders(tmp / "weights").items():
        cases.append((f"run --weights {name}", [*run, "--weights", str(folder)]))
    cases.append(("run --weights missing", [*run, "--weights", str(tmp / "nowhere")]))
    bench = ["bench", "--methods", "sjd", "--seeds", "1"]
    for flag in ("--temperature", "--top-k", "--top-p", "--guidance", "--window", "--device", "--model"):
        for value in bad_values[flag]:
            cases.append((f"bench {flag} {value!r}", [*bench, flag, value]))
    for flag in ("--seed", "--window", "--init", "--reset-in-stall"):
        for value in bad_values[flag]:
            cases.append((f"check-lossless {flag} {value!r}", ["check-lossless", "--method", "sjd", flag, value]))
    cases += [
        ("bench --seeds 0", ["bench", "--seeds", "0"]),
        ("bench --seeds huge", ["bench", "--seeds", "10000000000"]),
        ("bench --methods empty", ["bench", "--methods", ",,"]),
        ("bench --methods unknown", ["bench", "--methods", "sjd,dalle"]),
        ("bench --json unwritable", [*bench, "--json", "/proc/specviz.json"]),
        ("bench --json into a file", [*bench, "--json", str(tmp / "a-file" / "x.json")]),
        ("bench --json a folder", [*bench, "--json", str(tmp)]),
        ("bench --prompts missing", [*bench, "--prompts", str(tmp / "none.txt")]),
        ("bench --prompts empty", [*bench, "--prompts", str(tmp / "empty-prompts.txt")]),
        ("bench --prompts binary", [*bench, "--prompts", str(tmp / "binary-prompts.txt")]),
        ("bench --prompts a folder", [*bench, "--prompts", str(tmp)]),
        ("bench --device bogus", [*bench, "--device", "bogus"]),
        ("bench --window 0", [*bench, "--window", "0"]),
    ]
    check = ["check-lossless", "--method", "sjd"]
    cases += [
        ("check-lossless --samples 0", [*check, "--samples", "0"]),
        ("check-lossless --samples huge", [*check, "--samples", str(10**12)]),
        ("check-lossless --seed huge", [*check, "--seed", str(2**64)]),
        ("check-lossless --seed negative", [*check, "--seed", "-2"]),
        ("check-lossless --toy", [*check, "--toy", "big"]),
        ("check-lossless --method", ["check-lossless", "--method", "nope"]),
        ("check-lossless --window", [*check, "--window", "0"]),
    ]
    figures = ["figures", str(EXAMPLE), "--out", str(tmp / "figures")]
    cases += [
        ("figures missing trace", ["figures", str(tmp / "none.json"), "--out", str(tmp / "figures")]),
        ("figures a folder as trace", ["figures", str(tmp), "--out", str(tmp / "figures")]),
        ("figures garbage trace", ["figures", str(tmp / "binary-prompts.txt"), "--out", str(tmp / "figures")]),
        ("figures --format", [*figures, "--format", "bmp"]),
        ("figures --style", [*figures, "--style", "neon"]),
        ("figures --width-in", [*figures, "--width-in", "0"]),
        ("figures --iteration", [*figures, "--iteration", "100000"]),
        ("figures --out a file", ["figures", str(EXAMPLE), "--out", str(tmp / "a-file")]),
    ]
    return cases


WEIGHTS_MESSAGES = {
    "garbage-config": "config.json is not readable JSON",
    "empty-config": "config.json is not readable JSON",
    "list-config": "config.json has no 'model' section",
    "huge-config": "describes about",
    "negative-config": "model.rows must be an integer from 1 to 64",
    "unknown-key": "unexpected keyword argument 'evil'",
    "bad-sampling": "config.json sampling: temperature must be a finite number",
    "empty-weights": "model.safetensors is not a readable safetensors file",
    "garbage-weights": "model.safetensors is not a readable safetensors file",
    "pickle-weights": "model.safetensors is not a readable safetensors file",
    "missing-codebook": "codebook.safetensors missing",
    "wrong-key-codebook": "needs a 'codebook' tensor",
}


def test_each_way_a_weights_folder_is_wrong_gets_its_own_message(tmp_path):
    from specviz.models.errors import ModelUnavailable
    from specviz.models.tiny.adapter import TinyModel

    for name, folder in _weights_folders(tmp_path).items():
        with pytest.raises(ModelUnavailable, match=WEIGHTS_MESSAGES[name]):
            TinyModel.load(folder)


def _files_under(folder: Path) -> set[Path]:
    return {path for path in folder.rglob("*") if path.is_file()}


def test_bad_command_lines_get_one_clean_line(tmp_path, capsys):
    cases = _cases(tmp_path)
    before = _files_under(tmp_path)
    failures = []
    for what, argv in cases:
        try:
            status = cli.main(argv)
        except SystemExit as stop:  # argparse's own refusals: usage and one error line, status 2
            status = stop.code
        captured = capsys.readouterr()
        errors = [line for line in captured.err.splitlines() if line.strip()]
        clean = len(errors) == 1 and errors[0].startswith("error:") and "Traceback" not in captured.err
        if status not in (2, 3) or not clean:
            failures.append(f"{what}: status {status}, stderr {captured.err[-300:]!r}")
    assert not failures, "\n".join(failures)
    assert _files_under(tmp_path) == before, "a refused command wrote files"
    assert not (tmp_path / "out").exists() and not (tmp_path / "figures").exists()
    print(f"{len(cases)} bad command lines, all refused cleanly")


def test_bad_command_lines_as_real_processes(tmp_path):
    cases = [  # bytes that are not UTF-8 reach Python as surrogates; an offline hub is a model that cannot load
        (["run", "--prompt", "red \udcff apple", "--out", str(tmp_path / "o")], 2),
        (["run", "--prompt", "x", "--model", "janus-pro", "--out", str(tmp_path / "o")], 3),
    ]
    for argv, expected in cases:
        result = subprocess.run(
            [sys.executable, "-m", "specviz", *argv],
            capture_output=True,
            text=True,
            errors="surrogateescape",
            timeout=120,
            env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HOME": str(tmp_path)},
        )
        assert result.returncode == expected, (argv, result.stderr)
        assert "Traceback" not in result.stderr and result.stderr.strip().startswith("error:"), result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "o").exists()


def _mutations(data: dict, rng: random.Random, count: int) -> list[str]:
    """`count` mutated copies of a trace, as JSON text: wrong types, out-of-range and huge values,
    missing and unknown keys, swapped lists, truncations."""
    bad_values = [None, -1, 2**64, 1e308, -1e-9, "x", "", [], {}, [[1]], True, 0.5, [-1], [10**9], "NaN", 65536 * 2]
    paths = []

    def walk(node, path):
        paths.append(path)
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, (*path, key))
        elif isinstance(node, list) and node:
            for index in sorted({0, len(node) // 2, len(node) - 1}):
                walk(node[index], (*path, index))

    walk(data, ())
    texts = []
    for _ in range(count):
        copy = json.loads(json.dumps(data))
        path = rng.choice(paths[1:])
        parent = copy
        for step in path[:-1]:
            parent = parent[step]
        kind = rng.random()
        if kind < 0.6:
            parent[path[-1]] = rng.choice(bad_values)
        elif kind < 0.75 and isinstance(parent, dict):
            del parent[path[-1]]
        elif kind < 0.85 and isinstance(parent, dict):
            parent["__" + str(path[-1])] = 1
        elif kind < 0.95 and isinstance(parent[path[-1]], list):
            parent[path[-1]] = parent[path[-1]] * 3
        else:
            text = json.dumps(copy)
            texts.append(text[: rng.randrange(len(text))])
            continue
        texts.append(json.dumps(copy))
    return texts


def test_mutated_traces_are_refused_with_a_trace_error():
    data = json.loads(EXAMPLE.read_text())
    rng = random.Random(7)
    accepted = refused = 0
    for text in _mutations(data, rng, 300):
        try:
            trace = Trace.from_json(text)
        except TraceError as error:
            assert str(error).startswith("invalid trace") and "\n" not in str(error)
            refused += 1
        else:  # a mutation that kept the trace valid: it is consistent, so viewers can draw it
            assert trace.tokens == [t for it in trace.iterations for t in it.committed]
            accepted += 1
    print(f"{accepted + refused} mutated traces: {refused} refused with a TraceError, {accepted} still valid")
    assert refused > 200


@pytest.mark.parametrize(
    "text, message",
    [
        ("[" * 100_000, "not valid JSON"),
        ('{"version": 2, "tokens": [' + ",".join(["1"] * 4_100_000) + "]}", "more than 4000000 values"),
        ('{"version": 2, "seed": NaN}', "NaN is not a number a trace may hold"),
    ],
)
def test_hostile_json_is_refused_early(text, message):
    with pytest.raises(TraceError, match=message):
        Trace.from_json(text)


def test_only_regular_files_load(tmp_path):
    import os

    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    with pytest.raises(TraceError, match="not a regular file"):
        Trace.load(fifo)  # would block forever if opened
    with pytest.raises(TraceError, match="not a regular file"):
        Trace.load(tmp_path)
    with pytest.raises(TraceError, match="not a regular file"):
        Trace.load("/dev/zero")
