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
from specviz.core.inputs import brief
from specviz.trace import Trace, TraceError

MAX_LINE = 1000  # characters of a refusal's one line
EXAMPLE = Path(__file__).parents[1] / "specviz" / "data" / "examples" / "red-apple-sjd.json"
ASSETS = Path(__file__).parents[1] / "assets" / "tiny"
CONTINUOUS_ASSETS = Path(__file__).parents[1] / "assets" / "tiny-continuous"


def _variants(root: Path, source: Path, variants: dict[str, dict[str, bytes | None]]) -> dict[str, Path]:
    """One folder per variant: the shipped files of `source`, with the variant's files replaced (None: removed)."""
    good = {path.name: path.read_bytes() for path in source.iterdir() if path.suffix in (".json", ".safetensors")}
    folders = {}
    for name, changes in variants.items():
        folder = root / name
        folder.mkdir(parents=True)
        for file, data in {**good, **changes}.items():
            if data is not None:
                (folder / file).write_bytes(data)
        folders[name] = folder
    return folders


def _with_nan(path: Path) -> bytes:
    """A safetensors file of the same tensors, every number NaN."""
    import torch
    from safetensors.torch import load_file, save

    return save({name: torch.full_like(tensor, float("nan")) for name, tensor in load_file(str(path)).items()})


def _truncated(path: Path) -> bytes:
    data = path.read_bytes()
    return data[: len(data) // 2]


def _weights_folders(root: Path) -> dict[str, Path]:
    """Every way a `tiny` weights folder (its EAGLE draft head included) can be wrong that the reviews
    found, each in its own folder."""
    config = json.loads((ASSETS / "config.json").read_text())
    head = json.loads((ASSETS / "head.json").read_text())
    huge = {**config, "model": {**config["model"], "hidden_size": 4096, "num_heads": 64, "num_layers": 64}}

    def model(**changes) -> bytes:
        return json.dumps({**config, "model": {**config["model"], **changes}}).encode()

    def head_config(**changes) -> bytes:
        return json.dumps({**head, "config": {**head["config"], **changes}}).encode()

    folders = _variants(
        root,
        ASSETS,
        {
            "garbage-config": {"config.json": b"\x00\xffnot json"},
            "empty-config": {"config.json": b""},
            "list-config": {"config.json": b"[1, 2]"},
            "huge-config": {"config.json": json.dumps(huge).encode()},
            "negative-config": {"config.json": model(rows=-3)},
            "unknown-key": {"config.json": model(evil=1)},
            "bad-sampling": {"config.json": json.dumps({**config, "sampling": {"temperature": "hot"}}).encode()},
            "text-dropout": {"config.json": model(dropout="x")},
            "huge-vocabulary": {"config.json": model(vocab_size=10**12)},
            "empty-weights": {"model.safetensors": b""},
            "garbage-weights": {"model.safetensors": b"\x07" * 100},
            "pickle-weights": {"model.safetensors": b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94."},
            "nan-weights": {"model.safetensors": _with_nan(ASSETS / "model.safetensors")},
            "missing-codebook": {"codebook.safetensors": None},
            "truncated-head": {"head.safetensors": _truncated(ASSETS / "head.safetensors")},
            "nan-head": {"head.safetensors": _with_nan(ASSETS / "head.safetensors")},
            "huge-head": {"head.json": head_config(hidden_size=10**6)},
            "head-vocabulary": {"head.json": head_config(vocab_size=10**12)},
            "text-head-dropout": {"head.json": head_config(attention_dropout="x")},
        },
    )
    wrong_key = root / "wrong-key-codebook"
    wrong_key.mkdir()
    for file in ("config.json", "model.safetensors"):
        (wrong_key / file).write_bytes((ASSETS / file).read_bytes())
    import torch

    save_file({"centres": torch.zeros(1024, 27)}, str(wrong_key / "codebook.safetensors"))
    folders["wrong-key-codebook"] = wrong_key
    return folders


def _continuous_weights_folders(root: Path) -> dict[str, Path]:
    """Ways a `tiny-continuous` folder can be wrong: its configuration, its networks, its projection."""
    target = json.loads((CONTINUOUS_ASSETS / "target.json").read_text())

    def model(**changes) -> bytes:
        return json.dumps({**target, "model": {**target["model"], **changes}}).encode()

    return _variants(
        root,
        CONTINUOUS_ASSETS,
        {
            "truncated-projection": {
                "projection.safetensors": _truncated(CONTINUOUS_ASSETS / "projection.safetensors")
            },
            "nan-projection": {"projection.safetensors": _with_nan(CONTINUOUS_ASSETS / "projection.safetensors")},
            "nan-target": {"target.safetensors": _with_nan(CONTINUOUS_ASSETS / "target.safetensors")},
            "text-dropout": {"target.json": model(dropout="x")},
            "huge-vocabulary": {"target.json": model(vocab_size=10**12)},
            "no-heads": {"target.json": model(num_heads=0)},
            "huge-prefix": {"target.json": model(prefix_len=10**9)},
            "list-summary": {"target.json": b"[]"},
        },
    )


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
        "--seed": ["-1", str(2**64), "abc", "1.5", str(2**63), "٣", "²", "1" * 5000],
        "--temperature": ["-1", "nan", "inf", "101", "x", "٠.٥", "1e999"],
        "--top-k": ["0", "-5", "1.5", "٣"],
        "--top-p": ["0", "1.5", "nan", "-0.1"],
        "--guidance": ["-1", "51", "nan", "inf"],
        "--window": ["0", "129", "2.5", "-3", "٣"],
        "--init": ["diagonal", "", "x" * 5000],
        "--device": ["bogus", "cuda", "cuda:99", "meta", "mps", "", "cpu:x"],
        "--out": [
            "",
            str(tmp / "a-file" / "sub"),
            str(tmp / "a-file"),
            "/proc/specviz",
            str(tmp / "image-dir"),
            str(tmp / ("x" * 300)),  # longer than the file system allows a name
            str(tmp / "repository" / ".git" / "out"),
            str(tmp / "repository" / ".GIT"),
        ],
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
            if flag in ("--window", "--init", "--reset-in-stall"):
                argv += ["--method", "sjd"]  # a method that takes them, so only the value is wrong
            cases.append((f"run {flag} {brief(value)}", argv))
    cases += [
        ("run: a parameter the method lacks", [*run, "--method", "ar", "--window", "4"]),
        ("run: gsd rank with sjd", [*run, "--method", "sjd", "--ranks-above", "3"]),
        ("run: a tree depth with sjd", [*run, "--method", "sjd", "--tree-depth", "3"]),
        ("run: a tree top-k in Arabic-Indic digits", [*run, "--method", "eagle2", "--tree-top-k", "٣"]),
        ("run --fast-path on a model without one", [*run, "--model", "tiny-continuous", "--fast-path"]),
    ]
    for name, folder in _weights_folders(tmp / "weights").items():
        cases.append((f"run --weights {name}", [*run, "--weights", str(folder)]))
    for name, folder in _continuous_weights_folders(tmp / "continuous-weights").items():
        cases.append(
            (f"run tiny-continuous --weights {name}", [*run, "--model", "tiny-continuous", "--weights", str(folder)])
        )
    cases.append(("run --weights missing", [*run, "--weights", str(tmp / "nowhere")]))
    cases.append(("run --weights too long a name", [*run, "--weights", str(tmp / ("w" * 300))]))
    bench = ["bench", "--methods", "sjd", "--seeds", "1"]
    for flag in ("--temperature", "--top-k", "--top-p", "--guidance", "--window", "--device", "--model"):
        for value in bad_values[flag]:
            cases.append((f"bench {flag} {brief(value)}", [*bench, flag, value]))
    for flag in ("--seed", "--window", "--init", "--reset-in-stall"):
        for value in bad_values[flag]:
            cases.append((f"check-lossless {flag} {brief(value)}", ["check-lossless", "--method", "sjd", flag, value]))
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
        ("bench --tree-depth with a window method", [*bench, "--tree-depth", "3"]),
        ("bench --seeds in Arabic-Indic digits", [*bench, "--seeds", "٣"]),
        ("bench --json too long a name", [*bench, "--json", str(tmp / ("j" * 300 + ".json"))]),
        ("bench --json into a .git folder", [*bench, "--json", str(tmp / "repository" / ".git" / "b.json")]),
        ("race --tree-depth with sjd", ["race", "--method", "sjd", "--tree-depth", "3"]),
        ("race --repeats 21", ["race", "--repeats", "21"]),
        ("race --repeats in Arabic-Indic digits", ["race", "--repeats", "٣"]),
        ("race --method ar", ["race", "--method", "ar"]),
        ("race --device meta", ["race", "--device", "meta"]),
        ("bench-mar --device mps", ["bench-mar", "--models", "mar-b", "--repeats", "1", "--device", "mps"]),
        ("bench-mar --device meta", ["bench-mar", "--models", "mar-b", "--repeats", "1", "--device", "meta"]),
        ("bench-mar --gammas in Arabic-Indic digits", ["bench-mar", "--gammas", "٣"]),
        ("bench-mar --models unknown", ["bench-mar", "--models", "mar-x"]),
        ("pass-cost --sizes 0", ["pass-cost", "--sizes", "0"]),
        ("pass-cost --sizes in Arabic-Indic digits", ["pass-cost", "--sizes", "٣"]),
        ("pass-cost --device meta", ["pass-cost", "--device", "meta"]),
    ]
    cspd = ["bench-cspd", "--gammas", "4", "--prefills", "0", "--seeds", "1"]
    shares = ",".join(str(share / 100) for share in range(100))  # each a valid pre-fill
    cases += [
        ("bench-cspd --deviation huge", [*cspd, "--deviation", str(10**9)]),
        ("bench-cspd --deviation negative", [*cspd, "--deviation", "-5"]),
        ("bench-cspd --deviation too few", [*cspd, "--deviation", "10"]),
        ("bench-cspd --gammas 0", ["bench-cspd", "--gammas", "0"]),
        (
            "bench-cspd: a sweep of 10,000 settings",
            ["bench-cspd", "--gammas", ",".join(map(str, range(1, 101))), "--prefills", shares],
        ),
        ("bench-cspd --prefills 2", ["bench-cspd", "--prefills", "2"]),
        ("bench-cspd --prefills in Arabic-Indic digits", ["bench-cspd", "--prefills", "٠.٥"]),
        ("bench-cspd on a discrete model", [*cspd, "--model", "tiny"]),
        ("bench-cspd --device meta", [*cspd, "--device", "meta"]),
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
        ("check-lossless --tree-depth with sjd", [*check, "--tree-depth", "3"]),
        ("check-lossless --samples in Arabic-Indic digits", [*check, "--samples", "٣٠٠"]),
        ("check-lossless cspd --samples 10", ["check-lossless", "--method", "cspd", "--samples", "10"]),
        ("check-lossless cspd --samples huge", ["check-lossless", "--method", "cspd", "--samples", str(10**9)]),
        ("check-lossless cspd --greedy", ["check-lossless", "--method", "cspd", "--greedy"]),
        ("check-lossless cspd --toy", ["check-lossless", "--method", "cspd", "--toy", "llama"]),
    ]
    figures = ["figures", str(EXAMPLE), "--out", str(tmp / "figures")]
    unknown_model = str(tmp / "unknown-model.json")  # a trace made by a model this version does not know
    Path(unknown_model).write_text(json.dumps({**json.loads(EXAMPLE.read_text()), "model": "dalle"}))
    cases += [
        ("figures missing trace", ["figures", str(tmp / "none.json"), "--out", str(tmp / "figures")]),
        ("figures a folder as trace", ["figures", str(tmp), "--out", str(tmp / "figures")]),
        ("figures garbage trace", ["figures", str(tmp / "binary-prompts.txt"), "--out", str(tmp / "figures")]),
        ("figures --format", [*figures, "--format", "bmp"]),
        ("figures --style", [*figures, "--style", "neon"]),
        ("figures --width-in", [*figures, "--width-in", "0"]),
        ("figures --iteration", [*figures, "--iteration", "100000"]),
        ("figures --out a file", ["figures", str(EXAMPLE), "--out", str(tmp / "a-file")]),
        ("figures --out too long a name", ["figures", str(EXAMPLE), "--out", str(tmp / ("f" * 300))]),
        ("figures --out in a .git folder", ["figures", str(EXAMPLE), "--out", str(tmp / "repository" / ".git" / "f")]),
        ("figures --width-in nan", [*figures, "--width-in", "nan"]),
        ("figures --iteration in Arabic-Indic digits", [*figures, "--iteration", "٣"]),
        ("figures --image of an unknown model", ["figures", unknown_model, "--out", str(tmp / "figures"), "--image"]),
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
    "text-dropout": "model.dropout must be a number from 0.0 to 1.0, got 'x'",
    "huge-vocabulary": "model.vocab_size must be an integer from 2 to 65536, got 1000000000000",
    "empty-weights": "model.safetensors is not a readable safetensors file",
    "garbage-weights": "model.safetensors is not a readable safetensors file",
    "pickle-weights": "model.safetensors is not a readable safetensors file",
    "nan-weights": "model.safetensors: tensor '.*' holds NaN or infinite values",
    "missing-codebook": "codebook.safetensors missing",
    "wrong-key-codebook": "needs a 'codebook' tensor",
    "truncated-head": "head.safetensors is not a readable safetensors file",
    "nan-head": "head.safetensors: tensor '.*' holds NaN or infinite values",
    "huge-head": "head.json: config.hidden_size must be an integer from 8 to 4096",
    "head-vocabulary": "head.json: config.vocab_size must be an integer from 2 to 65536",
    "text-head-dropout": "head.json: config.attention_dropout must be a number",
}
CONTINUOUS_WEIGHTS_MESSAGES = {
    "truncated-projection": "projection.safetensors is not a readable safetensors file",
    "nan-projection": "projection.safetensors: tensor 'basis' holds NaN or infinite values",
    "nan-target": "target.safetensors: tensor '.*' holds NaN or infinite values",
    "text-dropout": "target.json: model.dropout must be a number from 0.0 to 1.0, got 'x'",
    "huge-vocabulary": "target.json: model.vocab_size must be an integer from 1 to 65536",
    "no-heads": "target.json: model.num_heads must be an integer from 1 to 64, got 0",
    "huge-prefix": "target.json: model.prefix_len must be an integer from 1 to 64",
    "list-summary": "target.json has no 'model' section",
}


def test_each_way_a_weights_folder_is_wrong_gets_its_own_message(tmp_path):
    from specviz.core.errors import ModelUnavailable
    from specviz.models.tiny.adapter import TinyModel
    from specviz.models.tiny_continuous.adapter import TinyContinuousModel

    for loader, folders, messages in (
        (TinyModel.load, _weights_folders(tmp_path / "tiny"), WEIGHTS_MESSAGES),
        (TinyContinuousModel.load, _continuous_weights_folders(tmp_path / "continuous"), CONTINUOUS_WEIGHTS_MESSAGES),
    ):
        assert set(folders) == set(messages)
        for name, folder in folders.items():
            with pytest.raises(ModelUnavailable, match=messages[name]) as refused:
                loader(folder)
            assert "\n" not in str(refused.value), name


def _paths_under(folder: Path) -> set[Path]:
    """Every file and folder under `folder`: a refused command must leave no empty folder behind either."""
    return set(folder.rglob("*"))


def test_bad_command_lines_get_one_clean_line(tmp_path, capsys):
    cases = _cases(tmp_path)
    before = _paths_under(tmp_path)
    failures = []
    for what, argv in cases:
        try:
            status = cli.main(argv)
        except SystemExit as stop:  # argparse's own refusals: usage and one error line, status 2
            status = stop.code
        captured = capsys.readouterr()
        errors = [line for line in captured.err.splitlines() if line.strip()]
        clean = len(errors) == 1 and errors[0].startswith("error:") and "Traceback" not in captured.err
        clean = clean and len(errors[0]) <= MAX_LINE  # a hostile value is quoted by a short prefix
        if status not in (2, 3) or not clean:
            failures.append(f"{what}: status {status}, stderr {captured.err[-300:]!r}")
    assert not failures, "\n".join(failures)
    assert _paths_under(tmp_path) == before, "a refused command wrote files or left folders"
    assert not (tmp_path / "out").exists() and not (tmp_path / "figures").exists()
    print(f"{len(cases)} bad command lines, all refused cleanly")


@pytest.mark.parametrize("threads", ["²", "٣", "0", "-1", "abc", str(10**12)])
def test_a_bad_thread_count_is_refused_before_any_work(monkeypatch, capsys, threads):
    """str.isdigit takes superscripts and every script's digits; int() then fails on '²' and reads '٣' as 3."""
    monkeypatch.setenv("SPECVIZ_THREADS", threads)
    assert cli.main(["models"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: SPECVIZ_THREADS must be a whole number from 1 to") and "\n" not in err


def test_bad_command_lines_as_real_processes(tmp_path):
    out = str(tmp_path / "o")
    cases = [  # bytes that are not UTF-8 reach Python as surrogates; an offline hub is a model that cannot load
        (["run", "--prompt", "red \udcff apple", "--out", out], {}, 2),
        (["run", "--prompt", "x", "--model", "janus-pro", "--out", out], {}, 3),
        (["run", "--prompt", "x", "--seed", "٣", "--out", out], {}, 2),
        (["run", "--prompt", "x", "--out", str(tmp_path / ("x" * 300))], {}, 2),
        (["run", "--prompt", "x", "--out", out], {"SPECVIZ_THREADS": "²"}, 2),
        (["bench-mar", "--models", "mar-b", "--repeats", "1", "--device", "mps"], {}, 2),
    ]
    for argv, env, expected in cases:
        result = subprocess.run(
            [sys.executable, "-m", "specviz", *argv],
            capture_output=True,
            text=True,
            errors="surrogateescape",
            timeout=120,
            env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HOME": str(tmp_path), **env},
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
